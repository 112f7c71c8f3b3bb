"""zmr.model.patchfile: a commit as a patch mail and back (names, dates, headers, messages, canonical diffs), on real commits."""

from __future__ import annotations

import pytest
from conftest import git, make_upstream

from zmr.infra import git as zgit
from zmr.model.patchfile import CommitMeta, commit_diff, commit_diffs, format_date, format_mail, message_cut, patch_name, slug, split_message
from zmr.model.series import parse_patch


def test_split_message_joins_the_first_paragraph_as_format_patch_does():
    assert split_message("\n\nFix the\nsplit size\n\nWhy it matters.\r\n\nMore.\n") == ("Fix the split size", "Why it matters.\n\nMore.")
    assert split_message("Subject only\n") == ("Subject only", "")


@pytest.mark.parametrize(
    ("message", "cut"),
    [
        ("Subject\n\nbody\n---\nrest", (4, "---")),
        ("Subject\n\nsee:\ndiff --git a/x b/x\n", (4, "diff --git a/x b/x")),
        ("Subject\n\n--- a/file quoted\n", (3, "--- a/file quoted")),
        ("Subject\n\nIndex: x\n", (3, "Index: x")),
        ("---\n\nthe subject paragraph never cuts\n", None),
        ("Subject\n\n---- four dashes\n -- indented ---\n", None),
    ],
)
def test_message_cut_finds_the_line_a_patch_file_would_end_the_message_at(message, cut):
    assert message_cut(message) == cut


def test_slug_and_patch_name():
    assert slug("Use a fixed split size!") == "use-a-fixed-split-size"
    assert slug("[PATCH v2 3/7] Fix it") == "fix-it"
    assert slug("[RFC] Keep other tags") == "rfc-keep-other-tags"
    assert slug("!!!") == "patch"
    long = slug("word " * 30)
    assert len(long) <= 52 and long.endswith("word") and not long.endswith("-")
    assert patch_name(7, "Add a test") == "0007-add-a-test.patch"


def test_format_date_is_gits_in_the_authors_offset():
    assert format_date(1_710_000_000, "+0000") == "Sat, 9 Mar 2024 16:00:00 +0000"
    assert format_date(1_710_000_000, "-0530") == "Sat, 9 Mar 2024 10:30:00 -0530"
    assert format_date(1_710_000_000, "bogus") == "Sat, 9 Mar 2024 16:00:00 +0000"


@pytest.mark.parametrize(
    "meta",
    [
        CommitMeta("Ada Lovelace", "ada@example.com", 1_710_000_000, "+0100", "Fix the split size", "Batch-invariant now.\n\nSigned-off-by: Ada"),
        CommitMeta("Jürgen Größe", "jg@example.com", 1_700_000_000, "-0700", "Ändere die Größe", ""),
    ],
)
def test_a_mail_reads_back_as_the_same_commit(tmp_path, meta):
    diff = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-1\n+2\n"
    mail = format_mail(meta, diff)
    assert mail.startswith(b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert (b"Content-Transfer-Encoding: 8bit" in mail) == (meta.name != "Ada Lovelace")
    assert mail.endswith(b"---\n" + diff)
    patch = parse_patch(mail, "0001-x.patch")
    assert CommitMeta.for_patch(patch) == meta


def test_commit_diffs_of_a_history_equal_each_commit_diff(tmp_path):
    up = make_upstream(tmp_path / "up", [{"f": "1\n"}, {"f": "2\n", "g": "new\n"}, {"g": None, "h": "moved\n"}])
    repo = zgit.Repo.discover(up.path)
    a, b, c = up.commits
    diffs = commit_diffs(repo, [b, c])
    assert diffs == {b: commit_diff(repo, a, b), c: commit_diff(repo, b, c)}
    assert diffs[b].startswith(b"diff --git a/f b/f\nindex ") and b"+new\n" in diffs[b]
    # Canonical whatever the repository's config says (full index, no color, 3 lines of context).
    git("config", "diff.context", "0", cwd=up.path)
    git("config", "color.diff", "always", cwd=up.path)
    assert commit_diff(repo, a, b) == diffs[b]
    assert commit_diffs(repo, []) == {}
