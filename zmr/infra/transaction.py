"""All-or-nothing writes of several files in the repository.

A command that writes more than one file (``update --apply`` and rebase's
finish: series and manifest; ``import``; ``init``; ``new``)
collects them in a `Transaction` and commits it once:

1. the journal (``Project.journal_path(name)``, ``zmr.infra.state.JOURNAL``) is written in phase
   ``staging``: every target, the name of its staged copy, the folders to
   create, the files to remove (one transaction of a name at a time: a lock
   next to the journal);
2. each file is staged next to its target (``.<name>.<token>.zmr-stage``,
   flushed to disk), so the rename that follows never crosses a file system;
3. the journal is rewritten in phase ``commit``: from here on the
   transaction is done, only its renames remain;
4. each staged file is renamed over its target, the removals are made, and
   the journal is removed.

Steps 3 and 4 run with SIGINT and SIGTERM blocked (they take as long as a
few renames): a Ctrl-C or a SIGTERM lands before step 3 (nothing changed,
the staged files are removed) or after step 4. Only SIGKILL or a crash can
stop a transaction half-way; the next `begin` of the same name (the rerun of
the command) then finds the journal and finishes it (phase ``commit``) or
removes what it staged (phase ``staging``). A journal is trusted only as
far as zmr would have written it: every path in it must lie inside the
repository, outside ``.git``, and reach no symbolic link; a staged name must
be one zmr makes, next to its target.

Targets are regular files or absent: a symbolic link, a folder or anything
else in the place of a target (or of a folder above it), and a target inside
a nested git repository (a checkout under ``work/``), are refused before
anything is written. `Transaction.create` adds a file that must not exist:
it is linked into place, never over a file that appeared meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zmr.infra.errors import ZmrError
from zmr.infra.faults import fault_point, pause_point
from zmr.infra.files import FileRefused, current_umask, prune_empty_dirs
from zmr.infra.lock import LockBusy, hold_file
from zmr.infra.state import JOURNAL, StateMalformed, StateVersion, json_string


class JournalOwner(Protocol):
    """What a transaction reads of a project (`zmr.model.project.Project`): the infrastructure knows no manifest."""

    @property
    def root(self) -> Path: ...

    def journal_path(self, name: str) -> Path: ...

    def journal_folder(self) -> Path | None: ...


JOURNAL_VERSION = 1
STAGED_SUFFIX = ".zmr-stage"
STAGING, COMMIT = "staging", "commit"


class JournalRefused(ZmrError):
    """A journal zmr would not have written: it is not followed."""


@dataclass
class Transaction:
    """The files one command writes and removes, committed all together (module docstring)."""

    root: Path
    journal: Path
    writes: dict[Path, bytes] = field(default_factory=dict)
    removals: set[Path] = field(default_factory=set)
    new: set[Path] = field(default_factory=set)  # written only where nothing is: never over a file
    dirs: set[Path] = field(default_factory=set)
    committed: bool = False

    def write(self, path: Path, data: bytes) -> None:
        """Write *path* (inside the repository) with *data* at commit."""
        target = self._target(path)
        self.removals.discard(target)
        self.writes[target] = data

    def create(self, path: Path, data: bytes) -> None:
        """Write *path* at commit, which must not exist then: the commit is refused (nothing written) when it does, and never overwrites it."""
        self.write(path, data)
        self.new.add(Path(os.path.abspath(path)))

    def mkdir(self, path: Path) -> None:
        """Create the folder *path* (and those above it) at commit, when it is not there."""
        folder = Path(os.path.abspath(path))
        check_target(self.root, folder / "x", display=_display(self.root, folder))
        self.dirs.add(folder)

    def remove(self, path: Path) -> None:
        """Remove *path* at commit, when it is there."""
        target = self._target(path)
        self.writes.pop(target, None)
        self.removals.add(target)

    def _target(self, path: Path) -> Path:
        target = Path(os.path.abspath(path))
        check_target(self.root, target, display=_display(self.root, target))
        return target

    def commit(self) -> None:
        """Stage, journal and rename (module docstring); idempotent."""
        if self.committed:
            return
        self.committed = True
        removals = sorted(p for p in self.removals if os.path.lexists(p))
        dirs = _missing_dirs(self.root, [*self.writes, *(d / "x" for d in self.dirs)])
        if not self.writes and not removals and not dirs:
            return
        import secrets  # here: a command that writes nothing never needs it

        staged = {target: target.with_name(f".{target.name}.{secrets.token_hex(6)}{STAGED_SUFFIX}") for target in sorted(self.writes)}
        record = {
            "version": JOURNAL_VERSION,
            "phase": STAGING,
            "dirs": [_rel(self.root, d) for d in dirs],
            "files": [[_rel(self.root, t), s.name, *(["new"] if t in self.new else [])] for t, s in staged.items()],
            "remove": [_rel(self.root, p) for p in removals],
        }
        JOURNAL.save(self.journal, record)
        fault_point("journal")
        try:
            for folder in dirs:
                folder.mkdir()
            for target, copy in staged.items():
                _stage(target, copy, self.writes[target])
            pause_point("transaction-staged")
            there = [t for t in sorted(self.new) if os.path.lexists(t)]
            if there:
                shown = _display(self.root, there[0])
                raise FileRefused(shown, "appeared while zmr was writing; nothing was overwritten", f"look at {shown}, then run again")
        except BaseException:
            _roll_back(self.root, record)
            self.journal.unlink(missing_ok=True)
            raise
        with signals_deferred():
            record["phase"] = COMMIT
            JOURNAL.save(self.journal, record)
            fault_point("commit-point")
            _roll_forward(self.root, record)
            self.journal.unlink()


@contextlib.contextmanager
def begin(project: JournalOwner, name: str) -> Iterator[Transaction]:
    """A transaction named *name*: one at a time (a lock), an interrupted one of that name finished first; committed when the block ends normally."""
    journal = project.journal_path(name)
    with hold_file(journal.with_suffix(".lock"), name):
        recover(project.root, journal)
        txn = Transaction(project.root, journal)
        yield txn
        txn.commit()


def finish_interrupted(project: JournalOwner, name: str) -> str | None:
    """Finish or undo an interrupted transaction *name* now (before a command reads what it wrote); see `recover`."""
    journal = project.journal_path(name)
    with hold_file(journal.with_suffix(".lock"), name):
        return recover(project.root, journal)


@dataclass(frozen=True)
class Recovered:
    """What `finish_all` did with the journal of the interrupted transaction *name*.

    *action*: ``finished`` (its renames done), ``undone`` (what it staged removed) or ``left`` (a journal zmr would not
    follow, or one this user may not finish: nothing changed); *line*: that, said for the user.
    """

    name: str
    action: str
    line: str


def finish_all(project: JournalOwner) -> list[Recovered]:
    """Every interrupted transaction of *project* finished or undone (one whose lock a running zmr holds is left to it): what was done."""
    folder = project.journal_folder()
    if folder is None or folder.is_symlink() or not folder.is_dir():
        return []
    done = []
    for journal in sorted(folder.rglob("*.json")):
        name = journal.relative_to(folder).with_suffix("").as_posix()
        try:
            with hold_file(journal.with_suffix(".lock"), name, wait=0):
                what = recover(project.root, journal)
        except LockBusy:
            continue  # a running zmr is writing it
        except ZmrError as err:
            done.append(Recovered(name, "left", f"{err.message}; left alone"))
            continue
        except OSError as err:  # a repository this user may read but not write: a reading command goes on, and says what it saw
            done.append(
                Recovered(
                    name,
                    "left",
                    f"an interrupted zmr left a half-written change ({name}) that this user may not finish"
                    f" ({err.filename}: {err.strerror}); files it names may be half-written until a zmr of the repository's owner runs there",
                )
            )
            continue
        if what:
            done.append(Recovered(name, what, f"an interrupted zmr left a half-written change ({name}): {what} now"))
    return done


def recover(root: Path, journal: Path) -> str | None:
    """Finish (phase ``commit``) or undo (phase ``staging``) what an interrupted transaction left; which it did, None without a journal."""
    if not os.path.lexists(journal):
        return None
    display = str(journal)
    if journal.is_symlink():
        raise JournalRefused(f"{display}: is a symbolic link; zmr does not follow it", details=[f"remove {display} and run again"])
    try:
        parsed = JOURNAL.load(journal)  # too big, or not a regular file: refused (zmr.infra.state), nothing changed
    except StateMalformed as err:
        if not err.not_json:
            parsed = None  # JSON, but no journal: refused below
        else:
            _undo_truncated(root, err.data, display)  # cut short in the staging phase: nothing was renamed yet
            journal.unlink()
            return "undone"
    except StateVersion:
        parsed = None
    try:
        record = _checked(root, parsed)
    except ValueError as err:
        raise JournalRefused(
            f"{display}: not a journal zmr wrote ({err}); zmr changed and removed nothing",
            details=[f"look at it, remove {display}, then check `git status` for files an interrupted zmr left"],
        ) from None
    with signals_deferred():
        if record["phase"] == COMMIT:
            _roll_forward(root, record)
        else:
            _roll_back(root, record)
        journal.unlink()
    return "finished" if record["phase"] == COMMIT else "undone"


# A `[target, staged]` pair of a journal cut short: compiled (and kept) by re when first used, as zmr.infra.git's patterns.
_STAGED_ENTRY = rb'\[\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"'


def _undo_truncated(root: Path, data: bytes, display: str) -> None:
    """A journal that does not parse: one a crash truncated (a file system that lost the end of a write) is undone; anything else is refused.

    The journal is written whole (a temporary file, flushed, renamed) before
    anything is staged, and rewritten whole for the commit phase; so a
    truncated one can only be in phase ``staging`` with nothing renamed yet:
    each staged copy its complete entries name (checked as ``_checked``
    checks them) is removed, the targets are untouched. A truncated journal
    that says ``commit``, or text that is no prefix of a journal, is refused.
    """
    text = data.lstrip()
    if text and not text.startswith(b"{"):
        raise JournalRefused(
            f"{display}: not a journal zmr wrote (it is not JSON); zmr changed and removed nothing",
            details=[f"look at it, remove {display}, then check `git status` for files an interrupted zmr left"],
        )
    if b'"commit"' in text:
        raise JournalRefused(
            f"{display}: the journal of a committed change is cut short; zmr cannot tell which files it was renaming, and changed nothing",
            details=[
                "its staged copies (files named .NAME.<hex>.zmr-stage next to the files they replace) hold the new content",
                f"rename each over its file (or delete them all to keep the old content), then remove {display}",
            ],
        )
    for match in re.finditer(_STAGED_ENTRY, text):
        try:
            rel, name = (json_string(b'"' + group + b'"') for group in match.groups())
            _checked(root, {"version": JOURNAL_VERSION, "phase": STAGING, "dirs": [], "files": [[rel, name]], "remove": []})
        except ValueError:
            continue  # not a complete entry of ours: left alone
        copy = (root / rel).with_name(name)
        if _is_regular(copy):
            copy.unlink()


# -- checks ------------------------------------------------------------------------------------------


def check_target(root: Path, target: Path, *, display: str) -> None:
    """*target* may be written or removed by a transaction: inside *root*, outside ``.git``, no link on the way, a regular file or absent."""
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise FileRefused(display, "lies outside the repository; zmr writes there only files inside it", "give a path inside the repository") from None
    parts = rel.parts
    if not parts or any(p in ("", ".", "..") for p in parts) or any(p.casefold().rstrip(". ") == ".git" for p in parts):
        raise FileRefused(display, "is not a file zmr writes (inside .git, or not a plain path)", "give a path inside the repository's work tree")
    here = root
    for part in parts[:-1]:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return  # created at commit
        if not stat.S_ISDIR(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
            raise FileRefused(
                _display(root, here), f"is {what}; zmr writes {display} only through real folders", f"replace {_display(root, here)} with a folder"
            )
        if os.path.lexists(here / ".git"):  # a checkout (work/...) or another repository: its files are someone's work
            raise FileRefused(
                display, f"lies inside the git repository {_display(root, here)}; zmr writes there only files of the project itself", "use a path outside it"
            )
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise FileRefused(display, f"is {what}; zmr replaces only regular files", f"remove {display} (or replace it with a regular file) and run again")


def _checked(root: Path, record: object) -> dict[str, Any]:
    """*record* as a journal, every path in it checked; ValueError says what is wrong."""
    if not isinstance(record, dict) or record.get("version") != JOURNAL_VERSION or record.get("phase") not in (STAGING, COMMIT):
        raise ValueError("unknown version or phase")
    dirs, files, removals = record.get("dirs"), record.get("files"), record.get("remove")
    if not isinstance(dirs, list) or not isinstance(files, list) or not isinstance(removals, list):
        raise ValueError("dirs, files and remove must be lists")
    for rel in [*dirs, *removals, *(f[0] if isinstance(f, list) and f else None for f in files)]:
        if not isinstance(rel, str):
            raise ValueError("a path is not a string")
        try:
            check_target(root, root / rel, display=rel)
        except FileRefused as err:
            if not (rel in dirs and err.reason.startswith("is a folder")):
                raise ValueError(str(err)) from None
    for item in files:
        if not (isinstance(item, list) and len(item) in (2, 3) and isinstance(item[1], str) and item[2:] in ([], ["new"])):
            raise ValueError('a file entry is not [target, staged name] or [target, staged name, "new"]')
        target, copy = Path(item[0]), item[1]
        if "/" in copy or not (copy.startswith(f".{target.name}.") and copy.endswith(STAGED_SUFFIX)):
            raise ValueError(f"{copy!r} is not a name zmr stages {item[0]} under")
    return record


# -- the steps -----------------------------------------------------------------------------------------


def _stage(target: Path, copy: Path, data: bytes) -> None:
    try:
        mode = os.lstat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            fault_point("stage-write")
            os.fsync(handle.fileno())
        os.chmod(copy, mode)
    except OSError as err:
        err.filename = str(target)  # the file the user knows; its staged copy is removed by the roll-back
        raise


def _roll_forward(root: Path, record: dict[str, Any]) -> None:
    for index, (rel, name, *new) in enumerate(record["files"]):
        target = root / rel
        copy = target.with_name(name)
        if _is_regular(copy) and new:
            with contextlib.suppress(FileExistsError):  # linked by the run a kill stopped, or made by someone else: never overwritten
                os.link(copy, target, follow_symlinks=False)
            copy.unlink()
        elif _is_regular(copy):
            os.replace(copy, target)
        fault_point("txn-rename")
        if index == 0:
            pause_point("transaction-renaming")
    for rel in record["remove"]:
        path = root / rel
        if _is_regular(path):
            path.unlink()
            prune_empty_dirs(path.parent, root)
            fault_point("txn-remove")


def _roll_back(root: Path, record: dict[str, Any]) -> None:
    for rel, name, *_ in record["files"]:
        copy = (root / rel).with_name(name)
        if _is_regular(copy):
            copy.unlink()
    for rel in reversed(record["dirs"]):
        with contextlib.suppress(OSError):  # not empty: not only ours
            (root / rel).rmdir()


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _missing_dirs(root: Path, targets: list[Path]) -> list[Path]:
    """The folders above *targets* that do not exist yet, parents first."""
    missing: set[Path] = set()
    for target in targets:
        folder = target.parent
        while folder != root and not os.path.lexists(folder):
            missing.add(folder)
            folder = folder.parent
    return sorted(missing, key=lambda p: len(p.parts))


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back (delivered when the block ends): the renames of a committed transaction are not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _display(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
