"""Files zmr reads and writes, and what an OSError about one means to a user.

Reading: every file zmr reads from the repository (manifests, ``series``,
patches, ``zmr.yaml``, case files, evidence, dumps) goes through
`read_repo_file` (or `open_regular` for a file read in pieces): a file that
resolves outside the repository is refused unread (a pull request could link
a manifest to a runner's secrets, and zmr echoes lines of files it cannot
parse), anything but a regular file is refused before a byte is read (a FIFO
would hang, ``/dev/zero`` never ends), and the size is checked against the
kind's limit before reading.

Writing: every file zmr writes (patches, series, manifests, reports, dumps,
evidence, README) goes through `atomic_write`: a temporary file in the same
folder, flushed to disk, then renamed over the target, so Ctrl-C or a crash
never leaves half a file. An existing file keeps its mode; a new one gets the
umask's. Only a regular file is ever replaced: a device, a FIFO or
``/dev/stdout`` is written in place, a symbolic link is written through, and
a folder is refused.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from zmr.infra.errors import ZmrError
from zmr.infra.faults import fault_point


class FileRefused(ZmrError):
    """A file zmr will not read or write as asked: ``display: reason`` and what to do."""

    def __init__(self, display: str, reason: str, fix: str):
        super().__init__(f"{display}: {reason}", details=[fix] if fix else [])
        self.display, self.reason, self.fix = display, reason, fix


def current_umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


# -- reading -----------------------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


_TOO_BIG_FIX = "a {what} is smaller than that; is this the right file?"


def open_regular(path: Path, *, limit: int | None, what: str, root: Path | None = None, display: str | None = None) -> BinaryIO:
    """*path* opened for reading once it is known to be a regular file of at most *limit* bytes.

    With *root*, the file (symbolic links followed) must lie inside *root*;
    without, it may be anywhere (a path given on the command line). Never
    blocks: a FIFO is refused, not opened for a writer that never comes.
    """
    shown = display or str(path)
    target = Path(os.path.realpath(path))
    if root is not None and not _resolved_inside(target, root):
        raise FileRefused(
            shown, f"resolves outside the repository (a symbolic link?); zmr does not read a {what} from there", "replace the link with the file itself"
        )
    try:
        # O_NOFOLLOW: the checked path is the one opened; O_NONBLOCK: opening a FIFO never waits.
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise FileRefused(shown, f"cannot read the {what}: {err.strerror or err}", _advice(err.errno, write=False)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(shown, f"is {_kind_of(info.st_mode)}, not a regular file; zmr reads a {what} only from a file", f"give the path of a {what} file")
        if limit is not None and info.st_size > limit:
            raise FileRefused(shown, f"file is {info.st_size} bytes, over the limit of {limit} for a {what}", _TOO_BIG_FIX.format(what=what))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _resolved_inside(target: Path, root: Path) -> bool:
    """*target*, a resolved path, lies inside *root* resolved: inside *root* as written is enough (no part of a resolved
    path is a symbolic link, so neither is any part of *root* it starts with), which saves resolving *root* (an lstat
    per part) for each file of a folder read in a row, a series' patches; else inside ``realpath(root)``."""
    return target.is_relative_to(root) or target.is_relative_to(os.path.realpath(root))


def read_repo_file(root: Path | None, path: Path, *, limit: int, what: str, display: str | None = None) -> bytes:
    """The bytes of *path*, a regular file inside *root* (None: anywhere) of at most *limit* bytes.

    Raises `FileRefused` naming the file (*display*, default the path) and
    what to do; the content of a refused file is never read.
    """
    with open_regular(path, limit=limit, what=what, root=root, display=display) as handle:
        try:
            # The bytes fstat counts and one more, then the rest if it grew since (caught below past the limit): the same bytes
            # as read(limit + 1), which would allocate the whole limit (64 MiB for a patch) for each file.
            size = min(os.fstat(handle.fileno()).st_size, limit)
            data = handle.read(size + 1)
            if len(data) > size:
                data += handle.read(limit + 1 - len(data))
        except OSError as err:
            raise FileRefused(display or str(path), f"cannot read the {what}: {err.strerror or err}", _advice(err.errno, write=False)) from None
    if len(data) > limit:
        raise FileRefused(display or str(path), f"file is over the limit of {limit} bytes for a {what}", _TOO_BIG_FIX.format(what=what))
    return data


# -- writing -----------------------------------------------------------------------------------

# Paths that name an open file descriptor of this process: written through that descriptor. A pattern compiled (and kept)
# by re when first used, as zmr.infra.git's: a command that writes nothing never pays for it.
_FD_PATH = r"/(?:dev/(?P<std>stdout|stderr)|dev/fd/(?P<fd>\d+)|proc/self/fd/(?P<pfd>\d+))\Z"


