"""zmr export: a checkout's commits back to a byte-stable series, and what export refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checkout_fixture import QUILT, SERIES_TEXT, files, proj, three_patch_model  # noqa: F401 (proj is a fixture)
from conftest import git, make_patch, make_project, simple_model, state_dir, zmr


HOSTILE_GITCONFIG = """\
[format]
\tsignature = hostile signature
\tnumbered = true
\tsubjectPrefix = HOSTILE
\tcoverLetter = true
\tthread = shallow
\tsignOff = true
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\trenames = copies
\tcontext = 9
\tsuppressBlankEmpty = true
\talgorithm = patience
[core]
\tabbrev = 7
[user]
\tname = Hostile Person
\temail = hostile@example.com
"""


def test_export_bytes_ignore_user_and_checkout_config(proj, upstream, tmp_path):
    _pin, folder, co = three_patch_model(proj, upstream)
    record = git("config", "zmr.series", cwd=co)  # the series the checkout was made from (export's three sides)
    model_py = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(model_py.replace("line 30\n", "line 30\n\nline 30b\n"))
    (co / "src/kernels/blank.py").write_text("a = 1\n\nb = 2\n")
    git("add", "-A", cwd=co)
    git(
        "commit",
        "-q",
        "-m",
        "Add a blank-line kernel\n\nTwo files, one new.",
        cwd=co,
        env={"GIT_AUTHOR_DATE": "@1712000000 +0200", "GIT_AUTHOR_NAME": "Zoë Dev"},
    )
    # Hostile settings in the user's config and in the checkout's own config.
    Path(os.environ["HOME"], ".gitconfig").write_text(HOSTILE_GITCONFIG)
    for key, value in (
        ("diff.noprefix", "true"),
        ("diff.suppressBlankEmpty", "true"),
        ("diff.context", "1"),
        ("diff.interHunkContext", "20"),
        ("apply.ignoreWhitespace", "change"),
    ):
        git("config", key, value, cwd=co)
    hostile = zmr("export", "toy", cwd=proj.root)
    assert hostile.returncode == 0, hostile.stderr
    written = files(folder)
    data = written["0004-add-a-blank-line-kernel.patch"].decode()
    # Restore the series and export again with a clean environment: same bytes.
    git("checkout", "-q", "--", "patches", cwd=proj.root)
    git("clean", "-q", "-fd", "--", "patches", cwd=proj.root)
    Path(os.environ["HOME"], ".gitconfig").unlink()
    git("update-ref", "-d", "refs/zmr/exported", cwd=co)
    git("config", "zmr.series", record, cwd=co)
    clean = zmr("export", "toy", cwd=proj.root, env={"TZ": "Asia/Kolkata", "LC_ALL": "de_DE.UTF-8"})
    assert clean.returncode == 0, clean.stderr
    assert files(folder) == written
    # Only the new patch was written; the untouched ones (quilt style included) kept their bytes.
    assert set(written) == {"series", "0001-fixed-split.patch", "0002-contiguous.patch", "guide.diff", "NOTES.txt", "0004-add-a-blank-line-kernel.patch"}
    assert written["guide.diff"] == QUILT.encode()
    assert written["series"] == SERIES_TEXT.replace("# trailing", "0004-add-a-blank-line-kernel.patch\n# trailing").encode()
    lines = data.split("\n")
    assert lines[0] == "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
    assert lines[1] == "From: =?utf-8?q?Zo=C3=AB_Dev?= <dev@upstream.invalid>"
    assert lines[2] == "Date: Mon, 1 Apr 2024 21:33:20 +0200"
    assert lines[3] == "Subject: [PATCH] Add a blank-line kernel"
    assert "Content-Type: text/plain; charset=UTF-8" in lines
    assert (
        "\nTwo files, one new.\n---\ndiff --git a/src/kernels/blank.py b/src/kernels/blank.py\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..fe3eb89aa494c8decbe0729968cc399d5c7d6aca\n--- /dev/null\n"
        in data
    )
    assert (
        "--- a/src/model.py\n+++ b/src/model.py\n@@ -28,6 +28,8 @@ line 27\n line 28\n line 29\n line 30\n+\n+line 30b\n line 31\n line 32\n line 33\n" in data
    )
    assert "hostile" not in data.lower() and "-- \n" not in data and data.endswith(" line 33\n")
    # Reading it back gives the commit's metadata: a second export writes nothing.
    again = zmr("export", "toy", cwd=proj.root)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert files(folder) == written
    # git am takes the file as it is and makes the same tree.
    scratch = tmp_path / "am"
    git("clone", "-q", "--no-checkout", str(co), str(scratch))
    git("checkout", "-q", "-B", "am", "HEAD~1", cwd=scratch)
    git("am", "-q", str(folder / "0004-add-a-blank-line-kernel.patch"), cwd=scratch)
    assert git("rev-parse", "HEAD^{tree}", cwd=scratch) == git("rev-parse", "HEAD^{tree}", cwd=co)


def test_export_reflects_added_removed_reordered_and_reworded_commits(proj, upstream):
    _, folder, co = three_patch_model(proj, upstream)
    split, _contiguous, guide = git("rev-list", "--reverse", "zmr/base..HEAD", cwd=co).split()
    before = files(folder)
    # Reorder (guide first), reword (split), drop (contiguous), add a new one.
    git("reset", "-q", "--hard", "zmr/base", cwd=co)
    git("cherry-pick", guide, cwd=co)
    git("cherry-pick", split, cwd=co)
    git("commit", "-q", "--amend", "-m", "Fix the split size for batch invariance\n\nBatch-invariant: the split no longer depends on the row count.", cwd=co)
    (co / "setup.cfg").write_text("[metadata]\nname = toy\nversion = 2\n")
    git("add", "setup.cfg", cwd=co)
    git("commit", "-q", "-m", "Pin the toy version", cwd=co)
    result = zmr("export", "toy", "--json", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)["exports"][0]
    assert [(p["name"], p["status"], p["written"]) for p in report["patches"]] == [
        ("guide.diff", "unchanged", False),
        ("0002-fix-the-split-size-for-batch-invariance.patch", "reworded", True),
        ("0003-pin-the-toy-version.patch", "added", True),
    ]
    assert report["removed"] == ["0001-fixed-split.patch", "0002-contiguous.patch"]
    after = files(folder)
    assert after["guide.diff"] == before["guide.diff"]
    assert after["NOTES.txt"] == before["NOTES.txt"]  # never listed: never removed
    assert "0001-fixed-split.patch" not in after and "0002-contiguous.patch" not in after
    assert after["series"].decode() == (
        "# zero-mismatch series for toy/rollout\n"
        "\n"
        "# documentation, quilt style\n"
        "guide.diff\n"
        "\n"
        "# batch-invariant split\n"
        "0002-fix-the-split-size-for-batch-invariance.patch\n"
        "0003-pin-the-toy-version.patch\n"
        "# trailing comment\n"
    )
    reworded = after["0002-fix-the-split-size-for-batch-invariance.patch"].decode()
    assert "Subject: [PATCH] Fix the split size for batch invariance\n" in reworded
    assert "Date: Sat, 9 Mar 2024 16:00:00 +0000\n" in reworded
    # The new series builds, and exporting again changes nothing.
    assert zmr("validate", "toy", cwd=proj.root).returncode == 0
    again = zmr("export", "toy", cwd=proj.root)
    assert again.returncode == 0 and again.stdout.startswith("unchanged")
    assert files(folder) == after
    build = zmr("build", "toy", cwd=proj.root)
    assert build.returncode == 0, build.stderr
    assert git("rev-parse", "rollout/toy^{tree}", cwd=proj.root) == git("rev-parse", "HEAD^{tree}", cwd=co)


def test_export_refuses_a_dirty_tree_or_a_moved_base(proj, upstream):
    _, folder, co = three_patch_model(proj, upstream)
    before = files(folder)
    (co / "README.md").write_text("dirty\n")
    dirty = zmr("export", "toy", cwd=proj.root)
    assert dirty.returncode == 2
    assert "work/toy/rollout: the working tree is not clean" in dirty.stderr
    assert "uncommitted changes in README.md" in dirty.stderr
    git("checkout", "-q", "--", "README.md", cwd=co)
    manifest = proj.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(upstream.commits[1], upstream.commits[2]))
    moved = zmr("export", "toy", cwd=proj.root)
    assert moved.returncode == 2
    assert f"the base moved: the checkout is on {upstream.commits[1][:12]}, the manifest pins {upstream.commits[2][:12]}" in moved.stderr
    assert files(folder) == before
    none = zmr("export", "toy", "--dir", str(proj.root / "elsewhere"), cwd=proj.root)
    assert none.returncode == 2 and "no checkout" in none.stderr


@pytest.mark.parametrize("how", ["fetch-head", "remote", "mirror"])
def test_export_refuses_a_checkout_rebased_with_plain_git(proj, upstream, how):
    """`git rebase --onto <newer upstream> zmr/base` in the checkout: export must not turn upstream's commits into patches."""
    _, folder, co = three_patch_model(proj, upstream)
    before = files(folder)
    upstream.commit({"docs/other.md": "one\n"}, "Upstream feature one")
    newer = upstream.commit({"docs/other.md": "two\n"}, "Upstream feature two")
    if how == "fetch-head":
        git("fetch", "-q", str(upstream.path), "main", cwd=co)
    elif how == "remote":
        git("remote", "add", "up", str(upstream.path), cwd=co)
        git("fetch", "-q", "up", cwd=co)
    else:
        # zmr's mirror has the newer commits (upstreamed fetched them); the checkout got them from a scratch ref it then dropped.
        assert zmr("upstreamed", "toy", cwd=proj.root).returncode == 0
        git("fetch", "-q", str(upstream.path), "main:refs/heads/tmp", cwd=co)
        git("update-ref", "-d", "refs/heads/tmp", cwd=co)
        (co / ".git/FETCH_HEAD").unlink()
    git("rebase", "-q", "--onto", newer, "zmr/base", cwd=co)
    assert git("rev-list", "--count", "zmr/base..HEAD", cwd=co) == "6"
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 2, result.stdout
    assert "3 commits between zmr/base and HEAD are upstream's" in result.stderr
    assert f"git rebase --onto zmr/base {newer[:12]}" in result.stderr
    assert f"zmr rebase toy -c rollout --onto {newer}" in result.stderr
    assert files(folder) == before
    # The way out that the message names: the series back on the pin exports as it was.
    git("rebase", "-q", "--onto", "zmr/base", newer, cwd=co)
    again = zmr("export", "toy", cwd=proj.root)
    assert again.returncode == 0, again.stderr
    assert files(folder) == before


