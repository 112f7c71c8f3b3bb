"""Test hooks that make a zmr process fail at a chosen point, as a crash or a full disk would.

zmr calls ``fault_point(name)`` at each step that changes something on disk
or runs git: every git process it starts (``git <subcommand>``), each file
``atomic_write`` writes (``atomic-write`` before its flush, ``atomic-rename``
after its rename), each step of a transaction (``journal``, ``stage-write``,
``commit-point``, ``txn-rename``, ``txn-remove``), the cache's own files
(``cache-write``: a revision folder of ``zmr diff`` before its rename).
Without the variables below it does nothing (one dictionary lookup).

- ``ZMR_TEST_KILL=N``: the process sends itself SIGKILL at its N-th point,
  as the out-of-memory killer or a pre-empted CI machine would;
- ``ZMR_TEST_KILL_LOG=FILE``: each point's name is appended to FILE, one a
  line, before the kill (the kill harness counts a command's points with it);
- ``ZMR_TEST_FAULT=NAME=ERRNO``: the first point NAME raises ``OSError``
  with that errno (``ENOSPC``, ``EDQUOT``, ``EIO``), as a full disk would.
  At a git point (``git update-ref=ENOSPC``, ``git fetch=EDQUOT``) git is
  not started and fails as it does on a full disk (exit 128, the error's
  text on stderr: zmr/infra/git.py's ``run``), so the code that answers a real
  full disk is what runs.

The values are parsed strictly: anything else is an error (exit 2), never a
hook that silently does nothing.

``pause_point(name)`` is the hook that holds a process still instead: with
``ZMR_TEST_PAUSE=NAME=FILE`` in the environment, a process reaching the point
NAME (the first time) creates FILE (holding its pid) and waits until FILE is
removed, so that a test can signal or race it at a known moment instead of
sleeping and hoping (``locked``: a lock was just taken, `zmr.infra.lock`;
``transaction-staged``, ``transaction-renaming``: `zmr.infra.transaction`).
A signal sent then lands in code compiled from a string, as it can in a
dataclass being made by a lazy import (issue #47).
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

from zmr.infra.errors import ZmrError

KILL_ENV = "ZMR_TEST_KILL"
KILL_LOG_ENV = "ZMR_TEST_KILL_LOG"
FAULT_ENV = "ZMR_TEST_FAULT"
PAUSE_ENV = "ZMR_TEST_PAUSE"
_PAUSE_POLL = 0.05
_ERRNOS = ("ENOSPC", "EDQUOT", "EIO", "EROFS", "EACCES")

_count = 0
_faulted: set[str] = set()
_paused: set[str] = set()


def fault_point(name: str) -> None:
    """The hooks of the module docstring at the point *name*."""
    if KILL_ENV not in os.environ and FAULT_ENV not in os.environ and KILL_LOG_ENV not in os.environ:
        return
    global _count
    _count += 1
    log = os.environ.get(KILL_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{name}\n")
    kill_at = _kill_at()
    if kill_at is not None and _count >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    fault = _fault()
    if fault is not None and fault[0] == name and name not in _faulted:
        _faulted.add(name)
        code = getattr(errno, fault[1])
        raise OSError(code, os.strerror(code))


def _kill_at() -> int | None:
    value = os.environ.get(KILL_ENV)
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ZmrError(f"{KILL_ENV}={value!r}: not a point number (1 or more)", details=[f"unset {KILL_ENV}; it is a hook for zmr's own tests"])
    return int(value)


def _fault() -> tuple[str, str] | None:
    value = os.environ.get(FAULT_ENV)
    if value is None:
        return None
    name, _, code = value.rpartition("=")
    if not name or code not in _ERRNOS:
        raise ZmrError(
            f"{FAULT_ENV}={value!r}: not POINT=ERRNO (ERRNO one of {', '.join(_ERRNOS)})", details=[f"unset {FAULT_ENV}; it is a hook for zmr's own tests"]
        )
    return name, code


def pause_point(name: str) -> None:
    """The pause hook of the module docstring: with ``ZMR_TEST_PAUSE=NAME=FILE``, wait at *name* while FILE exists."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec or "=" not in spec:
        return
    point, marker = spec.split("=", 1)
    if point != name or name in _paused:
        return
    _paused.add(name)  # once per process: the test chose one moment
    Path(marker).write_text(f"{os.getpid()}\n")
    # The wait runs in code compiled from a string, as a dataclass's generated methods and typer's evaluated annotations
    # do: an interrupt raised there is one CPython notes as unhandled (zmr/__main__.py), the hardest place for a signal.
    exec("while exists(marker):\n    sleep(poll)\n", {"exists": os.path.exists, "marker": marker, "sleep": time.sleep, "poll": _PAUSE_POLL})
