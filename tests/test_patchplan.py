"""zmr.ops.patchplan, the export planner: the pure parts (series text, the commits a series holds); test_export runs whole exports."""

from __future__ import annotations

import pytest
from conftest import git, make_upstream

from zmr.infra import git as zgit
from zmr.ops.patchplan import ExportError, list_commits, render_series
from zmr.model.series import parse_series_file

OLD = """\
# the toy series
# why the split size matters:
0001-fix-split.patch
0002-contiguous.patch -p0 # keep -p0

# tail comment
"""


def _render(new):
    entries, problems = parse_series_file(OLD, "series")
    assert problems == []
    return render_series(OLD, entries, new)


def test_an_unchanged_series_is_byte_for_byte_the_same():
    assert _render([("0001-fix-split.patch", 1, "0001-fix-split.patch"), ("0002-contiguous.patch", 0, "0002-contiguous.patch")]) == OLD


def test_a_rename_keeps_options_comments_and_its_comment_block():
    new = [("0001-use-a-fixed-split.patch", 1, "0001-fix-split.patch"), ("0002-contiguous.patch", 0, "0002-contiguous.patch")]
    assert _render(new) == OLD.replace("0001-fix-split.patch", "0001-use-a-fixed-split.patch")


def test_new_entries_follow_the_entry_they_follow_and_removed_ones_go():
    new = [("0001-fix-split.patch", 1, "0001-fix-split.patch"), ("0002-new.patch", 1, None), ("0003-deeper.patch", 2, None)]
    assert _render(new) == ("# the toy series\n# why the split size matters:\n0001-fix-split.patch\n0002-new.patch\n0003-deeper.patch -p2\n\n# tail comment\n")
    assert _render([]) == "\n# tail comment\n"  # the comment lines directly above a removed entry go with it


def test_the_commits_of_a_series_are_linear(tmp_path):
    up = make_upstream(tmp_path / "up", [{"f": "1\n"}, {"f": "2\n"}, {"f": "3\n"}])
    base, one, two = up.commits
    repo = zgit.Repo.discover(up.path)
    assert list_commits(repo, base, two, "toy/rollout") == [one, two]
    git("switch", "-q", "-c", "side", base, cwd=up.path)
    (up.path / "g").write_text("side\n")
    git("add", "g", cwd=up.path)
    git("commit", "-q", "-m", "side", cwd=up.path)
    git("switch", "-q", "main", cwd=up.path)
    git("merge", "-q", "--no-ff", "-m", "Merge side", "side", cwd=up.path)
    merge = git("rev-parse", "HEAD", cwd=up.path).strip()
    with pytest.raises(ExportError) as refused:
        list_commits(repo, base, merge, "toy/rollout")
    assert refused.value.message == f"toy/rollout: commit {merge[:12]} (Merge side) is a merge; a series is linear"
