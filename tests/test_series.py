"""Series reading: quilt syntax, format-patch and plain diffs, Debian layout, errors."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import git, make_patch, make_project, zmr
from zmr.infra.errors import ZmrError
from zmr.model.series import SeriesError, parse_patch, parse_series_file, read_series


def _unified(old: str, new: str, old_label: str, new_label: str, tmp: Path) -> str:
    a, b = tmp / "old.txt", tmp / "new.txt"
    a.write_text(old)
    b.write_text(new)
    proc = subprocess.run(["diff", "-u", "--label", old_label, "--label", new_label, str(a), str(b)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def test_debian_quilt_series_builds_the_same_tree_as_gnu_patch(tmp_path, upstream):
    pin = upstream.commits[2]
    readme = upstream.file_at(pin, "README.md") + "\n"
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    guide = upstream.file_at(pin, "docs/guide.md") + "\n"
    dep3 = (
        "Description: Fix the README wording\n"
        " The README said toy; it is a tiny model.\n"
        "Author: Debian Maintainer <maint@debian.invalid>\n"
        "Forwarded: not-needed\n"
        "Last-Update: 2024-03-01\n"
        "---\n"
        "This patch header follows DEP-3.\n"
        + _unified(readme, "tiny upstream\n", "a/README.md", "b/README.md", tmp_path)
    )
    p0 = _unified(model_py, model_py.replace("line 20\n", "line 20 (p0)\n"), "src/model.py.orig", "src/model.py", tmp_path)
    new_file = (
        "Subject: add a notes file\n\n"
        + _unified("", "notes\nmore notes\n", "a/docs/NOTES", "b/docs/NOTES", tmp_path).replace("--- a/docs/NOTES", "--- /dev/null", 1)
    )
    mail = make_patch(upstream, pin, {"docs/guide.md": guide + "appendix\n"}, "Extend the guide")
    project = make_project(tmp_path / "project")
    folder = "debian/patches"
    project.write(f"{folder}/fix-readme.patch", dep3)
    project.write(f"{folder}/upstream/0001-guide.patch", mail)
    project.write(f"{folder}/p0-style.diff", p0)
    project.write(f"{folder}/notes.patch", new_file)
    project.write(
        f"{folder}/series",
        "# patches in apply order\nfix-readme.patch\n\nupstream/0001-guide.patch   # from upstream\np0-style.diff -p0\nnotes.patch -p1\n",
    )
    project.manifest(
        "deb",
        f"""
        model: deb
        components:
          pkg:
            upstream: {upstream.path}
            commit: {pin}
            patches: {folder}
        """,
    )
    project.commit_all()
    result = zmr("build", "deb", cwd=project.root)
    assert result.returncode == 0, result.stderr
    built_tree = git("rev-parse", "pkg/deb^{tree}", cwd=project.root)
    # The same series applied the way quilt does it: GNU patch, in order, with each -pN.
    tree_dir = tmp_path / "by-gnu-patch"
    tree_dir.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", pin], cwd=upstream.path, capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(tree_dir, filter="data")  # filter: 3.10.12, 3.11.4 and later (3.14 makes it the default)
    for name, strip in (("fix-readme.patch", 1), ("upstream/0001-guide.patch", 1), ("p0-style.diff", 0), ("notes.patch", 1)):
        subprocess.run(["patch", f"-p{strip}", "--batch", "--forward", "--no-backup-if-mismatch", "-F0", "-i", str(project.root / folder / name)], cwd=tree_dir, check=True, capture_output=True)
    git("init", "-q", cwd=tree_dir)
    git("add", "-A", cwd=tree_dir)
    assert git("write-tree", cwd=tree_dir) == built_tree
    series = read_series(project.root / folder, folder)
    assert [p.subject for p in series.patches] == ["Fix the README wording", "Extend the guide", "p0 style", "add a notes file"]
    assert series.patches[0].author_email == "maint@debian.invalid"
    assert [p.strip for p in series.patches] == [1, 1, 0, 1]


def test_series_file_syntax():
    entries, problems = parse_series_file("# c\n\na.patch\nsub/b.patch -p0 # note\n  c.patch\n", "series")
    assert problems == []
    assert [(e.name, e.strip, e.line) for e in entries] == [("a.patch", 1, 3), ("sub/b.patch", 0, 4), ("c.patch", 1, 5)]


@pytest.mark.parametrize(
    "line,message",
    [
        ("/etc/passwd", "series:1: patch name '/etc/passwd' is absolute; use a path relative to the series folder"),
        ("../other/x.patch", "series:1: patch name '../other/x.patch' contains '..'; use a path relative to the series folder"),
        ("--exec.patch", "series:1: patch name '--exec.patch' starts with '-'; use a path relative to the series folder"),
        ("a.patch -R", "series:1: unsupported option '-R' for a.patch; only -pN is supported (quilt's -R reverse patches are not)"),
    ],
)
def test_series_name_errors(line, message):
    _, problems = parse_series_file(line + "\n", "series")
    assert [str(p) for p in problems] == [message]


def test_missing_patch_unlisted_patch_and_symlink_escape(tmp_path):
    folder = tmp_path / "patches/m/c"
    folder.mkdir(parents=True)
    (folder / "series").write_text("present.patch\nmissing.patch\nlink.patch\n")
    (folder / "present.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (folder / "stray.patch").write_text("")
    outside = tmp_path / "secret.patch"
    outside.write_text("x")
    (folder / "link.patch").symlink_to(outside)
    with pytest.raises(SeriesError) as info:
        read_series(folder, "patches/m/c")
    text = str(info.value)
    assert "patches/m/c/series:2: missing.patch: patch file not found; add patches/m/c/missing.patch or remove the line" in text
    assert "patches/m/c/series:3: link.patch resolves outside the series folder" in text
    (folder / "series").write_text("present.patch\n")
    series = read_series(folder, "patches/m/c")
    assert series.warnings == ["patches/m/c/link.patch: not listed in series (ignored); add it to series or delete it", "patches/m/c/stray.patch: not listed in series (ignored); add it to series or delete it"]


def test_validate_reports_series_problems_and_warnings(tmp_path, upstream):
    project = make_project(tmp_path / "p")
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {upstream.commits[0]}\n")
    project.write("patches/m/c/series", "gone.patch\n")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "patches/m/c/series:1: gone.patch: patch file not found" in result.stderr
    project.write("patches/m/c/series", "")
    project.write("patches/m/c/extra.patch", "")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 0
    assert "warning: patches/m/c/extra.patch: not listed in series" in result.stderr


def test_format_patch_metadata(upstream):
    data = make_patch(upstream, upstream.commits[0], {"README.md": "changed\n"}, "Fix [the] thing", "Body line one.\n\nBody line two.", date=1_712_345_678)
    patch = parse_patch(data, "0001-x.patch")
    assert patch.subject == "Fix [the] thing"
    assert patch.author_name == "Patch Author" and patch.author_email == "author@zmr.invalid"
    assert patch.timestamp == 1_712_345_678
    assert patch.body == "Body line one.\n\nBody line two."


def test_encoded_subject_and_author():
    data = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: =?UTF-8?q?J=C3=BCrgen=20M=C3=BCller?= <jm@example.invalid>\n"
        b"Date: Tue, 2 Jan 2024 10:00:00 +0100\n"
        b"Subject: [PATCH 3/7] =?UTF-8?q?Fix=20na=C3=AFve=20split?=\n"
        b" continued\n\n---\n"
    )
    patch = parse_patch(data, "x.patch")
    assert patch.subject == "Fix na\u00efve split continued"
    assert patch.author_name == "J\u00fcrgen M\u00fcller"
    assert (patch.timestamp, patch.offset) == (1704186000, "+0100")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_patch_parser_never_crashes(data):
    try:
        patch = parse_patch(data, "fuzz.patch")
    except ZmrError:
        return
    assert isinstance(patch.subject, str) and patch.subject


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_series_parser_never_crashes(text):
    entries, problems = parse_series_file(text, "series")
    for entry in entries:
        assert not entry.name.startswith(("/", "-")) and ".." not in entry.name.split("/")


@pytest.mark.parametrize(
    "written, read",
    [
        ("[PATCH] Fix it", "Fix it"),
        ("[PATCH v2 3/7] Fix it", "Fix it"),
        ("[RFC PATCH] Fix it", "Fix it"),
        ("[PATCH] [Bugfix] Fix it", "[Bugfix] Fix it"),
        ("[Bugfix] [PATCH 1/2] Fix it", "[Bugfix] Fix it"),
        ("[rollout, vllm] Fix it", "[rollout, vllm] Fix it"),
        ("[Kernel][Perf] Fix it", "[Kernel][Perf] Fix it"),
    ],
)
def test_subjects_lose_only_patch_tags_as_git_mailinfo_b_does(written, read, tmp_path):
    from zmr.model.series import parse_patch

    data = f"From: A <a@b.invalid>\nDate: Sat, 9 Mar 2024 16:00:00 +0000\nSubject: {written}\n\n---\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n".encode()
    assert parse_patch(data, "0001-x.patch").subject == read
    mail = tmp_path / "mail"
    mail.write_bytes(data)
    info = subprocess.run(["git", "mailinfo", "-b", str(tmp_path / "msg"), str(tmp_path / "patch")], stdin=mail.open("rb"), capture_output=True, check=True).stdout.decode()
    assert f"Subject: {read}\n" in info


_ADVERSARIAL_DIFF = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
_ADVERSARIAL_HEADERS = {
    # Each about 1 MB; every one took minutes (or, the folded ones, tens of seconds) when header parsing was quadratic (#47).
    "spaces in a subject": b"From: A <a@b.invalid>\nSubject: x" + b" " * 1_000_000 + b"y\n\n---\n",
    "folded subject": b"From: A <a@b.invalid>\nSubject: x\n" + b" y\n" * 330_000 + b"\n---\n",
    "subject tags": b"From: A <a@b.invalid>\nSubject: " + b"[a]" * 330_000 + b"x\n\n---\n",
    "DEP-3 folded subject": b"Description: x\nSubject: y\n" + b" z\n" * 330_000 + b"\n---\n",
    "spaces in an Origin header": b"From: A <a@b.invalid>\nSubject: x\n\nOrigin: backport, x" + b" " * 1_000_000 + b"y\n---\n",
    "spaces in an Upstream-Status header": b"From: A <a@b.invalid>\nSubject: x\n\nUpstream-Status: pending" + b" " * 1_000_000 + b"y\n---\n",
    "encoded words": b"From: A <a@b.invalid>\nSubject: " + b"=?utf-8?q?" * 100_000 + b"\n\n---\n",
}


@pytest.mark.parametrize("kind", sorted(_ADVERSARIAL_HEADERS))
def test_header_parsing_stays_linear_in_a_large_adversarial_header(kind):
    """A patch's header (mail headers, DEP-3 fields, Upstream-Status) is read in time linear in its size: 1 MB of a hostile one in a few seconds."""
    import time

    from zmr.model.upstream_status import status_of

    data = _ADVERSARIAL_HEADERS[kind] + _ADVERSARIAL_DIFF
    started = time.process_time()  # CPU time: a busy machine's other work does not count
    patch = parse_patch(data, "0001-x.patch")
    status_of(patch)
    elapsed = time.process_time() - started
    assert patch.subject  # it read something
    assert elapsed < 5, f"{kind}: {elapsed:.1f} s for {len(data)} bytes"


