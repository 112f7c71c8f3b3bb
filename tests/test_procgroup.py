"""zmr.infra.procgroup on its own: one shell command in its own process group, its status, and the group ended every way a run
can end (exit, timeout, cancel, an exception in the caller, processes left behind).

The smoke executors that use it are tested through `zmr smoke` in tests/smoke/; here the function's contract, with
short timeouts and a short grace. Processes are real: a left-behind process is looked for by its pid file.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from zmr.infra.errors import ZmrError
from zmr.infra.procgroup import DEFAULT_KILL_GRACE, ERROR, FAILED, KILL_GRACE_ENV, PASSED, TIMEOUT, kill_grace, run_command


def _run(tmp_path: Path, command: str, timeout: float = 30, **kw):
    log = tmp_path / "run.log"
    env = {"PATH": os.environ["PATH"], "MARK": "m1"}
    outcome = run_command(command, cwd=tmp_path, env=env, timeout=timeout, log_path=log, grace=kw.pop("grace", 0.5), **kw)
    return outcome, log.read_text()


def _alive(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != b"Z"


def _wait_for(path: Path, seconds: float = 30) -> None:
    until = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < until, f"{path} never appeared"
        time.sleep(0.02)


def test_exit_zero_passes_and_the_output_goes_to_the_log_in_the_given_folder_and_environment(tmp_path):
    outcome, log = _run(tmp_path, 'echo "out $MARK"; echo err >&2; pwd')
    assert (outcome.status, outcome.exit_code, outcome.message) == (PASSED, 0, "")
    assert log == f"out m1\nerr\n{tmp_path}\n"
    assert outcome.duration >= 0 and outcome.started <= time.time()


def test_stdin_is_closed(tmp_path):
    outcome, log = _run(tmp_path, "cat; echo done")
    assert outcome.status == PASSED and log == "done\n"


def test_another_exit_fails_with_its_status_and_the_log_says_so(tmp_path):
    outcome, log = _run(tmp_path, "echo partial; exit 7")
    assert (outcome.status, outcome.exit_code, outcome.message) == (FAILED, 7, "exit status 7")
    assert log == "partial\n\nzmr: failed: exit status 7\n"


def test_a_command_killed_by_a_signal_fails_naming_the_signal(tmp_path):
    outcome, log = _run(tmp_path, "kill -SEGV $$")
    assert (outcome.status, outcome.exit_code, outcome.message) == (FAILED, -11, "killed by signal SIGSEGV")
    assert log.endswith("zmr: failed: killed by signal SIGSEGV\n")


def test_a_timeout_kills_the_whole_group_children_included(tmp_path):
    child = tmp_path / "child.pid"
    outcome, log = _run(tmp_path, f"sleep 60 & echo $! > {child}; wait", timeout=0.5)
    assert outcome.status == TIMEOUT
    assert outcome.message == "timed out after 0.5 s; its process group was killed"
    assert outcome.duration < 20
    assert not _alive(child)
    assert log.endswith("zmr: timeout: timed out after 0.5 s; its process group was killed\n")


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    started = time.monotonic()
    outcome, _ = _run(tmp_path, "trap '' TERM; while :; do sleep 0.05; done", timeout=0.3, grace=0.5)
    took = time.monotonic() - started
    assert outcome.status == TIMEOUT and outcome.exit_code == -9  # SIGKILL, after SIGTERM was ignored
    assert 0.8 <= took < 20


def test_processes_left_behind_after_the_command_exits_are_ended(tmp_path):
    child = tmp_path / "child.pid"
    outcome, log = _run(tmp_path, f"sleep 60 > /dev/null 2>&1 & echo $! > {child}; exit 0")
    assert outcome.status == PASSED  # the command itself passed
    assert outcome.message == "left processes running; they were ended"
    assert not _alive(child)
    assert "zmr:" not in log


def test_left_processes_beside_a_failure_are_named_after_the_exit_status(tmp_path):
    outcome, _ = _run(tmp_path, "sleep 60 > /dev/null 2>&1 & exit 4")
    assert (outcome.status, outcome.message) == (FAILED, "exit status 4; left processes running; they were ended")


def test_cancel_ends_the_group_as_an_error(tmp_path):
    cancel = threading.Event()
    child = tmp_path / "child.pid"
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        outcome, _ = _run(tmp_path, f"sleep 60 & echo $! > {child}; wait", cancel=cancel)
    finally:
        timer.cancel()
    assert (outcome.status, outcome.message) == (ERROR, "cancelled")
    assert not _alive(child)


def test_an_exception_in_the_callers_thread_ends_the_group_before_it_propagates(tmp_path):
    child = tmp_path / "child.pid"

    class Stop(Exception):
        pass

    class Interrupting(threading.Event):  # the loop polls cancel: raise from there once the child runs, as a Ctrl-C would
        def is_set(self) -> bool:
            if child.exists() and child.read_text().strip():
                raise Stop
            return False

    with pytest.raises(Stop):
        _run(tmp_path, f"sleep 60 & echo $! > {child}; wait", cancel=Interrupting())
    assert not _alive(child)


def test_a_command_that_cannot_start_is_an_error_with_the_reason_in_the_log(tmp_path):
    log = tmp_path / "run.log"
    outcome = run_command("true", cwd=tmp_path / "missing", env={}, timeout=5, log_path=log, grace=0.1)
    assert outcome.status == ERROR and outcome.exit_code is None
    assert outcome.message.startswith("cannot start the command:")
    assert log.read_text().startswith("zmr: cannot start /bin/sh:")


def test_the_kill_grace_comes_from_the_environment_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.delenv(KILL_GRACE_ENV, raising=False)
    assert kill_grace() == DEFAULT_KILL_GRACE
    monkeypatch.setenv(KILL_GRACE_ENV, "")
    assert kill_grace() == DEFAULT_KILL_GRACE
    monkeypatch.setenv(KILL_GRACE_ENV, "2.5")
    assert kill_grace() == 2.5
    for bad in ("-1", "inf", "nan", "abc", "100000"):
        monkeypatch.setenv(KILL_GRACE_ENV, bad)
        with pytest.raises(ZmrError) as err:
            kill_grace()
        assert err.value.message.startswith(f"{KILL_GRACE_ENV}={bad!r}: not a number of seconds"), bad


def test_without_a_grace_argument_the_environments_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_GRACE_ENV, "0.2")
    started = time.monotonic()
    outcome = run_command(
        "trap '' TERM; while :; do sleep 0.05; done", cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout=0.2, log_path=tmp_path / "log"
    )
    assert outcome.status == TIMEOUT and outcome.exit_code == -9
    assert time.monotonic() - started < DEFAULT_KILL_GRACE  # not the default 10 s
