"""`zmr new`: a scaffolded model validates, renders in the README and builds; never overwrites; bad specs write nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import git, make_project, zmr
from zmr.model.cases import parse_case
from zmr.ops.docs import SECTIONS
from zmr.model.manifest import load_manifests
from zmr.model.series import read_series

SHA_A = "0123456789abcdef0123456789abcdef01234567"
SHA_B = "89abcdef0123456789abcdef0123456789abcdef"
README = "# project\n\n" + "".join(f"<!-- zmr:begin {name} -->\n<!-- zmr:end {name} -->\n\n" for name in SECTIONS)
EXPECTED_FILES = [
    "manifests/qwen3.yaml",
    "patches/qwen3/rollout/series",
    "patches/qwen3/trainer/series",
    "cases/qwen3/README.md",
    "cases/qwen3/recipe.md",
    "cases/qwen3/case.yaml",
    "cases/qwen3/evidence/README.md",
]


def _tree(root: Path) -> dict[str, bytes]:
    """The repository's files, not git's nor zmr's own state (.zmr/: the lock of the write)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not {".git", ".zmr"} & set(p.relative_to(root).parts)
    }


def test_new_model_validates_renders_and_builds(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    project.write("README.md", README)
    project.commit_all("empty project")
    result = zmr(
        "new", "qwen3",
        "--component", f"rollout=https://github.com/vllm-project/vllm.git@{SHA_A}",
        "-c", f"trainer={upstream.path}@{upstream.commits[1]}",
        "--title", "Qwen3-8B: dense, bf16",
        cwd=project.root,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[: len(EXPECTED_FILES)] == [f"created  {f}" for f in EXPECTED_FILES]
    assert sorted(p for p in _tree(project.root) if p != "README.md") == sorted(EXPECTED_FILES)
    # the manifest: the components asked for, pinned, default branches
    (manifest,) = load_manifests(project.root, ["qwen3"])
    assert manifest.title == "Qwen3-8B: dense, bf16"
    assert [(c.key, c.upstream, c.commit, c.branch) for c in manifest.components.values()] == [
        ("rollout", "https://github.com/vllm-project/vllm.git", SHA_A, "rollout/qwen3"),
        ("trainer", str(upstream.path), upstream.commits[1], "trainer/qwen3"),
    ]
    # empty series, with a comment header
    for comp in ("rollout", "trainer"):
        series = project.root / f"patches/qwen3/{comp}/series"
        assert series.read_text().startswith(f"# Zero-mismatch series of qwen3/{comp}")
        assert read_series(series.parent, f"patches/qwen3/{comp}").patches == []
    # the case: valid under zmr.model.cases' schema, linking its README and recipe
    case, problems = parse_case(project.root / "cases/qwen3/case.yaml", project.root)
    assert problems == [] and case is not None
    assert case.family and case.status and [link.url for link in case.evidence.links] == ["cases/qwen3/README.md", "cases/qwen3/recipe.md"]
    readme = (project.root / "cases/qwen3/README.md").read_text()
    for heading in ("## Support status", "## What broke and how it was fixed", "## Evidence", "## Upstreamed changes"):
        assert heading in readme
    assert f"| rollout | `https://github.com/vllm-project/vllm.git` | `{SHA_A}` | `patches/qwen3/rollout/` |" in readme
    assert "zmr build qwen3" in (project.root / "cases/qwen3/recipe.md").read_text()
    # straight away: validate, docs, docs --check, and a build of the local component
    validate = zmr("validate", "qwen3", cwd=project.root)
    assert validate.returncode == 0, validate.stderr
    assert zmr("docs", cwd=project.root).returncode == 0
    rendered = (project.root / "README.md").read_text()
    assert "[Qwen3-8B: dense, bf16](cases/qwen3/README.md)" in rendered and "`trainer/qwen3`" in rendered
    check = zmr("docs", "--check", cwd=project.root)
    assert check.returncode == 0, check.stdout + check.stderr
    build = zmr("build", "qwen3", "-c", "trainer", cwd=project.root)
    assert build.returncode == 0, build.stderr
    assert project.ref("refs/heads/trainer/qwen3")


def test_new_json_output(tmp_path):
    project = make_project(tmp_path / "project")
    result = zmr("new", "m1", "-c", f"engine=https://example.com/engine.git@{SHA_B}", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "tool": "zmr",
        "zmr": __import__("zmr.model.source", fromlist=["version"]).version(),
        "schema_version": 1,
        "model": "m1",
        "files": ["manifests/m1.yaml", "patches/m1/engine/series", "cases/m1/README.md", "cases/m1/recipe.md", "cases/m1/case.yaml", "cases/m1/evidence/README.md"],
        "changed": [],
        "warnings": [],
    }
    assert load_manifests(project.root, ["m1"])[0].title == "m1"


@pytest.mark.parametrize("existing,shown", [
    ("manifests/qwen3.yaml", "manifests/qwen3.yaml"),
    ("cases/qwen3/README.md", "cases/qwen3/"),
    ("patches/qwen3/rollout/series", "patches/qwen3/"),
])
def test_new_refuses_to_overwrite(tmp_path, existing, shown):
    project = make_project(tmp_path / "project")
    project.write(existing, "mine\n")
    before = _tree(project.root)
    result = zmr("new", "qwen3", "-c", f"rollout=https://github.com/vllm-project/vllm.git@{SHA_A}", cwd=project.root)
    assert result.returncode == 2
    if existing.startswith("manifests/"):  # a manifest there: new adds to it, once it validates (this one does not)
        assert "zmr: error: manifests/qwen3.yaml: fix it before adding a component" in result.stderr, result.stderr
    else:
        assert f"zmr: error: model 'qwen3' already exists: {shown}" in result.stderr
        assert "zmr new never overwrites" in result.stderr
    assert _tree(project.root) == before


def test_new_twice_refuses_the_second_time(tmp_path):
    project = make_project(tmp_path / "project")
    spec = f"rollout=https://github.com/vllm-project/vllm.git@{SHA_A}"
    assert zmr("new", "qwen3", "-c", spec, cwd=project.root).returncode == 0
    before = _tree(project.root)
    again = zmr("new", "qwen3", "-c", spec, "--title", "Other", cwd=project.root)
    assert again.returncode == 2
    assert "manifests/qwen3.yaml has a component 'rollout' already" in again.stderr, again.stderr
    assert _tree(project.root) == before


def test_new_on_an_existing_model_adds_the_component(tmp_path, upstream):
    """issue #36: `zmr new MODEL -c comp=URL@REV` on an existing model refused; now it adds the component (manifest text kept, an empty series)."""
    project = make_project(tmp_path / "project")
    assert zmr("new", "qwen3", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", cwd=project.root).returncode == 0
    manifest = project.root / "manifests/qwen3.yaml"
    manifest.write_text(manifest.read_text().replace("title: qwen3", "title: qwen3  # my comment"))
    before = manifest.read_text()
    added = zmr("new", "qwen3", "-c", f"trainer={upstream.path}@main", "--json", cwd=project.root)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["files"] == ["manifests/qwen3.yaml", "patches/qwen3/trainer/series"]
    after = manifest.read_text()
    head = before.split("# Model-level smoke tests")[0].rstrip("\n")
    assert after.startswith(head) and "# my comment" in after  # what was there is kept, byte for byte
    assert after.endswith(before[len(head):])
    (loaded,) = load_manifests(project.root, ["qwen3"])
    assert sorted(loaded.components) == ["rollout", "trainer"]
    assert loaded.components["trainer"].commit == upstream.commits[-1] and loaded.components["trainer"].track == "main"
    assert read_series(project.root / "patches/qwen3/trainer", "patches/qwen3/trainer").patches == []
    assert zmr("validate", "qwen3", cwd=project.root).returncode == 0
    assert zmr("build", "qwen3", cwd=project.root).returncode == 0
    unchanged = _tree(project.root)
    again = zmr("new", "qwen3", "-c", f"trainer={upstream.path}@main", cwd=project.root)
    assert again.returncode == 2 and "has a component 'trainer' already" in again.stderr
    assert _tree(project.root) == unchanged


URL = "https://github.com/vllm-project/vllm.git"
BAD_SPECS = [
    (["rollout"], "--component 'rollout': expected NAME=URL@SHA"),
    ([f"rollout={URL}"], f"--component 'rollout={URL}': no @SHA after the upstream"),
    ([f"Roll_out={URL}@{SHA_A}"], "'Roll_out' is not a valid component name"),
    ([f"rollout={URL}@{SHA_A.upper()}"], f"has upper-case hex digits; write it in lower case: {SHA_A}"),
    ([f"rollout=ext::sh -c touch% /tmp/x@{SHA_A}"], "transport 'ext':: runs commands and is not allowed"),
    # Checked before zmr new fetches anything to resolve a branch (tests/test_new_resolve.py resolves them).
    (["rollout=ext::sh -c touch% /tmp/x@main"], "transport 'ext':: runs commands and is not allowed"),
    ([f"rollout=upstreams/missing.bundle@{SHA_A}"], "components.rollout.upstream: 'upstreams/missing.bundle' does not exist"),
    ([f"rollout={URL}@{SHA_A}", f"rollout={URL}@{SHA_B}"], "component 'rollout' is given twice"),
    ([], "zmr new qwen3: name at least one component"),
]


@pytest.mark.parametrize("specs,message", BAD_SPECS, ids=[m.split(":")[0][:40] for _, m in BAD_SPECS])
def test_new_bad_component_specs_write_nothing(tmp_path, specs, message):
    project = make_project(tmp_path / "project")
    before = _tree(project.root)
    args = [a for spec in specs for a in ("--component", spec)]
    result = zmr("new", "qwen3", *args, cwd=project.root)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert _tree(project.root) == before
    assert not (project.root / "cases").exists() and not (project.root / "patches").exists()


def test_new_bad_model_name(tmp_path):
    project = make_project(tmp_path / "project")
    result = zmr("new", "Qwen3", "-c", f"rollout={URL}@{SHA_A}", cwd=project.root)
    assert result.returncode == 2
    assert "zmr: error: 'Qwen3' is not a valid model name" in result.stderr
    assert list((project.root / "manifests").iterdir()) == []


def test_new_rolls_back_when_the_whole_project_does_not_validate(tmp_path):
    # Another model already uses the branch the new one would get by default.
    project = make_project(tmp_path / "project")
    project.manifest("other", f"""
        model: other
        components:
          rollout:
            upstream: {URL}
            commit: {SHA_A}
            branch: rollout/qwen3
        """)
    before = _tree(project.root)
    result = zmr("new", "qwen3", "-c", f"rollout={URL}@{SHA_B}", cwd=project.root)
    assert result.returncode == 2
    assert "components.rollout.branch: 'rollout/qwen3' is already the branch of other/rollout" in result.stderr
    assert _tree(project.root) == before
    assert not (project.root / "cases").exists() and not (project.root / "patches").exists()


def test_an_upstream_outside_the_project_is_written_with_a_warning_that_says_what_to_use(tmp_path, upstream):
    """issue #47: `zmr new` took `../`, `/abs/path` and `file://` upstreams without a word; the pull-request CI that
    `zmr init` writes (`validate --untrusted`) then refused every pull request. It still writes them (they work on this
    machine), and warns once per such component; an upstream inside the project gets no warning."""
    project = make_project(tmp_path / "project")
    relative = os.path.relpath(upstream.path, project.root)
    assert relative.startswith("../")
    inside = project.root / "upstreams/up.git"
    git("clone", "-q", "--bare", str(upstream.path), str(inside), cwd=tmp_path)
    given = {
        "a": f"a={relative}@{upstream.commits[1]}",
        "b": f"b={upstream.path}@{upstream.commits[1]}",
        "c": f"c=file://{upstream.path}@{upstream.commits[1]}",
        "d": f"d=upstreams/up.git@{upstream.commits[1]}",
    }
    made = zmr("new", "one", "-c", given["a"], "-c", given["b"], "-c", given["c"], "-c", given["d"], cwd=project.root)
    assert made.returncode == 0, made.stderr
    warnings = [line for line in made.stderr.splitlines() if line.startswith("zmr: warning: ")]
    assert [w.split("'")[1] for w in warnings] == [given["a"], given["b"], given["c"]], made.stderr
    for w in warnings:
        assert "pull request" in w and "--untrusted" in w and "https://" in w and "upstreams/<name>.bundle" in w, w
    untrusted = zmr("validate", "--untrusted", cwd=project.root)
    assert untrusted.returncode == 2 and untrusted.stderr.count("refused for untrusted manifests") == 3, untrusted.stderr
    # The component added to a manifest that exists: its own warning only, and the manifest is "changed", not "created".
    added = zmr("new", "one", "-c", f"e={upstream.path}@{upstream.commits[1]}", cwd=project.root)
    assert added.returncode == 0, added.stderr
    assert added.stderr.count("zmr: warning: ") == 1 and "'e=" in added.stderr, added.stderr
    assert added.stdout.splitlines()[:2] == ["changed  manifests/one.yaml", "created  patches/one/e/series"], added.stdout
    report = json.loads(zmr("new", "one", "-c", f"f=upstreams/up.git@{upstream.commits[1]}", "--json", cwd=project.root).stdout)
    assert report["changed"] == ["manifests/one.yaml"] and report["files"] == ["manifests/one.yaml", "patches/one/f/series"] and report["warnings"] == []