_GROWING_HEADERS = {
    # n lines of one kind in a patch's header: mail fields, folds, repeated fields, DEP-3 fields, trailers before the diff.
    "mail header lines": lambda n: b"From: A <a@b.invalid>\nSubject: x\n" + b"X-Field: v\n" * n + b"\n---\n",
    "folded subject": lambda n: b"From: A <a@b.invalid>\nSubject: x\n" + b" y\n" * n + b"\n---\n",
    "folded author": lambda n: b"From: A\n" + b" <a@b.invalid>\n" * n + b"Subject: x\n\n---\n",
    "repeated subjects": lambda n: b"From: A <a@b.invalid>\n" + b"Subject: x\n" * n + b"\n---\n",
    "DEP-3 fields": lambda n: b"Description: x\nSubject: y\n" + b"Forwarded: no\n" * n + b"\n---\n",
    "Upstream-Status lines": lambda n: b"From: A <a@b.invalid>\nSubject: x\n\n" + b"Upstream-Status: pending\n" * n + b"---\n",
    "subject tags": lambda n: b"From: A <a@b.invalid>\nSubject: " + b"[a] " * n + b"x\n\n---\n",
    # and one huge line: n*8 spaces in a subject or an Upstream-Status, n encoded words
    "spaces in a subject": lambda n: b"From: A <a@b.invalid>\nSubject: x" + b" " * (8 * n) + b"y\n\n---\n",
    "spaces in an Upstream-Status": lambda n: b"From: A <a@b.invalid>\nSubject: x\n\nUpstream-Status: pending" + b" " * (8 * n) + b"y\n---\n",
    "encoded words": lambda n: b"From: A <a@b.invalid>\nSubject: " + b"=?utf-8?q?" * n + b"\n\n---\n",
}


