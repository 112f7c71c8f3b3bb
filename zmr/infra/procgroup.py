"""Run one shell command in its own process group, and end the whole group.

``run_command`` starts ``/bin/sh -c COMMAND`` in a new session (its own
process group), output to a log file, stdin closed. On timeout or cancel the
whole group gets SIGTERM, then SIGKILL after a grace period
(``ZMR_SMOKE_KILL_GRACE`` seconds, default 10); processes the command leaves
behind after it exits are ended the same way. The leader is reaped only after
its group is gone, so the group id cannot be reused meanwhile.

Both smoke executors use it: the local one in a thread per test, the Ray one
inside the task on a worker. Standard library only, so a Ray worker needs
nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

PASSED, FAILED, TIMEOUT, ERROR = "passed", "failed", "timeout", "error"
STATUSES = (PASSED, FAILED, TIMEOUT, ERROR)
DEFAULT_KILL_GRACE = 10.0
KILL_GRACE_ENV = "ZMR_SMOKE_KILL_GRACE"
_POLL = 0.05


@dataclass
class Outcome:
    """What running one command gave: status, exit code, timing."""

    status: str
    exit_code: int | None
    started: float  # epoch seconds
    duration: float
    message: str = ""


def kill_grace() -> float:
    """``$ZMR_SMOKE_KILL_GRACE`` seconds, default 10; a value that is not a number of seconds up to a day is an error (exit 2), never a wait forever."""
    from zmr.infra.lock import env_seconds

    return env_seconds(KILL_GRACE_ENV, DEFAULT_KILL_GRACE, "the seconds between SIGTERM and SIGKILL of a smoke test's process group")


def run_command(
    command: str,
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    timeout: float,
    log_path: str | os.PathLike[str],
    cancel: threading.Event | None = None,
    grace: float | None = None,
) -> Outcome:
    """Run ``/bin/sh -c COMMAND`` in its own process group, output to *log_path*.

    Status: passed (exit 0), failed (other exit), timeout (ran past
    *timeout*; the group was killed), error (could not start, or *cancel*
    was set). An exception in the caller's thread (Ctrl-C, a cancelled Ray
    task) kills the group before it propagates.
    """
    grace = kill_grace() if grace is None else grace
    started = time.time()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            log.write(f"zmr: cannot start /bin/sh: {exc}\n".encode())
            return Outcome(ERROR, None, started, time.time() - started, f"cannot start the command: {exc}")
    clock = time.monotonic()
    deadline = clock + timeout
    status = ""
    message = ""
    try:
        while not _exited(proc):
            if cancel is not None and cancel.is_set():
                status, message = ERROR, "cancelled"
                _end_group(proc, grace)
                break
            if time.monotonic() >= deadline:
                status, message = TIMEOUT, f"timed out after {_fmt_seconds(timeout)}; its process group was killed"
                _end_group(proc, grace)
                break
            time.sleep(_POLL)
        else:
            if _group_alive(proc.pid):
                message = "left processes running; they were ended"
                _end_group(proc, grace)
    except BaseException:
        _end_group(proc, grace)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
        raise
    duration = time.monotonic() - clock
    returncode = _reap(proc)
    if not status:
        if returncode == 0:
            status = PASSED
        else:
            status = FAILED
            text = (
                f"exit status {returncode}"
                if returncode is not None and returncode >= 0
                else f"killed by signal {_signal_name(-returncode)}"
                if returncode is not None
                else "exit status unknown"
            )
            message = f"{text}; {message}" if message else text
    if status != PASSED:
        with contextlib.suppress(OSError), open(log_path, "ab") as log:
            log.write(f"\nzmr: {status}: {message}\n".encode())
    return Outcome(status, returncode, started, duration, message)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """The leader has exited (it is left a zombie, so its group id stays reserved)."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):  # pragma: no cover - macOS: reap at once
        return proc.poll() is not None
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored)
        return True
    return info is not None and info.si_pid != 0


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def _end_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the whole group, then SIGKILL once *grace* seconds have passed."""
    pgid = proc.pid
    _killpg(pgid, signal.SIGTERM)
    until = time.monotonic() + grace
    while time.monotonic() < until:
        if _exited(proc) and not _group_alive(pgid):
            return
        time.sleep(_POLL)
    _killpg(pgid, signal.SIGKILL)
    # Give the kernel a moment to deliver it before the leader is reaped.
    until = time.monotonic() + 5
    while time.monotonic() < until and _group_alive(pgid):
        time.sleep(_POLL)


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any process of group *pgid* other than its (zombie) leader still runs."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return _group_signalable(pgid)
    for name in names:
        if not name.isdigit() or int(name) == pgid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def _group_signalable(pgid: int) -> bool:  # pragma: no cover - systems without /proc
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _fmt_seconds(value: float) -> str:
    return f"{value:g} s"