def atomic_write(path: Path, data: bytes) -> None:
    """Write *path* whole or not at all; never replace anything but a regular file.

    A regular file (or a new one) is written through a temporary file in the
    same folder and a rename. ``/dev/stdout``, ``/dev/stderr`` and
    ``/dev/fd/N`` are written to that descriptor; a device or FIFO is opened
    and written in place (``--junit /dev/null`` leaves ``/dev/null`` a
    device); a folder is refused; a symbolic link is written through to the
    file it names.
    """
    try:
        _write(Path(path), data)
    except OSError as err:
        if err.filename is None:  # os.write and friends do not say which file: the message must
            err.filename = str(path)
        raise


def _write(path: Path, data: bytes) -> None:
    match = re.match(_FD_PATH, os.path.abspath(path))
    if match:
        fd = {"stdout": 1, "stderr": 2}.get(match.group("std") or "") or int(match.group("fd") or match.group("pfd"))
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _write_all(fd, data)
        return
    target = Path(os.path.realpath(path))  # write through a symbolic link, never replace the link
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise FileRefused(str(path), "is a folder", "give the path of a file to write, not of a folder")
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISSOCK(mode):
            raise FileRefused(str(path), "is a socket; zmr cannot write a file there", "give the path of a file, a device or a FIFO")
        fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))  # no O_CREAT, no O_TRUNC: it stays what it is
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    import tempfile  # here: a command that only reads writes nothing

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".zmr-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            fault_point("atomic-write")
            os.fsync(handle.fileno())
        os.chmod(tmp, mode & 0o7777 if mode is not None else 0o666 & ~current_umask())
        os.replace(tmp, target)
        fault_point("atomic-rename")
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- what an OSError means -------------------------------------------------------------------

_ADVICE = {
    errno.ENOSPC: "the disk is full: free space there (or write elsewhere, e.g. ZMR_CACHE=<folder> for the cache) and run again",
    errno.EDQUOT: "the disk quota is used up: free space there (or write elsewhere) and run again",
    errno.EROFS: "that file system is mounted read-only: give a path on a writable one (ZMR_CACHE=<folder> for the cache)",
    errno.EACCES: "permission denied: fix the permissions of that path, or use another path",
    errno.EPERM: "the operation is not permitted there (an immutable file, or a file system that refuses it): use another path",
    errno.EISDIR: "it is a folder: give the path of a file",
    errno.ENOTDIR: "a part of the path is a file, not a folder: fix the path",
    errno.ENOENT: "no such file or folder: check the path",
    errno.ENAMETOOLONG: "the name is too long for the file system: use a shorter path",
    errno.ELOOP: "too many symbolic links: fix the links on that path",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) and run again",
    errno.EIO: "the disk reported an I/O error: check the device",
}


def _advice(code: int | None, *, write: bool = True) -> str:
    if code in _ADVICE:
        return _ADVICE[code]
    return "check the path and run again" if not write else "check the path, its permissions and the free space, and run again"


_REFUSED_WRITES = (errno.EACCES, errno.EROFS, errno.EPERM)


def os_error(err: OSError, repositories: Sequence[Path] = ()) -> ZmrError:
    """A user-facing error for *err* (the disk, not zmr, failed): names the path and what to do.

    *repositories*: the folders of the zmr repository the command acts on (its
    work tree and git directory). A write there that the system refuses
    (permissions, a read-only mount) means the repository is read-only for
    this user: the advice says where such a command can run instead.
    """
    where = " -> ".join(str(p) for p in (err.filename, err.filename2) if p is not None)
    reason = err.strerror or str(err)
    message = f"{where}: {reason}" if where else f"{reason} (errno {err.errno})" if err.errno else reason
    if err.errno in _REFUSED_WRITES and err.filename is not None and any(_inside(err.filename, folder) for folder in repositories):
        mounted = err.errno == errno.EROFS
        what = "the repository is on a read-only file system" if mounted else "the repository is read-only for you"
        return ZmrError(f"{message}: {what}", details=read_only_advice(repositories[0], mounted=mounted))
    return ZmrError(message, details=[_advice(err.errno)])


def read_only_advice(root: Path, *, mounted: bool = False) -> list[str]:
    """What to do where a writing command meets a repository it may not write (docs/reference.md, "A read-only repository").

    *mounted*: the file system is read-only (EROFS), for its owner too.
    """
    elsewhere = "" if mounted else ", or as the user who owns the repository"
    return [
        "this command writes files, branches or zmr's state (in the git directory), and may not write here",
        f"run it in a clone of your own (`git clone {root} FOLDER`, then in FOLDER){elsewhere};"
        " zmr verify, diff, list, validate and status only read, and work here",
    ]


def _inside(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], folder: Path) -> bool:
    shown = os.fsdecode(path)
    return Path(os.path.abspath(shown)).is_relative_to(os.path.abspath(folder))


# -- JSON from files zmr did not write -------------------------------------------------------

MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 16 << 20  # smoke records and reports zmr reads back


def parse_json(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for untrusted text: ValueError (never RecursionError) for nesting past *max_depth*."""
    import json

    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:  # iterative: a value nested 900 deep must not crash what walks it later; only containers are walked
        item, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"nested more than {max_depth} levels deep")
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item) if isinstance(child, (dict, list)))
    return value


def prune_empty_dirs(folder: Path, root: Path) -> None:
    """*folder* and the folders above it up to (not including) *root* removed while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
