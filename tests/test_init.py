"""`zmr init`: a git repository becomes a zmr project; nothing that exists changes."""

from __future__ import annotations

import json
import re

import yaml

from conftest import REPO_ROOT, actionlint, git, zmr


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
    assert set(workflow["jobs"]) == {"verify", "smoke", "diff", "publish", "upstreamed", "update", "update-pull-requests"}
    assert "permissions" not in workflow["jobs"]["update"]  # it runs upstream's smoke tests: the workflow's read-only token
    assert workflow["jobs"]["update-pull-requests"]["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert "pip install" not in (repo / ".github/workflows/zmr.yml").read_text()  # the action installs zmr
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


def _action_uses(text: str) -> list[str]:
    return re.findall(r"^ *- uses: (Inferact/zero-mismatch-rl@\S+)$", text, re.M)


def test_init_workflows_use_zmrs_action_by_a_commit_that_has_every_input_they_pass(tmp_path):
    """`uses: Inferact/zero-mismatch-rl@<full commit id>`: the commit exists in this repository, and its action.yml
    declares every input the written workflows pass (a workflow naming an input the pinned action lacks fails on
    GitHub); never a bare `zmr==X`, which resolves on a package index where anyone can register the name."""
    from zmr.ops.init import RELEASED_COMMIT, ZMR_SOURCE, zmr_action, zmr_requirement

    repo = _repo(tmp_path / "fresh")
    assert zmr("init", cwd=repo).returncode == 0
    texts = [(repo / path).read_text() for path in (".github/workflows/zmr.yml", ".github/workflows/zmr-diff-comment.yml")]
    references = {ref for text in texts for ref in _action_uses(text)}
    assert references == {f"Inferact/zero-mismatch-rl@{RELEASED_COMMIT}"} == {zmr_action()}, references
    assert re.fullmatch(r"[0-9a-f]{40}", RELEASED_COMMIT)  # a full commit id: immutable, unlike a tag or a branch
    assert zmr_requirement() == f"zmr @ git+{ZMR_SOURCE}@{RELEASED_COMMIT}"  # pip's reference names the same commit
    # The reference resolves in a clone of this repository ...
    clone = tmp_path / "zmr-clone"
    git("clone", "-q", "--no-checkout", str(REPO_ROOT), str(clone), cwd=tmp_path)
    assert git("cat-file", "-t", RELEASED_COMMIT, cwd=clone).strip() == "commit"
    # ... and its action.yml declares every input the workflows pass, and the commands they ask for.
    action = yaml.safe_load(git("show", f"{RELEASED_COMMIT}:action.yml", cwd=clone))
    declared = set(action["inputs"])
    for text in texts:
        workflow = yaml.safe_load(text)
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("Inferact/zero-mismatch-rl@"):
                    assert set(step["with"]) <= declared, (step["with"], declared)
                    assert f"{step['with']['command']} (" in action["inputs"]["command"]["description"], step["with"]["command"]
                    helpers = re.findall(r"\$GITHUB_ACTION_PATH/(\S+?)\"", str(action["runs"]["steps"]))
                    for helper in helpers:  # the scripts the action runs are in that commit too
                        assert git("cat-file", "-t", f"{RELEASED_COMMIT}:{helper}", cwd=clone).strip() == "blob", helper
    assert "zmr==" not in "".join(texts) and "pip install" not in "".join(texts)
    # actionlint, with the action of that commit as `./` (actionlint reads a local action's inputs, fetches none).
    (repo / "action.yml").write_text(git("show", f"{RELEASED_COMMIT}:action.yml", cwd=clone) + "\n")
    for path in (repo / ".github/workflows").iterdir():
        path.write_text(re.sub(r"uses: Inferact/zero-mismatch-rl@[0-9a-f]{40}", "uses: ./", path.read_text()))
    lint = actionlint(*sorted((repo / ".github/workflows").iterdir()), cwd=repo)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr


def test_init_says_how_to_add_the_skill_and_adds_it_when_asked(tmp_path):
    repo = _repo(tmp_path / "skilled")
    first = zmr("init", cwd=repo)
    assert first.returncode == 0, first.stderr
    assert "note: no skill/ here: run `zmr init --skill` to add the zero-mismatch skill" in first.stdout
    assert not (repo / "skill").exists()
    # the advice, followed literally
    added = zmr("init", "--skill", "--json", cwd=repo)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["created"] == ["skill/"]
    source = REPO_ROOT / "skill"
    tracked = git("ls-files", "skill", cwd=REPO_ROOT).split()
    assert "skill/SKILL.md" in tracked and "skill/references/decisions.yaml" in tracked
    for rel in tracked:  # every file of the skill, the same bytes (only what the transaction wrote: no bytecode caches)
        assert (repo / rel).read_bytes() == (REPO_ROOT / rel).read_bytes(), rel
    copied = {p.relative_to(repo).as_posix() for p in (repo / "skill").rglob("*") if p.is_file()}
    assert copied == {p.relative_to(REPO_ROOT).as_posix() for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    again = zmr("init", "--skill", cwd=repo)
    assert again.returncode == 0 and again.stdout.endswith("nothing changed\n") and "note: no skill/" not in again.stdout


def test_init_without_the_skill_folder_beside_zmr_names_where_to_copy_it_from(tmp_path, monkeypatch):
    """A zmr installed from a wheel has no skill/ beside its package: --skill refuses, naming the repository and commit."""
    import pytest

    import zmr.ops.init
    from zmr.infra.errors import ZmrError
    from zmr.model.source import zmr_source

    monkeypatch.setattr(zmr.ops.init, "skill_source", lambda: None)
    url, commit = zmr_source()
    repo = _repo(tmp_path / "wheel")
    with pytest.raises(ZmrError) as refused:
        zmr.ops.init.init(repo, skill=True)
    assert "installed without its skill folder" in str(refused.value)
    assert refused.value.details == [f"copy the folder skill/ of {url} at {commit} into this repository"]
    assert not (repo / "zmr.yaml").exists()  # nothing written: one transaction
    result = zmr.ops.init.init(repo)
    assert any(f"copy the folder skill/ of {url} at {commit}" in note for note in result.notes)
