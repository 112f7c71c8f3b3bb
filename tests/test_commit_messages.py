"""Commit messages through a patch file: they survive checkout → export → checkout, or export refuses naming the line."""

from __future__ import annotations

import shutil

import pytest

from conftest import git, make_patch, simple_model, zmr

SERIES = "patches/toy/rollout"


def _checkout(project):
    result = zmr("checkout", "toy", "-c", "rollout", cwd=project.root)
    assert result.returncode == 0, result.stderr
    return project.root / "work/toy/rollout"


def _commit(tree, message: str) -> None:
    (tree / "src/kernels/matmul.py").write_text("def matmul(a, b):\n    return b @ a\n")
    git("commit", "-q", "-a", "-m", message, cwd=tree)


def test_a_message_with_dashes_and_quoted_diffs_survives_the_round_trip(project, upstream):
    """Lines that only look like a separator or a diff (indented, or not at the start) stay in the message."""
    simple_model(project, upstream)
    tree = _checkout(project)
    message = "Swap the operands\n\nBefore:\n  ---\n  diff --git a/x b/x\nA rule -- not a separator.\n\nSigned-off-by: A <a@b.invalid>"
    _commit(tree, message)
    result = zmr("export", "toy", "-c", "rollout", cwd=tree)
    assert result.returncode == 0, result.stderr
    project.commit_all("export")
    shutil.rmtree(tree)
    tree = _checkout(project)
    assert git("log", "-1", "--format=%B", cwd=tree) == message
    assert zmr("validate", cwd=project.root).returncode == 0


@pytest.mark.parametrize(
    "line",
    ["---", "--- a/notes.txt", "diff --git a/x b/x", "Index: src/model.py"],
)
def test_export_refuses_a_message_line_a_patch_file_would_cut_at(project, upstream, line):
    simple_model(project, upstream)
    tree = _checkout(project)
    _commit(tree, f"Swap the operands\n\nFirst paragraph.\n{line}\nWhat would be lost.")
    commit = git("rev-parse", "HEAD", cwd=tree)
    series_before = (project.root / SERIES / "series").read_bytes()
    result = zmr("export", "toy", "-c", "rollout", cwd=tree)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"commit {commit[:12]} (Swap the operands): line 4 of its message, `{line}`, would cut the message" in result.stderr
    assert "reword the commit" in result.stderr
    assert (project.root / SERIES / "series").read_bytes() == series_before
    assert not list((project.root / SERIES).glob("0003-*"))


def _series_with(project, upstream, body: str) -> None:
    pin = simple_model(project, upstream)
    extra = make_patch(upstream, pin, {"docs/guide.md": "guide, v3\n"}, "Reword the guide", body)
    text = (project.root / SERIES / "series").read_text()
    project.write(f"{SERIES}/0003-reword-the-guide.patch", extra)
    project.write(f"{SERIES}/series", text + "0003-reword-the-guide.patch\n")
    project.commit_all("a third patch")


def test_validate_catches_a_patch_file_whose_message_was_cut_at_dashes(project, upstream):
    """git format-patch (and zmr's export before this check) writes such a body as it is: `---` inside, `---` before the diff."""
    _series_with(project, upstream, "Why:\n---\nthe guide was wrong.")
    data = (project.root / SERIES / "0003-reword-the-guide.patch").read_text().split("\n")
    line = data.index("---") + 1
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2, result.stdout
    assert f"{SERIES}/0003-reword-the-guide.patch:{line}: `---` is in the commit message: zmr and git am end the message there" in result.stderr
    report = zmr("validate", "--json", cwd=project.root)
    assert report.returncode == 2
    assert '"line": %d' % line in report.stdout


def test_validate_catches_a_quoted_diff_header_in_a_message(project, upstream):
    _series_with(project, upstream, "Found with:\ndiff --git a/x b/x\nin the log.")
    data = (project.root / SERIES / "0003-reword-the-guide.patch").read_text().split("\n")
    line = data.index("diff --git a/x b/x") + 1
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2, result.stdout
    assert f"0003-reword-the-guide.patch:{line}: `diff --git a/x b/x` quotes a diff header in the message: git apply reads a diff there" in result.stderr


def test_a_git_killed_by_a_signal_is_reported_as_a_crash_of_git():
    """Not as the failure it leaves behind (git 2.39's `git apply` aborts on some messages and leaves index.lock)."""
    from zmr.infra import git as zgit

    with pytest.raises(zgit.GitCrashed) as caught:
        # A real git, killed by a real SIGABRT: the alias's shell kills the git that runs it.
        zgit.run(["-c", "alias.crash=!kill -ABRT $PPID", "crash"], check=False)
    assert str(caught.value).startswith("git crash crashed (killed by SIGABRT)")
    assert caught.value.exit_code == 2
    assert "index.lock" not in str(caught.value) and "another git process" not in str(caught.value)


DEP3 = (
    "Description: Document the guide's appendix\n"
    " The guide lacked the appendix that the kernels need.\n"
    " .\n"
    " It is short.\n"
    "Author: Debian Maintainer <maint@debian.invalid>\n"
    "Forwarded: not-needed\n"
    "Last-Update: 2024-03-01\n"
    "\n"
    "Free text after the fields extends the description.\n"
    "---\n"
    "Not part of the meta-information.\n"
    "--- a/docs/guide.md\n"
    "+++ b/docs/guide.md\n"
    "@@ -1 +1,2 @@\n"
    " guide\n"
    "+appendix\n"
)


def test_a_dep3_patch_keeps_its_last_update_day_and_long_description(project, upstream):
    """DEP-3 patches work as they are: the commit's author date is Last-Update's day, its body the long description."""
    simple_model(project, upstream)
    text = (project.root / SERIES / "series").read_text()
    project.write(f"{SERIES}/guide.diff", DEP3)
    project.write(f"{SERIES}/series", text + "guide.diff\n")
    project.commit_all("a DEP-3 patch")
    tree = _checkout(project)
    assert git("log", "-1", "--format=%an <%ae>|%aI", cwd=tree) == "Debian Maintainer <maint@debian.invalid>|2024-03-01T00:00:00+00:00"
    assert git("log", "-1", "--format=%B", cwd=tree) == (
        "Document the guide's appendix\n\nThe guide lacked the appendix that the kernels need.\n\nIt is short.\n\nFree text after the fields extends the description."
    )
    # The commit is that patch: export keeps the file's bytes.
    result = zmr("export", "toy", "-c", "rollout", cwd=tree)
    assert result.returncode == 0, result.stderr
    assert (project.root / SERIES / "guide.diff").read_text() == DEP3
    assert git("status", "--porcelain", "--", SERIES, cwd=project.root) == ""
