"""zmr.ops.validate: manifests, cases and series checked together, every problem at once, nothing written (library level)."""

from __future__ import annotations

from conftest import make_project, simple_model, zmr

from zmr.model.project import Project
from zmr.ops.validate import validate


def _project(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    return project, Project.find(project.root)


def test_a_clean_project_validates(tmp_path, upstream, monkeypatch):
    monkeypatch.delenv("ZMR_REPO", raising=False)
    _, zproject = _project(tmp_path, upstream)
    report = validate(zproject)
    assert not report.failed() and report.errors == []
    assert report.to_json() == {"ok": True, "models": ["toy"], "cases": [], "patches": 2, "problems": [], "warnings": []}


def test_every_problem_is_reported_at_once(tmp_path, upstream, monkeypatch):
    monkeypatch.delenv("ZMR_REPO", raising=False)
    project, zproject = _project(tmp_path, upstream)
    series = project.root / "patches/toy/rollout"
    first = sorted(series.glob("0001-*.patch"))[0]
    head, sep, rest = first.read_text().partition("\n\n")  # the mail's headers, then the message
    first.write_text(head + sep + "Index: a line a reader takes for a diff\n" + rest)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + "  trainer:\n    upstream: https://example.com/t.git\n    commit: " + "2" * 40 + "\n")
    before = {p: p.read_bytes() for p in project.root.rglob("*") if p.is_file() and ".git" not in p.parts}
    report = validate(zproject)
    assert report.failed()
    where = sorted(p.to_json()["file"] for p in report.problems)
    assert where == ["patches/toy/rollout/" + first.name, "patches/toy/trainer"], report.to_json()
    message = next(p for p in report.problems if p.to_json()["file"].endswith(".patch")).to_json()
    assert message["line"] and "Index: a line a reader takes for a diff" in message["message"]
    assert len(report.errors) == 2 and report.to_json()["ok"] is False
    assert {p: p.read_bytes() for p in project.root.rglob("*") if p.is_file() and ".git" not in p.parts} == before  # nothing written


def test_a_hand_added_component_gets_its_manifest_problem_and_its_missing_series_folder_at_once(tmp_path, upstream):
    """Issue #36: `commit: 'main' is not a full commit id` first, and only after that is fixed, `series folder ... does not exist`."""
    project, _ = _project(tmp_path, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text() + "  trainer:\n    upstream: https://example.com/t.git\n    commit: main\n")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert "zmr: error: 2 problems in manifests/toy.yaml" in result.stderr, result.stderr
    assert "components.trainer.commit: 'main' is not a full commit id" in result.stderr
    assert "components.trainer: series folder patches/toy/trainer does not exist; fix `patches:`" in result.stderr
    # The advice, followed: an empty series for a component without patches, and the pin of the commit.
    (project.root / "patches/toy/trainer").mkdir()
    (project.root / "patches/toy/trainer/series").write_text("")
    manifest.write_text(manifest.read_text().replace("commit: main", "commit: " + "2" * 40))
    fixed = zmr("validate", cwd=project.root)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.startswith("ok: 1 manifest")