@pytest.mark.parametrize("kind", sorted(_GROWING_HEADERS))
def test_header_parsing_time_grows_linearly_with_the_number_of_header_lines(kind):
    """#47.12: reading a header 8 times as long (8 times the lines, or one line 8 times as long) takes about 8 times as
    long, not 64 (quadratic): the ratio of two sizes measured in one run, in this process's CPU time (the cores' other
    work, a parallel run's included, does not count) and the best of three each, with a generous bound of 24."""
    import time

    from zmr.model.upstream_status import status_of

    def best(n: int) -> float:
        data = _GROWING_HEADERS[kind](n) + _ADVERSARIAL_DIFF
        times = []
        for _ in range(3):
            started = time.process_time()
            patch = parse_patch(data, "0001-x.patch")
            status_of(patch)
            times.append(time.process_time() - started)
            assert patch.subject  # it read something
        return min(times)

    small, large = best(4_000), best(32_000)
    assert large / small < 24, f"{kind}: {small * 1000:.1f} ms at n=4,000, {large * 1000:.1f} ms at n=32,000 ({large / small:.1f} times)"


def test_an_adversarial_header_reads_as_before():
    """The linear readers give what the old ones gave on ordinary headers: folding, tags kept and dropped, a repeated field's first value."""
    data = (
        b"From: A <a@b.invalid>\nSubject: [PATCH v2 1/3] [Bugfix]  fold\n here\n\tand there\nSubject: second\n\nbody\n---\n" + _ADVERSARIAL_DIFF
    )
    patch = parse_patch(data, "0001-x.patch")
    assert patch.subject == "[Bugfix] fold here and there" and patch.body == "body"
    dep3 = parse_patch(b"Description: d\nSubject: one\n two\nAuthor: B <b@b.invalid>\n\n---\n" + _ADVERSARIAL_DIFF, "0002-y.patch")
    assert dep3.subject == "one two" and dep3.author_email == "b@b.invalid"
