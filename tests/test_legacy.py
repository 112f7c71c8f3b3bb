"""zmr.ops.legacy: a ``.zmr/`` folder in the work tree is never read as state; what passes the checks is migrated once."""

from __future__ import annotations

import pytest
from conftest import git

from zmr.ops.legacy import MIGRATED_MARKER, migrate
from zmr.model.manifest import Policy
from zmr.model.project import Project, Settings

PIN = "1" * 40


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "repo"
    (root / "manifests").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    (root / "manifests/toy.yaml").write_text(f"model: toy\ncomponents:\n  rollout:\n    upstream: https://example.com/r.git\n    commit: {PIN}\n")
    return root


def _head(root) -> str:
    return f".zmr/ in the work tree is not read: zmr keeps its working state in {(root / '.git' / 'zmr').resolve()} now"


def test_no_legacy_folder_means_nothing_to_say_and_no_state_made(root):
    assert migrate(Project(root, Settings())) == []
    assert not (root / ".git" / "zmr").exists()


def test_it_is_looked_at_once(root):
    (root / ".zmr").mkdir()
    project = Project(root, Settings())
    assert migrate(project) == [f"{_head(root)}; delete .zmr/ (what is left there is not used)"]
    assert (project.state_dir / MIGRATED_MARKER).is_file()
    assert migrate(Project(root, Settings())) == []


def test_a_tracked_folder_may_come_from_a_commit_and_is_not_migrated(root):
    (root / ".zmr" / "checkouts" / "toy").mkdir(parents=True)
    (root / ".zmr" / "checkouts" / "toy" / "rollout").write_text("/somewhere\n")
    git("add", "-f", ".zmr", cwd=root)
    assert migrate(Project(root, Settings())) == [f"{_head(root)} (.zmr/ is tracked by git, so a commit may have put it there: nothing migrated); delete it"]
    assert (root / ".zmr" / "checkouts" / "toy" / "rollout").is_file()  # left where it is


def test_a_link_or_untrusted_manifests_migrate_nothing(root, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (root / ".zmr").symlink_to(tmp_path / "elsewhere")
    assert migrate(Project(root, Settings())) == [f"{_head(root)} (.zmr/ is not a real folder: nothing migrated); delete it"]
    other = tmp_path / "other"
    (other / "manifests").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=other)
    (other / ".zmr").mkdir()
    assert migrate(Project(other, Settings(), Policy(untrusted=True))) == [f"{_head(other)} (--untrusted: nothing migrated)"]


def test_a_remembered_dir_that_names_no_checkout_of_this_repository_stays(root, tmp_path):
    pointer = root / ".zmr" / "checkouts" / "toy" / "rollout"
    pointer.parent.mkdir(parents=True)
    pointer.write_text(f"{tmp_path / 'not-a-checkout'}\n")
    project = Project(root, Settings())
    assert migrate(project) == [f"{_head(root)}; delete .zmr/ (what is left there is not used)"]
    assert pointer.is_file()
