"""zmr's one lock: every lock it takes, on a component, a mirror of the cache or a mirror's writers, is taken here.

``hold(project, components, command)`` takes an exclusive ``flock`` on
``Project.lock_path`` of each component, in a fixed order (model, then
component), so two commands that lock several components never wait for
each other in a circle. The lock belongs to the open file: the operating
system releases it when the process ends, however it ends (SIGKILL
included), so a lock is never stale. While it holds the lock, zmr writes
its pid, its command line and the time it took the lock into the file,
for the message the next process shows. ``hold_file`` does the same for
any other lock file: a transaction's journal, a mirror of the cache
(`zmr.infra.cache`); ``hold_file(..., shared=True)`` holds one shared and writes
nothing into it (the writers of a mirror: `zmr.infra.git`), and ``probe`` asks,
without waiting, whether a lock is free (and holds it while it is).

A second process waits up to ``ZMR_LOCK_TIMEOUT`` seconds for the lock
(default 5 for a component or a journal; 600 for a mirror of the cache,
which another zmr may be fetching a large upstream into; a value that is
not a number of seconds up to a day is an error, exit 2), then refuses
with `LockBusy` (exit 2): "another zmr (pid N on HOST) is working on m/c
since ...". What the lock file says is checked before it is believed: a
holder whose pid is gone (on this host) is named as such (a process it
started holds the file open), a file that names no holder says so; a lock
file that is a symbolic link, a folder or anything but a regular file is
refused, never followed. zmr never removes a lock file (removing it would
let a third process lock a new file while the holder lives). Exclusive
locks are re-entrant within one thread (``zmr update --apply`` holds the
lock and calls ``rebase.start``, which takes it too); another thread of the
same process waits for them as another process would.

The test hook that holds a process at a named point (``pause_point``)
lives in `zmr.infra.faults`; this module calls it once a lock is held (``locked``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from zmr.infra.errors import ZmrError
from zmr.infra.faults import pause_point
from zmr.infra.state import LOCK, lock_holder

TIMEOUT_ENV = "ZMR_LOCK_TIMEOUT"
DEFAULT_TIMEOUT = 5.0
# A mirror's lock is held for as long as a fetch takes (minutes for a large upstream on a slow link): waited for longer.
MIRROR_TIMEOUT = 600.0
_POLL = 0.05
_MAX_HOLDER_BYTES = LOCK.max_bytes


class _Held(threading.local):
    """Re-entrancy, per thread: the exclusive locks this thread holds, by path, with how many `hold`s hold each.

    Per thread, not per process: two threads of one zmr (`zmr diff` fetches mirrors side by side) that want one lock
    each take it on an open file of their own, so the second waits for the first, as another process would.
    """

    def __init__(self) -> None:
        self.locks: dict[Path, tuple[int, int]] = {}


_held = _Held()


class LockBusy(ZmrError):
    """Another zmr process holds the lock of a component."""


L = TypeVar("L")


class LockPaths(Protocol):
    """Where each component's lock file is, and what a component says once its lock is held: a `zmr.model.project.Project`."""

    def lock_path(self, model: str, key: str) -> Path: ...

    def reloaded(self, component: L) -> L: ...


class Lockable(Protocol):
    """A component, or a component `zmr import` is about to create: its model and key."""

    @property
    def model(self) -> str: ...

    @property
    def key(self) -> str: ...


MAX_TIMEOUT = 86400.0
_SECONDS = r"\d+(?:\.\d*)?|\.\d+"  # compiled by re when first used (a variable is set): as zmr.infra.git's patterns


def timeout(default: float = DEFAULT_TIMEOUT) -> float:
    """``$ZMR_LOCK_TIMEOUT`` seconds, else *default*; anything but a number of seconds from 0 to a day is an error (exit 2), never a wait forever."""
    return env_seconds(TIMEOUT_ENV, default, "how long a command waits for another zmr working on the same component")


def env_seconds(name: str, default: float, what: str) -> float:
    """A number of seconds from the environment variable *name* (*default* when unset or empty): 0 to a day, else exit 2 (`inf`, `nan`, `-1`, `abc`)."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    if not re.fullmatch(_SECONDS, value.strip()) or float(value) > MAX_TIMEOUT:
        raise ZmrError(
            f"{name}={value!r}: not a number of seconds from 0 to {MAX_TIMEOUT:g}",
            details=[f"set it to {what} (e.g. {name}=60), or unset it ({default:g} s)"],
        )
    return float(value)


def command_line() -> str:
    """What to call this process in another's message: ``zmr`` and its arguments (shortened)."""
    text = " ".join(["zmr", *sys.argv[1:]])
    return text if len(text) <= 200 else text[:197] + "..."


@contextlib.contextmanager
def hold(project: LockPaths, components: Iterable[Lockable], command: str | None = None) -> Iterator[None]:
    """Hold the lock of every one of *components* (in a fixed order) for the duration of the block."""
    wanted = sorted({(c.model, c.key) for c in components})
    with contextlib.ExitStack() as stack:
        for model, key in wanted:
            stack.enter_context(_hold_one(project.lock_path(model, key), f"{model}/{key}", command or command_line()))
        yield


