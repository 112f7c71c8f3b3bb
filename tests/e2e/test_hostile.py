"""Hostile and broken patches: refused before git runs, or applied exactly, with precise messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import git, make_patch, make_project, zmr

CORPUS = Path(__file__).parents[1] / "data" / "hostile-patches"
CASES = sorted(p.stem for p in CORPUS.glob("*.patch"))


def _model(project, upstream, pin, entries: list[tuple[str, bytes, int]]):
    folder = project.root / "patches/m/c"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, data, strip in entries:
        (folder / name).write_bytes(data)
        lines.append(name + ("" if strip == 1 else f" -p{strip}"))
    (folder / "series").write_text("\n".join(lines) + "\n")
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {pin}\n")


@pytest.mark.parametrize("case", CASES)
def test_hostile_patch_is_refused_before_git_runs(case, tmp_path, upstream):
    project = make_project(tmp_path / "p")
    expected = json.loads((CORPUS / f"{case}.expected").read_text())
    _model(project, upstream, upstream.commits[-1], [(f"{case}.patch", (CORPUS / f"{case}.patch").read_bytes(), expected["strip"])])
    for command in ("validate", "build"):
        result = zmr(command, *(["m"] if command == "build" else []), cwd=project.root)
        assert result.returncode == 2, result.stderr
        assert f"patches/m/c/{case}.patch: {expected['message']}; a patch may only change files inside the tree" in result.stderr
    # Refused before any fetch: the cache holds no mirror, and no ref exists.
    assert not list(Path(os.environ["ZMR_CACHE"]).glob("mirrors/*.git"))
    assert project.refs() == {}


def test_binary_rename_mode_create_delete_all_build(tmp_path, upstream):
    pin = upstream.commits[-1]
    scratch = tmp_path / "scratch"
    git("clone", "-q", str(upstream.path), str(scratch))
    git("checkout", "-q", "--detach", pin, cwd=scratch)
    (scratch / "weights.bin").write_bytes(bytes(range(256)) * 4)
    git("add", "weights.bin", cwd=scratch)
    git("commit", "-q", "-m", "Add binary weights", cwd=scratch)
    git("mv", "docs/guide.md", "docs/GUIDE.md", cwd=scratch)
    git("commit", "-q", "-m", "Rename the guide", cwd=scratch)
    (scratch / "setup.cfg").chmod(0o755)
    git("add", "setup.cfg", cwd=scratch)
    git("commit", "-q", "-m", "Make setup.cfg executable", cwd=scratch)
    git("rm", "-q", "src/kernels/attention.py", cwd=scratch)
    git("commit", "-q", "-m", "Delete attention", cwd=scratch)
    out = tmp_path / "out"
    git("format-patch", "-q", "-M", "--binary", "--full-index", "--zero-commit", "--no-signature", "-o", str(out), f"{pin}..HEAD", cwd=scratch)
    project = make_project(tmp_path / "p")
    _model(project, upstream, pin, [(p.name, p.read_bytes(), 1) for p in sorted(out.glob("*.patch"))])
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert git("rev-parse", "c/m^{tree}", cwd=project.root) == git("rev-parse", "HEAD^{tree}", cwd=scratch)


def test_empty_patch_is_named(tmp_path, upstream):
    project = make_project(tmp_path / "p")
    empty = b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A <a@b.c>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: [PATCH] Nothing here\n\n---\n"
    _model(project, upstream, upstream.commits[-1], [("0001-empty.patch", empty, 1)])
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 2
    assert "patches/m/c/0001-empty.patch: contains no diff" in result.stderr


def test_crlf_patch_fails_with_a_hint(tmp_path, upstream):
    pin = upstream.commits[-1]
    data = make_patch(upstream, pin, {"README.md": "changed\n"}, "Change README").replace(b"\n", b"\r\n")
    project = make_project(tmp_path / "p")
    _model(project, upstream, pin, [("0001-crlf.patch", data, 1)])
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 2
    assert "0001-crlf.patch: does not apply" in result.stderr
    assert "CRLF line endings" in result.stderr


def test_patch_needing_fuzz_is_an_error_naming_the_hunk(tmp_path, upstream):
    pin = upstream.commits[-1]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    patch = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 3\n", "line 3!\n").replace("line 33\n", "line 33!\n")}, "Two hunks")
    # Drift one context line of the second hunk: GNU patch would apply it with fuzz 1.
    patch = patch.replace(b" line 31\n", b" line 31 drifted\n")
    project = make_project(tmp_path / "p")
    _model(project, upstream, pin, [("0001-fuzzy.patch", patch, 1)])
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 2
    assert "src/model.py, hunk #2 (@@ -30,7 +30,7 @@" in result.stderr


def test_hooks_fsmonitor_and_external_diff_never_run(tmp_path, upstream):
    from conftest import simple_model

    project = make_project(tmp_path / "p")
    simple_model(project, upstream)
    marker = tmp_path / "pwned"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    evil = f"#!/bin/sh\necho \"$0\" >> {marker}\n"
    for hook in ("reference-transaction", "post-checkout", "pre-commit", "post-rewrite", "pre-push"):
        (hooks / hook).write_text(evil)
        (hooks / hook).chmod(0o755)
    script = tmp_path / "evil.sh"
    script.write_text(evil)
    script.chmod(0o755)
    config = f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {script}\n\tsshCommand = {script}\n[diff]\n\texternal = {script}\n"
    with open(project.root / ".git/config", "a") as handle:
        handle.write(config)
    (Path(os.environ["HOME"]) / ".gitconfig").write_text(config)
    for args in (("build", "--all"), ("verify", "--all"), ("list",)):
        result = zmr(*args, cwd=project.root)
        assert result.returncode == 0, result.stderr
    assert not marker.exists(), marker.read_text()


def test_huge_manifest_is_refused_unread(tmp_path):
    project = make_project(tmp_path / "p")
    big = "model: m\ntitle: x\n" + "# padding\n" * 120_000
    project.write("manifests/m.yaml", big)
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "manifests/m.yaml: file is" in result.stderr and "over the limit of 1048576" in result.stderr


def test_patch_through_a_symlink_in_the_tree_is_refused(tmp_path):
    from conftest import make_upstream

    up = make_upstream(tmp_path / "up", [{"real/model.py": "a = 1\n"}])
    (up.path / "alias").symlink_to("real")
    git("add", "alias", cwd=up.path)
    pin = up.commit({}, "add a symlink to the folder")
    patch = b"diff --git a/alias/model.py b/alias/model.py\n--- a/alias/model.py\n+++ b/alias/model.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    project = make_project(tmp_path / "p")
    _model(project, up, pin, [("0001-through-link.patch", patch, 1)])
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 2
    assert "patches/m/c/0001-through-link.patch: does not apply" in result.stderr
    assert "alias/model.py" in result.stderr
    assert project.refs() == {}


# -- pinned trees git would not check out (git fsck's hasDot, hasDotdot, hasDotgit, fullPathname) ------


def _raw_tree(upstream_path: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree object written as given (``hash-object --literally``: no check): (mode, name, object id) entries."""
    data = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)
    return git("hash-object", "-t", "tree", "--literally", "-w", "--stdin", cwd=upstream_path, input=data)


