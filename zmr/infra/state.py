"""zmr's working state: where each state file lives, and the one way to read and write one.

The state folder is ``zmr/`` in the repository's git directory
(``Project.state_dir``; docs/reference.md §8.3): no commit can put a file
there. `STATE_FILES` is the one list of what zmr keeps there (and in a
checkout's git directory while ``zmr checkout --merge`` runs): each entry's
path under its folder, its format version, the most bytes zmr ever writes
into it and the module that owns it.

A JSON state file (`StateFile`) is read only through `StateFile.load`: a
regular file (a symbolic link, a FIFO or a folder is refused unread) of at
most ``max_bytes``, JSON nested no deeper than zmr writes, of the shape and
format version zmr writes. Anything else is refused with one message,
``PATH: cannot be read as WHAT: REASON``, and what to do
(`StateRefused`; `StateMalformed` and `StateVersion` say which). It is
written only through `StateFile.save`: the whole file through a temporary
file, flushed to disk and renamed over the old one (``zmr.infra.files.atomic_write``),
never through a symbolic link. Several files that change together go
through the one journal (``zmr.infra.transaction``, whose journal is `JOURNAL`).

A path read from state is used only once checked: `relative_name` for a
name inside a folder zmr owns (a series file, a patch); a checkout by its
``zmr.token`` (``zmr.ops.checkout``).

Which module may do what is enforced by tests/test_architecture.py: no
module but this one parses a state file, and the old export journal is
``zmr.ops.legacy``'s alone.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zmr.infra.errors import ZmrError
from zmr.infra.files import MAX_JSON_BYTES, atomic_write, parse_json

STATE, CHECKOUT = "state", "checkout"  # the folder an entry lives in: the state folder, or a checkout's git directory


class StateRefused(ZmrError):
    """A state file zmr does not use: ``PATH: cannot be read as WHAT: REASON`` and what to do."""

    def __init__(self, path: Path, what: str, reason: str, fix: str):
        super().__init__(f"{path}: cannot be read as {what}: {reason}", details=[fix] if fix else [])
        self.path, self.reason = path, reason


class StateMalformed(StateRefused):
    """Not JSON, or not of the shape zmr writes; *data* is what the file held (``zmr.infra.transaction`` undoes a journal a crash cut short)."""

    def __init__(self, path: Path, what: str, reason: str, fix: str, data: bytes = b"", *, not_json: bool = False):
        super().__init__(path, what, reason, fix)
        self.data, self.not_json = data, not_json


class StateVersion(StateRefused):
    """Written in another format version (*found*) than this zmr reads."""

    def __init__(self, path: Path, what: str, found: object, version: int, fix: str):
        super().__init__(path, what, f"format version {found!r}; this zmr reads version {version}", fix)
        self.found = found


@dataclass(frozen=True)
class StateFile:
    """One kind of file (or folder) in zmr's state: where it lives, its format, and who owns it.

    *where*: the path under its folder (*base*: `STATE`, the state folder, or
    `CHECKOUT`, a checkout's git directory), ``{names}`` filled in by `path`.
    *version*: the format version a JSON file carries as ``"version"`` (None:
    a format without one); *unversioned*: a file of version 1 written before
    zmr wrote the key reads as version 1. *shape*: ``dict`` or ``list``;
    *max_bytes*: the most zmr writes; *fix*: what a user does with a file
    that is refused (``{path}`` and ``{folder}`` filled in). *kind*: ``json``,
    ``folder``, ``lock`` or ``marker``; only ``json`` files are loaded here.
    """

    name: str
    where: str
    owner: str
    what: str
    kind: str = "json"
    version: int | None = 1
    max_bytes: int = MAX_JSON_BYTES
    shape: type = dict
    unversioned: bool = False
    base: str = STATE
    fix: str = "delete {path}, then run again"
    indent: int | None = None

    def path(self, folder: Path, **names: str) -> Path:
        """This entry's path under *folder* (the state folder, or a checkout's git directory for `CHECKOUT` entries)."""
        return folder / self.where.format(**names)

    def refused(self, path: Path, reason: str, data: bytes = b"") -> StateMalformed:
        """The error for *path* that is not of the shape zmr writes (a caller that checks the fields itself raises it)."""
        return StateMalformed(path, self.what, reason, self._fix(path), data)

    def _fix(self, path: Path) -> str:
        return self.fix.format(path=path, folder=path.parent)

    def load(self, path: Path) -> Any:
        """The content of *path*, checked (module docstring); None when there is no such file. Raises `StateRefused`."""
        assert self.kind == "json"
        data = self._read(path)
        if data is None:
            return None
        try:
            value = parse_json(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise StateMalformed(path, self.what, f"not JSON ({err})", self._fix(path), data, not_json=True) from None
        if not isinstance(value, self.shape):
            raise self.refused(path, f"not the {'object' if self.shape is dict else 'list'} zmr writes", data)
        if self.version is not None and isinstance(value, dict):
            found = value.get("version", 1 if self.unversioned else None)
            if found != self.version:
                raise StateVersion(path, self.what, found, self.version, self._fix(path))
        return value

    def _read(self, path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as err:
            if os.path.islink(path):
                raise StateRefused(path, self.what, "a symbolic link; zmr does not follow one in its state", self._fix(path)) from None
            if err.errno in (errno.EACCES, errno.EPERM):
                owner = "this user may not read it: run zmr as the user who owns the repository"
                raise StateRefused(path, self.what, err.strerror or str(err), owner) from None
            raise StateRefused(path, self.what, err.strerror or str(err), self._fix(path)) from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise StateRefused(path, self.what, "not a regular file", self._fix(path))
            data = handle.read(self.max_bytes + 1) if info.st_size <= self.max_bytes else b""
        if info.st_size > self.max_bytes or len(data) > self.max_bytes:  # the second: it grew since fstat
            raise StateRefused(path, self.what, f"{max(info.st_size, len(data))} bytes, more than the {self.max_bytes} zmr writes", self._fix(path))
        return data

    def save(self, path: Path, value: Any) -> None:
        """Write *value* (the format version added to an object) to *path*, whole or not at all; never through a symbolic link."""
        assert self.kind == "json" and isinstance(value, self.shape)
        if self.version is not None and isinstance(value, dict):
            value = {"version": self.version, **{k: v for k, v in value.items() if k != "version"}}
        import json  # here, as in json_string: a command that finds no state file needs no JSON

        data = (json.dumps(value, indent=self.indent) + "\n").encode()
        if len(data) > self.max_bytes:
            too_big = f"{path}: {self.what} of {len(data)} bytes, more than the {self.max_bytes} zmr reads back; nothing written"
            raise ZmrError(too_big, details=[self._fix(path)])
        if os.path.islink(path):
            raise StateRefused(path, self.what, "a symbolic link; zmr does not write through one in its state", f"remove {path}, then run again")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)


JOURNAL = StateFile(
    "journal",
    "transactions/{name}.json",
    "zmr.infra.transaction",
    "a zmr journal",
    fix="look at it, remove {path}, then check `git status` for files an interrupted zmr left",
)
TRANSACTION_LOCK = StateFile("transaction-lock", "transactions/{name}.lock", "zmr.infra.transaction", "the lock of a journal", kind="lock", version=None)
REBASE_DIR = StateFile("rebase-dir", "rebase/{model}/{component}", "zmr.ops.rebase", "a rebase in progress", kind="folder", version=None)
REBASE = StateFile(
    "rebase",
    "rebase/{model}/{component}/state.json",
    "zmr.ops.rebase_state",
    "rebase state",
    indent=1,
    fix="the copies in {folder} hold the manifest and series as they were: finish the rebase with the zmr that started it, or delete {folder} to forget it",
)
POINTER = StateFile(
    "pointer",
    "checkouts/{model}/{component}",
    "zmr.ops.checkout.state",
    "a remembered --dir",
    max_bytes=1 << 16,
    unversioned=True,
    fix="delete {path}: zmr then uses work/<model>/<component> (name another checkout with --dir)",
)
CHECKS = StateFile(
    "checks",
    "checks/{model}/{component}/{key}.json",
    "zmr.ops.checks",
    "check results",
    max_bytes=64 << 20,
    indent=1,
    fix="delete {path}: zmr then runs the checks again",
)
LOCK = StateFile("lock", "locks/{model}/{component}.lock", "zmr.infra.lock", "the lock of a component", kind="lock", version=None, max_bytes=4096)
SMOKE = StateFile("smoke", "smoke/{model}", "zmr.smoke", "smoke artifacts", kind="folder", version=None)
LEGACY_EXPORT_JOURNAL = StateFile(
    "legacy-export-journal",
    "pending-removals/{model}/{component}.json",
    "zmr.ops.legacy",
    "an older zmr's export journal",
    version=None,
    shape=list,
    max_bytes=1 << 16,
    fix="delete {path}: the files it names become untracked files of the series folder",
)
LEGACY_MARKER = StateFile("legacy-migrated", "legacy-migrated", "zmr.ops.legacy", "the mark that .zmr/ was looked at", kind="marker", version=None)
MERGE_DIR = StateFile("merge-dir", "zmr-merge", "zmr.ops.checkout.merge", "a checkout --merge in progress", kind="folder", version=None, base=CHECKOUT)
MERGE_SAVED = StateFile(
    "merge-saved",
    "zmr-merge/saved.json",
    "zmr.ops.checkout.merge",
    "the saved checkout of a merge",
    unversioned=True,
    base=CHECKOUT,
    fix="delete {folder} to forget the merge (the checkout stays as it is now), then check it with `git status`",
)
MERGE_TODO = StateFile(
    "merge-todo",
    "zmr-merge/todo.json",
    "zmr.ops.checkout.merge",
    "the commits a merge has left",
    unversioned=True,
    base=CHECKOUT,
    fix="undo the merge with `zmr checkout --abort` for its component (zmr.ops.checkout.merge names it)",
)

STATE_FILES = (
    JOURNAL,
    TRANSACTION_LOCK,
    REBASE_DIR,
    REBASE,
    POINTER,
    CHECKS,
    LOCK,
    SMOKE,
    LEGACY_EXPORT_JOURNAL,
    LEGACY_MARKER,
    MERGE_DIR,
    MERGE_SAVED,
    MERGE_TODO,
)


def relative_name(name: object) -> str | None:
    """*name* when it is a plain relative path (no ``..``, not absolute, no NUL): a file inside a folder zmr owns; else None."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\0" in name:
        return None
    parts = name.split("/")
    return None if "" in parts or "." in parts or ".." in parts else name


def json_string(quoted: bytes) -> str:
    """The string a JSON string literal (its quotes included) spells: for a caller salvaging a journal that does not parse whole."""
    import json

    value = json.loads(quoted)
    if not isinstance(value, str):
        raise ValueError("not a JSON string")
    return value


def lock_holder(data: bytes) -> dict[str, Any]:
    """What a lock file says of its holder (`LOCK`: written by ``zmr.infra.lock``); {} when it says nothing zmr wrote."""
    try:
        value = parse_json(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
