"""Manifest validation: every error class, its exact message and exit status 2."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_project, zmr
from zmr.infra.errors import ZmrError
from zmr.model.manifest import Policy, parse_manifest, ref_format_problem

CORPUS = Path(__file__).parent / "data" / "bad-manifests"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def _series_folders_for(manifest: Path) -> None:
    """An empty series for each component the manifest names, where the YAML reads: the corpus is about the manifest itself
    (a missing series folder is reported beside the manifest's problems, tests/test_validate.py)."""
    try:
        node = yaml.compose(manifest.read_bytes(), Loader=yaml.SafeLoader)  # composed, not constructed: tags stay nodes
    except (yaml.YAMLError, UnicodeDecodeError):
        return
    values = dict((k.value, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)) if isinstance(node, yaml.MappingNode) else {}
    components = values.get("components")
    for key_node, _ in components.value if isinstance(components, yaml.MappingNode) else ():
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if isinstance(key, str) and key and "/" not in key and not key.startswith("."):
            folder = manifest.parent.parent / "patches" / manifest.stem / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "series").touch()


@pytest.mark.parametrize("case", CASES)
def test_bad_manifest_is_reported_with_file_line_and_fix(case, tmp_path):
    project = make_project(tmp_path / "p")
    shutil.copy(CORPUS / case / "m.yaml", project.root / "manifests" / "m.yaml")
    _series_folders_for(project.root / "manifests" / "m.yaml")
    expected = (CORPUS / case / "expected.txt").read_text().splitlines()
    *lines, status = expected
    result = zmr("validate", cwd=project.root)
    assert f"rc={result.returncode}" == status
    err = result.stderr.splitlines()
    assert err[0].startswith("zmr: error: ") and "manifests/m.yaml" in err[0]
    assert [line.strip() for line in err[1:]] == lines
    for line in lines:  # every message is file:line: problem; fix
        assert line.startswith("manifests/m.yaml:")
        assert "; " in line


def test_corpus_covers_the_issue_classes():
    # Branch as commit, unknown keys, model/stem, component keys, branch names, all-at-once.
    for needed in ("branch-as-commit", "unknown-key", "model-mismatch", "bad-component-key", "bad-branch", "many-errors"):
        assert needed in CASES


def test_all_errors_of_a_file_are_reported_together(tmp_path):
    lines = (CORPUS / "many-errors" / "expected.txt").read_text().splitlines()[:-1]
    assert len(lines) == 4
    assert [int(l.split(":")[1]) for l in lines] == sorted(int(l.split(":")[1]) for l in lines)


def test_good_manifest_defaults(tmp_path):
    project = make_project(tmp_path / "p")
    sha = "a" * 40
    path = project.write("manifests/demo.yaml", f"model: demo\ncomponents:\n  rollout:\n    upstream: https://example.invalid/x.git\n    commit: {sha}\n")
    manifest, problems = parse_manifest(path, project.root)
    assert problems == []
    comp = manifest.components["rollout"]
    assert (comp.branch, comp.release, comp.patches, comp.track) == ("rollout/demo", "two-commit", "patches/demo/rollout", None)
    assert manifest.title == "demo"
    assert comp.commit_line == 5


def test_untrusted_refuses_local_paths_and_file_urls(tmp_path):
    project = make_project(tmp_path / "p")
    sha = "b" * 40
    path = project.write("manifests/m.yaml", f"model: m\ncomponents:\n  a:\n    upstream: file:///etc\n    commit: {sha}\n  b:\n    upstream: /srv/repo.git\n    commit: {sha}\n")
    assert parse_manifest(path, project.root)[1] == []
    _, problems = parse_manifest(path, project.root, Policy(untrusted=True))
    text = [str(p) for p in problems]
    assert text == [
        "manifests/m.yaml:4: components.a.upstream: file:// URLs are refused for untrusted manifests; use a path relative to the repository root, or a network URL",
        "manifests/m.yaml:7: components.b.upstream: path '/srv/repo.git' leaves the repository, refused for untrusted manifests; ship the upstream as a bundle inside the repository",
    ]
    result = zmr("validate", "--untrusted", cwd=project.root)
    assert result.returncode == 2 and "file:// URLs are refused" in result.stderr


def test_branch_of_another_model_is_refused(tmp_path):
    project = make_project(tmp_path / "p")
    sha = "c" * 40
    project.write("manifests/alpha.yaml", f"model: alpha\ncomponents:\n  rollout:\n    upstream: https://example.invalid/x.git\n    commit: {sha}\n")
    project.write("manifests/beta.yaml", f"model: beta\ncomponents:\n  rollout:\n    upstream: https://example.invalid/x.git\n    commit: {sha}\n    branch: rollout/alpha\n")
    result = zmr("validate", "beta", cwd=project.root)
    assert result.returncode == 2
    assert "manifests/beta.yaml:3: components.rollout.branch: 'rollout/alpha' is already the branch of alpha/rollout" in result.stderr


def test_unknown_model_is_named(tmp_path):
    project = make_project(tmp_path / "p")
    result = zmr("validate", "nosuch", cwd=project.root)
    assert result.returncode == 2
    assert "no manifest for model 'nosuch'" in result.stderr


@pytest.mark.parametrize(
    "name,ok",
    [("rollout/demo", True), ("a/b.c_d-e", True), ("a..b", False), ("a/.hidden", False), ("x.lock", False), ("a b", False), ("a/", False), ("@", False), ("a@{b", False), ("a:b", False)],
)
def test_ref_format_rules(name, ok):
    assert (ref_format_problem(name) == "") is ok


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(text=st.text(max_size=400) | st.binary(max_size=400).map(lambda b: b.decode("latin-1")))
def test_parser_never_crashes(tmp_path, text):
    path = tmp_path / "manifests" / "fuzz.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        manifest, problems = parse_manifest(path, tmp_path)
    except ZmrError:
        return
    assert (manifest is None) == bool(problems)
    for problem in problems:
        assert str(problem).startswith("manifests/fuzz.yaml")


@settings(max_examples=200, deadline=None)
@given(
    model=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),
    key=st.text(alphabet="abcXYZ019-_ ", min_size=1, max_size=8),
    commit=st.text(alphabet="0123456789abcdefABCDEFmainv.", min_size=1, max_size=45),
)
def test_parser_structured_fuzz(tmp_path_factory, model, key, commit):
    root = tmp_path_factory.mktemp("fz")
    path = root / "manifests" / f"{model}.yaml"
    path.parent.mkdir()
    path.write_text(f"model: {model}\ncomponents:\n  '{key}':\n    upstream: https://example.invalid/x.git\n    commit: '{commit}'\n")
    manifest, problems = parse_manifest(path, root)
    valid_commit = len(commit) in (40, 64) and all(c in "0123456789abcdef" for c in commit)
    valid_key = bool(re.fullmatch(r"[a-z0-9][a-z0-9-]*", key))
    assert (manifest is not None) == (valid_commit and valid_key)
    if manifest is None:
        assert all(str(p).startswith(f"manifests/{model}.yaml:") for p in problems)
