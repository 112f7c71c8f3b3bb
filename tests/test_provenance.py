"""zmr.model.provenance: is a branch tip a release commit zmr built? Each way a commit can fail to be one, on real commits."""

from __future__ import annotations

import pytest

from zmr.infra import git
from zmr.model.provenance import not_built_by_zmr, replaced_ref

ZMR = git.Identity("zmr", "zmr@example.com", 1_700_000_000)
SOMEONE = git.Identity("Someone", "someone@example.com", 1_700_000_500)
PIN = "a" * 40


def _trailers(**fields: str) -> str:
    return "\n".join(f"{name}: {value}" for name, value in fields.items())


RELEASE = _trailers(**{"Zmr-Model": "toy", "Zmr-Component": "rollout", "Zmr-Upstream-Commit": PIN, "Zmr-Series": "patches/toy/rollout"})


@pytest.fixture
def repo(tmp_path):
    repo = git.init_bare(tmp_path / "r.git")
    repo.tree = repo.write_tree(env={"GIT_INDEX_FILE": str(tmp_path / "index")})  # the empty tree
    return repo


def _commit(repo, message: str, parents=(), committer: git.Identity = ZMR) -> str:
    return repo.commit_tree(repo.tree, parents, message, ZMR, committer)


def test_a_two_commit_release_is_zmrs(repo):
    snapshot = _commit(repo, f"Snapshot\n\nZmr-Upstream-Commit: {PIN}\n")
    tip = _commit(repo, f"Changes\n\n{RELEASE}\n", [snapshot])
    assert not_built_by_zmr(repo, tip, "toy", "rollout") == ""


def test_a_snapshot_release_is_zmrs_when_it_names_its_upstream(repo):
    tip = _commit(repo, f"Snapshot release\n\n{RELEASE}\nZmr-Upstream: https://example.com/up.git\n")
    assert not_built_by_zmr(repo, tip, "toy", "rollout") == ""
    bare = _commit(repo, f"Snapshot release\n\n{RELEASE}\n")
    assert "without a Zmr-Upstream trailer" in not_built_by_zmr(repo, bare, "toy", "rollout")


def test_each_way_a_tip_is_not_zmrs(repo):
    snapshot = _commit(repo, f"Snapshot\n\nZmr-Upstream-Commit: {PIN}\n")
    other_snapshot = _commit(repo, f"Snapshot\n\nZmr-Upstream-Commit: {'b' * 40}\n")
    tip = _commit(repo, f"Changes\n\n{RELEASE}\n", [snapshot])
    cases = {
        _commit(repo, "A hand-made commit\n"): "no Zmr-Model/Zmr-Component trailers",
        tip: "",
        _commit(repo, f"Changes\n\n{RELEASE}\n", [snapshot], committer=SOMEONE): "committed by someone other than its author",
        _commit(repo, f"On top\n\n{RELEASE}\n", [tip]): "has commits on top of or below a release layout",
        _commit(repo, f"Changes\n\n{RELEASE}\n", [other_snapshot]): f"does not name {PIN[:12]}",
        _commit(repo, f"Changes\n\n{_trailers(**{'Zmr-Model': 'toy', 'Zmr-Component': 'rollout'})}\n", [snapshot]): "no Zmr-Upstream-Commit/Zmr-Series",
    }
    for commit, why in cases.items():
        answer = not_built_by_zmr(repo, commit, "toy", "rollout")
        assert (why in answer) if why else answer == "", (why, answer)
    assert "of other/rollout" in not_built_by_zmr(repo, tip, "other", "rollout")  # another model's release


def test_a_replaced_tip_is_kept_under_its_branch_and_id():
    assert replaced_ref("rollout/toy", "c" * 40) == f"refs/zmr/replaced/rollout/toy/{'c' * 40}"