@contextlib.contextmanager
def hold_file(path: Path, label: str, command: str | None = None, wait: float | None = None, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock file *path* (what it guards named *label* in the message) for the block; *wait* seconds at most (default `timeout`).

    *shared*: held shared, with other shared holders, against an exclusive one; nothing is written into the file (the
    holders are many), and each call holds it on its own open file (threads of one process hold it side by side).
    """
    if shared:
        with _hold_shared(path, label, timeout() if wait is None else wait):
            yield
        return
    with _hold_one(path, label, command or command_line(), wait):
        yield


@contextlib.contextmanager
def probe(path: Path, label: str) -> Iterator[bool]:
    """Whether nobody holds the lock file *path* now, without waiting: True, and it is held exclusively until the end of the block."""
    fd = _open(path, label)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases it


@contextlib.contextmanager
def _hold_shared(path: Path, label: str, wait: float) -> Iterator[None]:
    fd = _open(Path(os.path.abspath(path)), label)
    try:
        _acquire(fd, label, wait, path, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


T = TypeVar("T")
C = TypeVar("C", bound=Lockable)
P = ParamSpec("P")
Pr = TypeVar("Pr", bound=LockPaths)


def locked(function: Callable[Concatenate[Pr, C, P], T]) -> Callable[Concatenate[Pr, C, P], T]:
    """Run ``function(project, component, ...)`` holding *component*'s lock, *component* read again once it is held (``Project.reloaded``)."""

    @functools.wraps(function)
    def wrapper(project: Pr, component: C, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with hold(project, [component]):
            # What the manifest says now: another zmr held the lock meanwhile (a rebase moved the pin), and what was read before is stale.
            return function(project, project.reloaded(component), *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _hold_one(path: Path, label: str, command: str, wait: float | None = None) -> Iterator[None]:
    path = Path(os.path.abspath(path))
    if path in _held.locks:
        fd, count = _held.locks[path]
        _held.locks[path] = (fd, count + 1)
        try:
            yield
        finally:
            fd, count = _held.locks[path]
            _held.locks[path] = (fd, count - 1)
        return
    fd = _open(path, label)
    try:
        _acquire(fd, label, timeout() if wait is None else wait, path, fcntl.LOCK_EX)
        _record(fd, command)
        _held.locks[path] = (fd, 1)
        pause_point("locked")
        try:
            yield
        finally:
            del _held.locks[path]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale holder for the next message
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would let a third process lock a new file)


def _open(path: Path, label: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # O_NOFOLLOW: a link planted there is refused, never followed; O_NONBLOCK: a FIFO never blocks the open.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise LockBusy(
                f"{path}: the lock file of {label} is a symbolic link; zmr does not follow it (nor remove it)", details=[f"remove {path} and run again"]
            ) from None
        if err.errno == errno.EISDIR:
            raise LockBusy(f"{path}: the lock file of {label} is a folder; zmr does not remove it", details=[f"remove {path} (rmdir) and run again"]) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockBusy(f"{path}: the lock file of {label} is not a regular file; zmr does not remove it", details=[f"remove {path} and run again"])
    return fd


def _acquire(fd: int, label: str, wait: float, path: Path | None, mode: int) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if time.monotonic() >= deadline:
            raise _busy(fd, label, path, wait)
        time.sleep(_POLL)


def _busy(fd: int, label: str, path: Path | None = None, wait: float | None = None) -> LockBusy:
    """The message for a lock held by another process: who wrote it (pid, host, command, since when), as far as the file says, checked before it is believed."""
    holder = _holder(fd)
    pid = holder.get("pid") if isinstance(holder.get("pid"), int) and not isinstance(holder.get("pid"), bool) else None
    host = holder.get("host") if isinstance(holder.get("host"), str) else None
    since = f" since {holder['started']}" if isinstance(holder.get("started"), str) else ""
    doing = f" (`{holder['command']}`)" if isinstance(holder.get("command"), str) else ""
    where = f" on {host}" if host else ""
    retry = f"to wait longer for it, set {TIMEOUT_ENV}=<seconds> (now {timeout() if wait is None else wait:g})"
    if pid is None:
        shown = path if path is not None else label
        return LockBusy(
            f"another zmr is working on {label} (its lock file does not say which process: not written by zmr, or not yet)",
            details=[f"wait until it has finished, then run this command again; `fuser {shown}` names the process", retry],
        )
    import socket  # here: only a busy lock and a lock taken need the host's name

    if (host is None or host == socket.gethostname()) and not _alive(pid):
        shown = path if path is not None else label
        return LockBusy(
            f"the lock of {label} is held, but the zmr that wrote it (pid {pid}{where}{doing}{since}) is gone",
            details=[
                "a process it started still holds the lock file open; zmr neither breaks nor removes a lock that is held",
                f"find it with `fuser {shown}`, let it finish or stop it, then run this command again",
            ],
        )
    return LockBusy(
        f"another zmr (pid {pid}{where}) is working on {label}{since}",
        details=[f"wait until it has finished{doing}, then run this command again", retry],
    )


def _alive(pid: int) -> bool:
    """A process *pid* exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return pid > 0


def _holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, _MAX_HOLDER_BYTES, 0)
    except OSError:
        return {}
    return lock_holder(data)  # {}: the holder has not written it yet, or it is not ours


def _record(fd: int, command: str) -> None:
    import json
    import socket

    started = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command, "started": started}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds the lock file *path* now ({pid, command, started}; {} when it has not said yet), or None when nobody does.

    Only looks: a lock that is free is taken and let go at once (shared, so it never delays a holder), and a missing
    file is not created.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