def test_export_refuses_a_merge_in_the_checkout(proj, upstream):
    _, _, co = three_patch_model(proj, upstream)
    git("checkout", "-q", "-b", "side", "HEAD~1", cwd=co)
    (co / "side.txt").write_text("side\n")
    git("add", "side.txt", cwd=co)
    git("commit", "-q", "-m", "Side work", cwd=co)
    git("checkout", "-q", "toy/rollout", cwd=co)
    git("merge", "-q", "--no-edit", "side", cwd=co)
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 2
    assert "is a merge; a series is linear" in result.stderr


def test_subject_tags_are_kept_in_patches_checkout_and_release_commits(proj, upstream):
    """vLLM and verl tag every subject ([Bugfix], [rollout, vllm]); only a mail's [PATCH ...] tag is dropped."""
    pin = simple_model(proj, upstream)
    folder = proj.root / "patches/toy/rollout"
    first, second = folder / "0001-fixed-split.patch", folder / "0002-contiguous.patch"
    first.write_bytes(first.read_bytes().replace(b"Subject: Use a fixed", b"Subject: [PATCH] [Bugfix] Use a fixed"))
    second.write_bytes(second.read_bytes().replace(b"Subject: Make matmul", b"Subject: [PATCH v2 2/7] [rollout, vllm] Make matmul"))
    proj.commit_all("tagged subjects")
    before = files(folder)
    assert zmr("checkout", "toy", cwd=proj.root).returncode == 0
    co = proj.root / "work/toy/rollout"
    assert git("log", "--reverse", "--format=%s", "zmr/base..", cwd=co).splitlines() == [
        "[Bugfix] Use a fixed split size in matmul",
        "[rollout, vllm] Make matmul output contiguous",
    ]
    # Byte-stable: the files re-read identically keep their bytes.
    exported = zmr("export", "toy", cwd=proj.root)
    assert exported.returncode == 0 and exported.stdout.startswith("unchanged"), exported.stdout + exported.stderr
    assert files(folder) == before
    # A new tagged commit: written as [PATCH] + the whole subject, named after all of it, read back the same.
    (co / "docs/guide.md").write_text("guide\nmore\n")
    git("commit", "-q", "-am", "[Doc] Extend the guide", cwd=co)
    assert zmr("export", "toy", cwd=proj.root).returncode == 0
    new = folder / "0003-doc-extend-the-guide.patch"
    assert b"\nSubject: [PATCH] [Doc] Extend the guide\n" in new.read_bytes()
    assert zmr("export", "toy", cwd=proj.root).stdout.startswith("unchanged")
    # `git am --keep-non-patch` (mailinfo -b) reads the subject as zmr does.
    scratch = proj.root.parent / "am"
    git("clone", "-q", str(upstream.path), str(scratch))
    git("checkout", "-q", "--detach", pin, cwd=scratch)
    git("am", "-q", "--keep-non-patch", str(first), cwd=scratch)
    assert git("log", "-1", "--format=%s", cwd=scratch) == "[Bugfix] Use a fixed split size in matmul"
    build = zmr("build", "toy", cwd=proj.root)
    assert build.returncode == 0, build.stderr
    message = git("log", "-1", "--format=%B", "rollout/toy", cwd=proj.root)
    assert "- [Bugfix] Use a fixed split size in matmul" in message and "- [rollout, vllm] Make matmul output contiguous" in message
    assert "- [Doc] Extend the guide" in message


