"""zmr.model.selection: the one rule (docs/reference.md §6.4) of which components a command acts on."""

from __future__ import annotations

import pytest
from conftest import git

from zmr.infra.errors import ZmrError
from zmr.model.project import Project, Settings
from zmr.model.selection import acts_on_all, components, one_component

PIN = "1" * 40


@pytest.fixture
def project(tmp_path):
    """Two models: alpha (rollout, trainer) and beta (rollout); manifests only, nothing fetched."""
    root = tmp_path / "repo"
    (root / "manifests").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    for model, keys in (("alpha", ("rollout", "trainer")), ("beta", ("rollout",))):
        lines = [f"model: {model}", "components:"]
        for key in keys:
            lines += [f"  {key}:", f"    upstream: https://example.com/{key}.git", f"    commit: {PIN}"]
        (root / "manifests" / f"{model}.yaml").write_text("\n".join(lines) + "\n")
    return Project(root, Settings())


def _labels(chosen):
    return [f"{c.model}/{c.key}" for c in chosen]


def test_a_read_only_command_acts_on_every_model_when_none_is_named():
    assert acts_on_all(None, False, writes=False) is True
    assert acts_on_all(["alpha"], False, writes=False) is False
    assert acts_on_all(None, True, writes=True) is True


def test_a_writing_command_needs_a_model_or_all():
    with pytest.raises(ZmrError, match="name one or more models, or pass --all"):
        acts_on_all(None, False, writes=True)
    assert acts_on_all(["alpha"], False, writes=True) is False


def test_components_in_manifest_order_or_in_the_order_of_the_keys(project):
    assert _labels(components(project, None, None, writes=False)) == ["alpha/rollout", "alpha/trainer", "beta/rollout"]
    assert _labels(components(project, ["alpha"], None, writes=True)) == ["alpha/rollout", "alpha/trainer"]
    assert _labels(components(project, ["alpha"], ["trainer", "rollout"], writes=True)) == ["alpha/trainer", "alpha/rollout"]
    assert _labels(components(project, None, ["trainer"], all_models=True, writes=True)) == ["alpha/trainer"]  # beta has none: skipped


def test_a_key_no_chosen_model_has_is_an_error(project):
    with pytest.raises(ZmrError) as one:
        components(project, ["beta"], ["trainer"], writes=True)
    assert "trainer" in one.value.message and "rollout" in str(one.value.details + [one.value.message])  # the known keys of the one model
    with pytest.raises(ZmrError, match="no component named vision in the selected models"):
        components(project, None, ["vision"], writes=False)


def test_one_component_for_a_rebase(project):
    assert _labels([one_component(project, "beta", None)]) == ["beta/rollout"]
    assert _labels([one_component(project, "alpha", ["trainer"])]) == ["alpha/trainer"]
    with pytest.raises(ZmrError, match="model 'alpha' has several components; name one with -c"):
        one_component(project, "alpha", None)
    with pytest.raises(ZmrError, match="rebase one component at a time"):
        one_component(project, "alpha", ["rollout", "trainer"])
    with pytest.raises(ZmrError, match="name the model to rebase"):
        one_component(project, None, None)
    with pytest.raises(ZmrError, match="no rebase in progress"):
        one_component(project, None, None, in_progress=True)


def test_the_rebase_under_way_is_found_without_a_model(project):
    trainer = one_component(project, "alpha", ["trainer"])
    state = project.rebase_state(trainer)
    state.parent.mkdir(parents=True)
    state.write_text("{}")
    assert _labels([one_component(project, None, None, in_progress=True)]) == ["alpha/trainer"]
    assert _labels([one_component(project, "alpha", None, in_progress=True)]) == ["alpha/trainer"]  # the model's one rebase
    other = one_component(project, "beta", None)
    project.rebase_state(other).parent.mkdir(parents=True)
    project.rebase_state(other).write_text("{}")
    with pytest.raises(ZmrError, match="several rebases are in progress") as both:
        one_component(project, None, None, in_progress=True)
    assert both.value.details == ["zmr rebase alpha -c trainer ...", "zmr rebase beta -c rollout ..."]
    assert _labels([one_component(project, None, ["rollout"], in_progress=True)]) == ["beta/rollout"]  # -c picks among them
