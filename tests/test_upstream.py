"""zmr.ops.upstream: the read-only analysis of an upstream's history against a series, on real repositories."""

from __future__ import annotations

from conftest import git, make_upstream

from zmr.infra import git as zgit
from zmr.ops.upstream import commit_subject, first_parent_line, pair_series, upstream_commits, upstream_patch_ids


def _commit(path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (path / name).write_text(text)
    git("add", "--", *files, cwd=path)
    git("commit", "-q", "-m", message, cwd=path)
    return git("rev-parse", "HEAD", cwd=path).strip()


def test_first_parent_line_keeps_only_commits_that_descend_from_the_pin(tmp_path):
    up = make_upstream(tmp_path / "up", [{"f": "1\n"}, {"f": "2\n"}])
    a, b = up.commits
    repo = zgit.Repo.discover(up.path)
    assert first_parent_line(repo, a, b) == [b]
    git("switch", "-q", "-c", "side", a, cwd=up.path)
    s1 = _commit(up.path, {"s": "1\n"}, "side 1")
    s2 = _commit(up.path, {"s": "2\n"}, "side 2")
    git("switch", "-q", "main", cwd=up.path)
    git("merge", "-q", "--no-ff", "-m", "Merge side", "side", cwd=up.path)
    merge = git("rev-parse", "HEAD", cwd=up.path).strip()
    c = _commit(up.path, {"f": "3\n"}, "after the merge")
    # The pin came in through the merge: b is on main's first-parent line but does not descend from s1.
    assert first_parent_line(repo, s1, c) == [merge, c]
    assert s2 not in first_parent_line(repo, s1, c)  # second-parent commits are not on the line
    assert first_parent_line(repo, a, c) == [b, merge, c]


def test_upstream_commits_and_their_patch_ids_are_those_touching_the_paths(tmp_path):
    up = make_upstream(tmp_path / "up", [{"f": "1\n", "g": "1\n"}])
    (base,) = up.commits
    touch_f = _commit(up.path, {"f": "2\n"}, "change f")
    _commit(up.path, {"g": "2\n"}, "change g")
    touch_f_again = _commit(up.path, {"f": "3\n", "g": "3\n"}, "change both")
    repo = zgit.Repo.discover(up.path)
    assert upstream_commits(repo, base, touch_f_again, ["f"]) == [touch_f, touch_f_again]
    assert upstream_commits(repo, base, touch_f_again, []) == []
    ids = upstream_patch_ids(repo, base, touch_f_again, ["f"], shapes={frozenset({"f"})})
    assert list(ids.values()) == [touch_f]  # "change both" touches another file set: never diffed
    assert commit_subject(repo, touch_f) == "change f" and commit_subject(repo, None) == "" and commit_subject(repo, "0" * 40) == ""


def test_pair_series_pairs_by_range_diff_and_leaves_a_new_commit_added(tmp_path):
    up = make_upstream(tmp_path / "up", [{"f": "1\n", "g": "1\n"}])
    (base,) = up.commits
    old_tip = _commit(up.path, {"f": "patched\n"}, "Patch f")
    git("switch", "-q", "-c", "moved", base, cwd=up.path)
    new_base = _commit(up.path, {"g": "upstream moved\n"}, "Upstream change")
    same = _commit(up.path, {"f": "patched\n"}, "Patch f")
    changed = _commit(up.path, {"f": "patched again\n"}, "Patch f again")
    repo = zgit.Repo.discover(up.path)
    pairs = pair_series(repo, base, [old_tip], ["0001-patch-f.patch"], new_base, [same, changed], ["0001-patch-f.patch", "0002-patch-f-again.patch"])
    assert [(p.old, p.sign, p.new) for p in pairs] == [(0, "=", 0), (None, ">", 1)]  # the patch unchanged on the new base; a new one
    assert pairs[1].new_name == "0002-patch-f-again.patch" and pairs[1].old_name is None
    assert repo.range_diff(f"{base}..{old_tip}", f"{'0' * 40}..{changed}") is None  # git cannot compare: None, no error