def _pin_tree(upstream, hostile: bytes, nested: bool) -> str:
    path = upstream.path
    blob = git("hash-object", "-w", "--stdin", cwd=path, input=b"planted\n")
    readme = git("rev-parse", f"{upstream.commits[-1]}:README.md", cwd=path)
    inner = _raw_tree(path, [("100644", hostile, blob)])
    if nested:
        top = _raw_tree(path, [("100644", b"README.md", readme), ("40000", b"src", inner)])
    else:
        top = _raw_tree(path, [("40000", hostile, inner)] if hostile == b"a/b" else [("100644", b"README.md", readme), ("40000", hostile, inner)])
    return git("commit-tree", top, "-m", "hostile tree", cwd=path, env={"GIT_AUTHOR_DATE": "@1700000000 +0000", "GIT_COMMITTER_DATE": "@1700000000 +0000"})


@pytest.mark.parametrize(
    ("name", "nested", "path", "reason"),
    [
        (b"..", False, "..", "hasDotdot: '..'"),
        (b".", False, ".", "hasDot: '.'"),
        (b".git", False, ".git", "hasDotgit: .git"),
        (b".GIT", True, "src/.GIT", "hasDotgit: .git in disguise"),
        (b".git.", True, "src/.git.", "hasDotgit: .git in disguise"),
        (b"git~1", False, "git~1", "hasDotgit: .git in disguise"),
        (".g\u200cit".encode(), True, "src/.g\u200cit", "hasDotgit: .git in disguise"),
        (b"a/b", False, "a/b", "fullPathname: a name holding '/'"),
    ],
    ids=["dotdot", "dot", "dotgit", "DOTGIT", "dotgit-dot", "git~1", "hfs-zwnj", "slash"],
)
def test_a_pinned_tree_git_would_not_check_out_is_refused(tmp_path, upstream, name, nested, path, reason):
    pin = _pin_tree(upstream, name, nested)
    project = make_project(tmp_path / "p")
    project.write("patches/m/c/series", "")
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {pin}\n")
    project.commit_all("pin a hostile tree")
    for command in ("build", "verify"):
        result = zmr(command, "m", cwd=project.root)
        assert result.returncode == 2, (command, result.stderr)
        assert f"m/c: upstream {pin[:12]} has a tree entry {path!r} that git would not check out ({reason})" in result.stderr
        assert "Traceback" not in result.stderr
    assert project.ref("refs/heads/c/m") is None