def test_exact_renames_export_as_renames_and_round_trip(proj, upstream):
    """A moved file (text or binary) is a rename in the patch, whatever the checkout's diff config; an edited move is not."""
    _, folder, co = three_patch_model(proj, upstream)
    blob = bytes(range(256)) * 8
    (co / "assets").mkdir()
    (co / "assets/table.bin").write_bytes(blob)
    git("add", "assets/table.bin", cwd=co)
    git("commit", "-q", "-m", "Add a binary table", cwd=co)
    git("config", "diff.renames", "copies", cwd=co)
    git("config", "diff.renameLimit", "1", cwd=co)
    git("mv", "src/model.py", "src/network.py", cwd=co)
    git("mv", "assets/table.bin", "assets/weights.bin", cwd=co)
    git("commit", "-q", "-m", "Move model.py and the table", cwd=co)
    git("mv", "src/kernels/matmul.py", "src/kernels/mm.py", cwd=co)
    (co / "src/kernels/mm.py").write_text("def mm(a, b):\n    return a @ b\n")
    git("add", "-A", cwd=co)
    git("commit", "-q", "-m", "Rename and rewrite matmul", cwd=co)
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    moved = (folder / "0005-move-model-py-and-the-table.patch").read_text()
    assert "similarity index 100%\nrename from src/model.py\nrename to src/network.py\n" in moved
    assert "rename from assets/table.bin\nrename to assets/weights.bin\n" in moved
    assert "deleted file mode" not in moved and "GIT binary patch" not in moved and "@@" not in moved
    rewritten = (folder / "0006-rename-and-rewrite-matmul.patch").read_text()
    assert "rename from" not in rewritten and "deleted file mode 100644" in rewritten
    assert zmr("export", "toy", cwd=proj.root).stdout.startswith("unchanged")
    # The patches apply with plain git apply, and the release tree is the checkout's.
    scratch = proj.root.parent / "apply"
    git("clone", "-q", str(co), str(scratch))
    git("checkout", "-q", "--detach", "HEAD~2", cwd=scratch)
    git("apply", "--index", str(folder / "0005-move-model-py-and-the-table.patch"), cwd=scratch)
    assert (scratch / "assets/weights.bin").read_bytes() == blob
    build = zmr("build", "toy", cwd=proj.root)
    assert build.returncode == 0, build.stderr
    assert git("rev-parse", "rollout/toy^{tree}", cwd=proj.root) == git("rev-parse", "HEAD^{tree}", cwd=co)
    # A fresh checkout of the exported series is the same commits' trees.
    assert zmr("checkout", "toy", "--force", cwd=proj.root).returncode == 0
    assert git("rev-parse", "HEAD^{tree}", cwd=co) == git("rev-parse", "rollout/toy^{tree}", cwd=proj.root)


