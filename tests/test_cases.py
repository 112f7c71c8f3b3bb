"""zmr.model.cases: case.yaml read into the library's model, every problem with file and line; manifests and cases checked together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import make_project

DATA = Path(__file__).parent / "data" / "docs"
REPO_ROOT = Path(__file__).resolve().parents[1]

BAD_CASES = sorted(p.name for p in (DATA / "bad-cases").iterdir() if p.is_dir())


@pytest.mark.parametrize("name", BAD_CASES)
def test_bad_case(name, tmp_path):
    """Each folder holds a case.yaml and expected.txt: the exact problems, in order."""
    from zmr.model.cases import load_cases

    root = tmp_path / "repo"
    (root / "cases" / name).mkdir(parents=True)
    (root / "cases" / "demo").mkdir()
    (root / "cases" / "demo" / "README.md").write_text("# demo\n")
    shutil.copy(DATA / "bad-cases" / name / "case.yaml", root / "cases" / name / "case.yaml")
    found, problems = load_cases(root)
    expected = (DATA / "bad-cases" / name / "expected.txt").read_text().splitlines()
    assert [str(p) for p in sorted(problems, key=lambda p: (p.path, p.line))] == expected
    assert found == []


def test_case_library_model(tmp_path):
    """The parsed case keeps file order, takes scalars as written and folds nothing itself."""
    from zmr.model.cases import Branch, Feature, Hardware, Link, Run, load_cases

    root = tmp_path / "repo"
    shutil.copytree(DATA / "project", root)
    found, problems = load_cases(root)
    assert problems == []
    alpha, gamma = found
    assert alpha.model == "alpha" and alpha.title == "Alpha-MoE 8x1B"
    assert alpha.evidence.links == (Link("case study", "cases/alpha/README.md"), Link("run log", "https://example.org/runs/alpha-42"))
    assert alpha.evidence.runs == (
        Run("40 RL steps, KL = 0 at every step", "8 H200", (Link("verl#1", "https://github.com/volcengine/verl/pull/1"),)),
        Run("a second run without hardware"),
    )
    assert alpha.features == (
        Feature("attention", "MLA, batch-invariant split-KV"),
        Feature("MoE", "fixed expert order | deterministic all-to-all"),
        Feature("LoRA", "yes"),
        Feature("training context parallel", "2", "experimental"),
        Feature("expert parallel", "EP8", "supported"),
    )
    assert alpha.hardware == (Hardware("H200", "validated", "8 GPUs, CUDA 13.0"), Hardware("B200", "not verified", ""))
    assert alpha.overhead.footnote[0].startswith("Measured with scripts/bench_rollout.py on 8 H200 GPUs") and alpha.overhead.footnote[1] == "Second item."
    assert alpha.short_title == "Alpha" and alpha.rollout == "toy engine" and alpha.order is None and alpha.branches == ()
    assert gamma.hardware == (Hardware("H200", "validated", ""), Hardware("B200", "validated", "one node"))
    assert gamma.trainer is None and gamma.evidence is None and gamma.overhead is None
    assert gamma.order == 1 and gamma.branches == (Branch("engine", "engine/gamma"), Branch("trainer", "trainer/gamma", "snapshot"))


def test_repository_case_files_are_valid():
    from zmr.model.cases import load_cases

    found, problems = load_cases(REPO_ROOT)
    assert [str(p) for p in problems] == []
    assert "demo" in {c.model for c in found}


def test_check_project_reports_manifest_and_case_problems_together(tmp_path):
    """What `zmr validate` calls: both kinds of file, one error; a model may have only a case."""
    from zmr.model.cases import CaseError, check_project
    from zmr.infra.errors import ZmrError
    from zmr.model.project import Project as ZmrProject

    project = make_project(tmp_path / "project")
    shutil.copytree(DATA / "project" / "cases", project.root / "cases")
    project.manifest("alpha", "model: alpha\ncomponents:\n  rollout:\n    upstream: https://example.org/a.git\n    commit: main\n")
    shutil.copytree(DATA / "bad-cases" / "duplicate-key", project.root / "cases" / "duplicate-key")
    zp = ZmrProject.find(project.root)
    with pytest.raises(CaseError) as info:
        check_project(zp)
    assert [str(p) for p in info.value.problems] == [
        "cases/duplicate-key/case.yaml:3: top level: duplicate key 'family' (first at line 1); keep one of them",
        "manifests/alpha.yaml:3: components.rollout: series folder patches/alpha/rollout does not exist; fix `patches:` (or the component's name),"
        + " or, for a component without patches, create patches/alpha/rollout/series, empty",
        "manifests/alpha.yaml:5: components.rollout.commit: 'main' is not a full commit id (a branch or tag name is not a pin); "
        + "pin the commit: run `git ls-remote https://example.org/a.git main` and write the 40-hex id it prints",
    ]
    assert info.value.exit_code == 2
    manifests, found = check_project(zp, ["gamma"])
    assert manifests == [] and [c.model for c in found] == ["gamma"]
    with pytest.raises(ZmrError, match="no manifest for model 'nope' in .*, and no case in "):
        check_project(zp, ["nope"])
