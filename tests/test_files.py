"""zmr.infra.files: files zmr reads from a repository it does not trust, and writes whole or not at all (unit level; test_untrusted runs the commands)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from zmr.infra.files import FileRefused, atomic_write, open_regular, os_error, parse_json, prune_empty_dirs, read_repo_file


def test_a_regular_file_inside_the_root_is_read(tmp_path):
    (tmp_path / "a.yaml").write_bytes(b"x: 1\n")
    (tmp_path / "link.yaml").symlink_to("a.yaml")  # a link that stays inside is followed
    assert read_repo_file(tmp_path, tmp_path / "a.yaml", limit=10, what="manifest") == b"x: 1\n"
    assert read_repo_file(tmp_path, tmp_path / "link.yaml", limit=10, what="manifest") == b"x: 1\n"


def test_a_root_named_through_a_link_or_relatively_holds_what_its_real_folder_holds(tmp_path, monkeypatch):
    """The file, resolved, must lie inside the root resolved: a root named through a symbolic link, or relative to the
    current folder, reads its files and refuses a link out of it (the check compares the root as written first)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.yaml").write_bytes(b"x: 1\n")
    (tmp_path / "secret").write_bytes(b"outside\n")
    (real / "out.yaml").symlink_to(tmp_path / "secret")
    (tmp_path / "via").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    for root in (tmp_path / "via", Path("via"), Path("real"), tmp_path / "real" / ".." / "via"):
        assert read_repo_file(root, root / "a.yaml", limit=10, what="manifest") == b"x: 1\n", root
        with pytest.raises(FileRefused, match="resolves outside the repository"):
            read_repo_file(root, root / "out.yaml", limit=10, what="manifest")


def test_what_is_refused_unread(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "secret").write_bytes(b"outside\n")
    (root / "out.yaml").symlink_to(tmp_path / "secret")
    (root / "big.patch").write_bytes(b"x" * 11)
    os.mkfifo(root / "fifo.yaml")
    (root / "folder").mkdir()
    cases = {
        "out.yaml": "resolves outside the repository (a symbolic link?); zmr does not read a manifest from there",
        "big.patch": "file is 11 bytes, over the limit of 10 for a manifest",
        "fifo.yaml": "is a FIFO (named pipe), not a regular file; zmr reads a manifest only from a file",
        "folder": "is a folder, not a regular file; zmr reads a manifest only from a file",
        "missing.yaml": "cannot read the manifest: No such file or directory",
    }
    for name, reason in cases.items():
        with pytest.raises(FileRefused) as refused:
            read_repo_file(root, root / name, limit=10, what="manifest", display=f"shown/{name}")
        assert refused.value.reason == reason and refused.value.message == f"shown/{name}: {reason}", name
    with open_regular(tmp_path / "secret", limit=None, what="dump") as handle:  # no root: a path from the command line
        assert handle.read() == b"outside\n"


def test_atomic_write_replaces_a_file_whole_and_keeps_its_mode(tmp_path):
    target = tmp_path / "sub" / "series"
    atomic_write(target, b"one\n")  # the folder is made
    assert target.read_bytes() == b"one\n"
    os.chmod(target, 0o640)
    atomic_write(target, b"two\n")
    assert target.read_bytes() == b"two\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["series"]  # no temporary file left


def test_atomic_write_goes_through_a_link_and_refuses_a_folder(tmp_path):
    (tmp_path / "real").write_bytes(b"old")
    (tmp_path / "link").symlink_to("real")
    atomic_write(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real").read_bytes() == b"new"
    (tmp_path / "dir").mkdir()
    with pytest.raises(FileRefused, match="is a folder"):
        atomic_write(tmp_path / "dir", b"x")
    atomic_write(tmp_path / "null", b"")  # a new empty file
    atomic_write(Path("/dev/null"), b"discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # a device stays a device


def test_parse_json_refuses_deep_nesting_with_a_value_error():
    assert parse_json('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert parse_json("[" * 64 + "]" * 64) is not None
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        parse_json("[" * 65 + "]" * 65)
    with pytest.raises(ValueError, match="nested more than 3 levels deep"):
        parse_json(b'{"a": {"b": {"c": {}}}}', max_depth=3)
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        parse_json("[" * 100_000 + "]" * 100_000)  # past Python's recursion limit: still a ValueError


def test_os_error_names_the_path_and_what_to_do():
    full = os_error(OSError(errno.ENOSPC, "No space left on device", "/cache/x"))
    assert full.message == "/cache/x: No space left on device"
    assert full.details == ["the disk is full: free space there (or write elsewhere, e.g. ZMR_CACHE=<folder> for the cache) and run again"]
    moved = os_error(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"))
    assert moved.message == "/a -> /b: Invalid cross-device link" and moved.details == ["check the path, its permissions and the free space, and run again"]


def test_prune_empty_dirs_stops_at_the_root_and_at_a_folder_with_files(tmp_path):
    deep = tmp_path / "patches" / "toy" / "rollout"
    deep.mkdir(parents=True)
    (tmp_path / "patches" / "keep").write_text("x")
    prune_empty_dirs(deep, tmp_path)
    assert not (tmp_path / "patches" / "toy").exists() and (tmp_path / "patches").is_dir()
    prune_empty_dirs(tmp_path, tmp_path)  # the root itself is never removed
    assert tmp_path.is_dir()