def test_a_new_patch_after_a_dropped_one_is_numbered_after_the_last_kept_one(proj, upstream):
    simple_model(proj, upstream)
    assert zmr("checkout", "toy", cwd=proj.root).returncode == 0
    co = proj.root / "work/toy/rollout"
    folder = proj.root / "patches/toy/rollout"
    git("rebase", "-q", "--onto", "zmr/base", "HEAD~1", cwd=co)  # drop 0001
    (co / "docs/guide.md").write_text("guide\nmore\n")
    git("commit", "-q", "-am", "Extend the guide", cwd=co)
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    assert (folder / "series").read_text() == "0002-contiguous.patch\n0003-extend-the-guide.patch\n"
    assert sorted(p.name for p in folder.iterdir()) == ["0002-contiguous.patch", "0003-extend-the-guide.patch", "series"]


def test_export_after_an_interrupted_one_reuses_its_names_and_removes_its_orphans(tmp_path, upstream):
    """What an export killed mid-write leaves (new files not yet in series, a staging folder, its journal) is finished, not worked around."""
    import json

    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    work = project.root / "work/toy/rollout"
    record = git("config", "zmr.series", cwd=work)  # put back with the series below (export's three sides)
    (work / "src/notes.md").write_text("notes\n")
    git("add", "src/notes.md", cwd=work)
    git("commit", "-q", "-m", "Add notes", cwd=work)
    series = project.root / "patches/toy/rollout"
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    after = {p.name: p.read_bytes() for p in series.iterdir()}
    assert "0003-add-notes.patch" in after
    git("checkout", "-q", "--", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "patches", cwd=project.root)
    # The state of an export killed after two writes: the new patch whole, a file it wrote for a commit since dropped, series still old.
    (series / "0003-add-notes.patch").write_bytes(after["0003-add-notes.patch"])
    (series / "0004-dropped-since.patch").write_bytes(b"From: x\n")
    journal = state_dir(project.root) / "pending-removals/toy/rollout.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(json.dumps(["0001-fixed-split.patch", "0002-contiguous.patch", "0003-add-notes.patch", "0004-dropped-since.patch"]))
    (journal.parent / "rollout.staging").mkdir()
    (journal.parent / "rollout.staging" / "tmpabc").write_bytes(b"half")
    result = zmr("export", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_bytes() for p in series.iterdir()} == after  # not 0003-add-notes-2.patch, no orphan
    assert not journal.exists() and not journal.with_name("rollout.staging").exists()
    # A file nobody journaled is someone else's: kept, and the new patch takes another name.
    git("checkout", "-q", "--", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "patches", cwd=project.root)
    git("config", "zmr.series", record, cwd=work)
    (series / "0003-add-notes.patch").write_bytes(b"mine\n")
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    assert (series / "0003-add-notes.patch").read_bytes() == b"mine\n"
    assert (series / "0003-add-notes-2.patch").read_bytes() == after["0003-add-notes.patch"]


