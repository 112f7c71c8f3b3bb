"""zmr.model.project: which repository a command acts on, where its state lives, and checkouts kept out of git status."""

from __future__ import annotations

import pytest
from conftest import git

from zmr.infra.errors import ZmrError
from zmr.model.project import Project, Settings


@pytest.fixture(autouse=True)
def _no_zmr_repo(monkeypatch):
    monkeypatch.delenv("ZMR_REPO", raising=False)


def _repo(path, *, manifests: bool = True):
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    if manifests:
        (path / "manifests").mkdir()
    return path


def test_the_nearest_folder_with_manifests_is_the_project(tmp_path):
    root = _repo(tmp_path / "repo")
    (root / "cases" / "toy").mkdir(parents=True)
    assert Project.find(root / "cases" / "toy").root == root.resolve()
    assert Project.find(root).settings == Settings()


def test_a_git_repository_that_is_no_project_says_to_run_zmr_init(tmp_path):
    root = _repo(tmp_path / "plain", manifests=False)
    (root / "src").mkdir()
    with pytest.raises(ZmrError) as raised:
        Project.find(root / "src")
    assert raised.value.message == f"{root.resolve()}: not a zmr project yet (no manifests/ folder or zmr.yaml)"
    assert raised.value.details[0].startswith(f"run `zmr init` in {root.resolve()} to make it one")
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(ZmrError, match="not inside a zmr repository"):
        Project.find(tmp_path / "nowhere")


def test_zmr_repo_names_the_project_and_is_what_is_wrong_when_it_is(tmp_path, monkeypatch):
    root = _repo(tmp_path / "repo")
    monkeypatch.setenv("ZMR_REPO", str(root))
    assert Project.find(tmp_path).root == root.resolve()
    monkeypatch.setenv("ZMR_REPO", str(tmp_path / "missing"))
    with pytest.raises(ZmrError, match="ZMR_REPO=.*missing: no such folder") as raised:
        Project.find(tmp_path)
    assert raised.value.details == ["point ZMR_REPO at a zmr repository, or unset it to find the repository from the current folder"]


def test_a_checkout_anywhere_belongs_to_the_project_its_config_names(tmp_path):
    root = _repo(tmp_path / "repo")
    checkout = _repo(tmp_path / "elsewhere" / "rollout", manifests=False)
    git("config", "zmr.project", str(root), cwd=checkout)
    assert Project.find(checkout).root == root
    git("config", "zmr.project", str(tmp_path / "not-a-project"), cwd=checkout)  # a stale record is not followed
    with pytest.raises(ZmrError, match="not a zmr project yet"):
        Project.find(checkout)


def test_the_state_folder_is_in_the_git_directory_of_the_work_tree(tmp_path):
    root = _repo(tmp_path / "repo")
    git("commit", "-q", "--allow-empty", "-m", "start", cwd=root)
    assert Project(root, Settings()).state_dir == (root / ".git" / "zmr").resolve()
    linked = tmp_path / "linked"
    git("worktree", "add", "-q", str(linked), cwd=root)
    assert Project(linked, Settings()).state_dir == (root / ".git" / "worktrees" / "linked" / "zmr").resolve()  # its own state
    (tmp_path / "bare-folder").mkdir()
    with pytest.raises(ZmrError, match="not a git repository; zmr keeps its working state"):
        Project(tmp_path / "bare-folder", Settings()).state_dir  # noqa: B018 - the property raises


def test_exclude_checkouts_once_and_not_where_git_ignores_work_already(tmp_path):
    root = _repo(tmp_path / "repo")
    exclude = root / ".git" / "info" / "exclude"
    exclude.write_text("*.swp")  # no newline at the end
    project = Project(root, Settings())
    project.exclude_checkouts()
    project.exclude_checkouts()
    assert exclude.read_text() == "*.swp\n# zmr: checkouts (zmr checkout)\n/work/\n"
    other = _repo(tmp_path / "ignored")
    (other / ".gitignore").write_text("work/\n")
    before = (other / ".git" / "info" / "exclude").read_bytes()
    Project(other, Settings()).exclude_checkouts()
    assert (other / ".git" / "info" / "exclude").read_bytes() == before