def test_export_checks_a_whole_run_of_patches_at_once_with_the_same_answers(tmp_path, upstream):
    """The bulk check (one git apply for patches on disjoint files) answers as a patch-by-patch replay would: offsets, extra changes, the rest kept."""
    import re

    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = upstream.commits[1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    shifted = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 20\n", "line 20 fixed\n")}, "Fix line 20")
    shifted = re.sub(rb"@@ -(\d+),(\d+) \+(\d+),(\d+) @@", lambda m: b"@@ -%d,%s +%d,%s @@" % (int(m[1]) + 2, m[2], int(m[3]) + 2, m[4]), shifted, count=1)
    patches = [
        ("0001-fix-line-20.patch", shifted),  # applies 2 lines off
        ("0002-contiguous.patch", make_patch(upstream, pin, {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Contiguous")),
        ("0003-readme.patch", make_patch(upstream, pin, {"README.md": "toy upstream, patched\n"}, "Say it is patched")),
        ("0004-guide.patch", make_patch(upstream, pin, {"docs/guide.md": "guide, patched\n"}, "Patch the guide")),
    ]
    project.series("toy", "rollout", patches)
    project.manifest("toy", f"model: toy\ntitle: Toy\ncomponents:\n  rollout:\n    upstream: {upstream.path}\n    commit: {pin}\n    track: main\n")
    project.commit_all("add model")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    work = project.root / "work/toy/rollout"
    # The README commit gains a change its patch does not have; its metadata stays.
    amend = "test \"$(git log -1 --format=%s)\" != 'Say it is patched' || { echo extra > extra.txt; git add extra.txt; git commit -q --amend --no-edit; }"
    git("rebase", "-q", "--exec", amend, "zmr/base", cwd=work)
    series = project.root / "patches/toy/rollout"
    before = {name: (series / name).read_bytes() for name, _ in patches}
    result = zmr("export", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "refreshed 0001-fix-line-20.patch" in result.stdout and "modified  0003-readme.patch" in result.stdout, result.stdout
    after = {name: (series / name).read_bytes() for name, _ in patches}
    assert after["0002-contiguous.patch"] == before["0002-contiguous.patch"] and after["0004-guide.patch"] == before["0004-guide.patch"]
    assert after["0001-fix-line-20.patch"] != before["0001-fix-line-20.patch"] and b"extra.txt" in after["0003-readme.patch"]
    again = zmr("export", "toy", cwd=project.root)
    assert again.returncode == 0 and "unchanged" in again.stdout and "refreshed" not in again.stdout, again.stdout


def test_export_reads_the_series_file_once_and_again_only_after_writing_it(proj, upstream, monkeypatch):
    """#49.5: `Series` keeps the text and entries it read, so planning the export and checking its three sides
    read the series file no second time; only the series export wrote is read again (its fingerprint for the checkout)."""
    from zmr.infra import files as zfiles

    _pin, _folder, co = three_patch_model(proj, upstream)
    reads: list[str] = []
    open_regular, read_bytes, read_text = zfiles.open_regular, Path.read_bytes, Path.read_text

    def counted(how, real):
        def read(path, *args, **kwargs):
            if Path(path).name == "series":
                reads.append(how)
            return real(path, *args, **kwargs)

        return read

    monkeypatch.setattr(zfiles, "open_regular", counted("checked read", open_regular))
    monkeypatch.setattr(Path, "read_bytes", counted("read_bytes", read_bytes))
    monkeypatch.setattr(Path, "read_text", counted("read_text", read_text))
    result = zmr("export", "toy", cwd=proj.root)  # nothing new in the checkout: nothing written
    assert result.returncode == 0, result.stderr
    assert reads == ["checked read"], reads
    reads.clear()
    (co / "setup.cfg").write_text("[metadata]\nname = toy\n")
    git("add", "setup.cfg", cwd=co)
    git("commit", "-q", "-m", "Name the toy", cwd=co)
    result = zmr("export", "toy", cwd=proj.root)
    assert result.returncode == 0, result.stderr
    assert reads == ["checked read", "checked read"]  # the series planned from, then the one written
    assert "0004-name-the-toy.patch" in (proj.root / "patches/toy/rollout/series").read_text()
