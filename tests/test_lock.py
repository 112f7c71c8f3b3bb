"""One zmr per component (zmr.infra.lock): a held lock refuses every writing command with exit 2, names its holder, or is waited for.

The races use test_transaction's pause points (``ZMR_TEST_PAUSE=POINT=FILE``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import interrupted, make_project, simple_model, state_dir, zmr
from test_transaction import _export_fixture, _files, _finish, _paused, _reset, _start, _tree_bytes

ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def test_a_held_component_lock_refuses_every_writing_command_with_exit_2(tmp_path, upstream):
    """The lock is an flock on <state folder>/locks/<model>/<component>.lock: held here, export, checkout, rebase and build refuse."""
    project = _export_fixture(tmp_path, upstream, added=2)
    before = _files(project)
    lock_file = state_dir(project.root) / "locks/toy/rollout.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        quick = {"ZMR_LOCK_TIMEOUT": "0.3"}
        for args in (["export", "toy"], ["checkout", "toy", "--force"], ["rebase", "toy", "-c", "rollout", "--onto", upstream.commits[2]], ["build", "toy"]):
            result = zmr(*args, cwd=project.root, env=quick)
            assert result.returncode == 2, (args, result.stderr)
            assert "zmr: error: another zmr is working on toy/rollout" in result.stderr, (args, result.stderr)
            assert "ZMR_LOCK_TIMEOUT=<seconds> (now 0.3)" in result.stderr, args
            assert "git" not in result.stderr.lower().replace("/.git/zmr/locks/", ""), (args, result.stderr)  # no git error: only the lock's path
        assert _files(project) == before
        assert project.ref("refs/heads/rollout/toy") is None  # build moved no branch
        assert not (state_dir(project.root) / "rebase/toy/rollout").exists()
    assert zmr("export", "toy", cwd=project.root).returncode == 0  # released: the next one goes through


def test_two_exports_of_one_checkout_write_the_series_once(tmp_path, upstream):
    """Today both exit 0 and the series gets every new patch twice; now the second refuses (exit 2) or waits, and the result is one export's."""
    project = _export_fixture(tmp_path, upstream, added=5)
    series = project.root / "patches/toy/rollout"
    before = _tree_bytes(series)
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    after = _tree_bytes(series)
    assert len(after) == len(before) + 5
    _reset(project)
    marker = tmp_path / "paused"
    first = _paused(["export", "toy"], project.root, "locked", marker)
    refused = zmr("export", "toy", cwd=project.root, env={"ZMR_LOCK_TIMEOUT": "0.2"})
    assert refused.returncode == 2, refused.stderr
    host = re.escape(socket.gethostname())
    assert re.search(rf"another zmr \(pid {first.pid} on {host}\) is working on toy/rollout since {ISO_UTC}\n", refused.stderr), refused.stderr
    assert "`zmr export toy`" in refused.stderr  # what the other one is doing
    waiting = _start(["export", "toy"], project.root, {"ZMR_LOCK_TIMEOUT": "120"})
    time.sleep(0.5)
    assert waiting.poll() is None  # it waits for the lock...
    assert _tree_bytes(series) == before
    marker.unlink()
    assert _finish(first)[0] == 0
    code, err = _finish(waiting)  # ...and then finds the work done
    assert code == 0, err
    assert _tree_bytes(series) == after  # each new patch once, no "-2.patch"


def test_a_second_rebase_of_a_component_refuses_without_a_git_error(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    marker = tmp_path / "paused"
    args = ["rebase", "toy", "-c", "rollout", "--onto", upstream.commits[2]]
    first = _paused(args, project.root, "locked", marker)
    for second in (args, ["rebase", "toy", "-c", "rollout", "--abort"], ["update", "toy", "--apply"]):
        result = zmr(*second, cwd=project.root, env={"ZMR_LOCK_TIMEOUT": "0.2"})
        assert result.returncode == 2, (second, result.stderr)
        assert f"another zmr (pid {first.pid} on {socket.gethostname()}) is working on toy/rollout since" in result.stderr, (second, result.stderr)
        assert "git" not in result.stderr.split("working on")[1].lower(), result.stderr
    marker.unlink()
    code, err = _finish(first)
    assert code == 0, err
    assert upstream.commits[2] in (project.root / "manifests/toy.yaml").read_text()
    assert not (state_dir(project.root) / "rebase/toy/rollout").exists()


# -- locks that say who, and are never trusted blindly -------------------------------------------------


def test_a_lock_timeout_that_is_not_a_number_of_seconds_is_exit_2_at_once(tmp_path, upstream):
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    for value in ("abc", "-1", "inf", "nan", "1e9", "100000", " 5 s"):
        started = time.monotonic()
        result = zmr("list", cwd=project.root, env={"ZMR_LOCK_TIMEOUT": value})
        assert result.returncode == 2, (value, result.stderr)
        assert f"ZMR_LOCK_TIMEOUT={value!r}: not a number of seconds from 0 to 86400" in result.stderr, result.stderr
        assert time.monotonic() - started < 30
    for value in ("0", "2.5", ".5", ""):
        assert zmr("list", cwd=project.root, env={"ZMR_LOCK_TIMEOUT": value}).returncode == 0, value


def test_odd_lock_files_are_named_for_what_they_are_and_never_removed(tmp_path, upstream):
    """A folder, a link, garbage held by some process, a record of a pid that is gone: each named, none removed or followed."""
    project = _export_fixture(tmp_path, upstream, added=1)
    before = _files(project)
    lock_file = state_dir(project.root) / "locks/toy/rollout.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    quick = {"ZMR_LOCK_TIMEOUT": "0.2"}
    lock_file.unlink(missing_ok=True)  # the checkout made it: a lock file stays when its holder ends
    lock_file.mkdir()
    result = zmr("export", "toy", cwd=project.root, env=quick)
    assert result.returncode == 2 and "the lock file of toy/rollout is a folder; zmr does not remove it" in result.stderr, result.stderr
    assert lock_file.is_dir()
    lock_file.rmdir()
    target = tmp_path / "elsewhere"
    target.write_text("not a lock\n")
    lock_file.symlink_to(target)
    result = zmr("export", "toy", cwd=project.root, env=quick)
    assert result.returncode == 2 and "is a symbolic link; zmr does not follow it" in result.stderr, result.stderr
    assert lock_file.is_symlink() and target.read_text() == "not a lock\n"
    lock_file.unlink()
    gone = subprocess.Popen(["true"])
    gone.wait()
    for content, words in ((b"\x00garbage{", "its lock file does not say which process"), (json.dumps({"pid": gone.pid, "command": "zmr export toy", "started": "2026-01-01T00:00:00Z"}).encode(), f"the zmr that wrote it (pid {gone.pid}")):
        lock_file.write_bytes(content)
        with open(lock_file, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # a process zmr did not start (or a child of a killed zmr) holds it
            result = zmr("export", "toy", cwd=project.root, env=quick)
            assert result.returncode == 2 and words in result.stderr, result.stderr
            assert "Traceback" not in result.stderr
            assert lock_file.read_bytes() == content  # never rewritten, broken or removed while held
    assert _files(project) == before
    # A record left by a zmr that was killed (no one holds the lock): only a record; the next zmr takes the lock.
    lock_file.write_bytes(json.dumps({"pid": gone.pid, "command": "zmr export toy"}).encode())
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    assert _files(project) != before and lock_file.is_file()


def test_export_waits_for_a_running_rebase_or_names_it(tmp_path, upstream):
    """issue #36: export 0.1 s after `zmr rebase --onto` read the half-done state and said "the base moved"; now it waits for the lock, or names the rebase."""
    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    model_py = upstream.file_at(upstream.commits[1], "src/model.py")
    upstream.commit({"src/model.py": model_py + "\n# upstream moved on\n"}, "Upstream moves on")
    marker = tmp_path / "paused"
    rebase = _paused(["rebase", "toy", "--onto", "main"], project.root, "locked", marker)
    refused = zmr("export", "toy", cwd=project.root, env={"ZMR_LOCK_TIMEOUT": "0.3"})
    assert refused.returncode == 2, refused.stderr
    assert re.search(rf"another zmr \(pid {rebase.pid} on \S+\) is working on toy/rollout since {ISO_UTC}", refused.stderr), refused.stderr
    assert "`zmr rebase toy --onto main`" in refused.stderr and "base moved" not in refused.stderr
    waiting = _start(["export", "toy"], project.root, {"ZMR_LOCK_TIMEOUT": "120"})
    time.sleep(0.5)
    assert waiting.poll() is None  # it waits for the rebase...
    marker.unlink()
    code, err = _finish(rebase)
    assert code == 0, err
    code, err = _finish(waiting)  # ...and then exports the rebased checkout: nothing to write
    assert code == 0, err
    assert "base moved" not in err
    assert zmr("verify", "toy", cwd=project.root).returncode in (0, 1)


def test_the_smoke_kill_grace_from_the_environment_is_parsed_as_strictly(monkeypatch):
    """`ZMR_SMOKE_KILL_GRACE=inf` waited forever between SIGTERM and SIGKILL; now any value but 0 to 86400 seconds is exit 2."""
    import pytest

    from zmr.infra.errors import ZmrError
    from zmr.infra.procgroup import kill_grace

    monkeypatch.delenv("ZMR_SMOKE_KILL_GRACE", raising=False)
    assert kill_grace() == 10.0
    monkeypatch.setenv("ZMR_SMOKE_KILL_GRACE", "0.5")
    assert kill_grace() == 0.5
    for value in ("inf", "nan", "-3", "ten", "1e5"):
        monkeypatch.setenv("ZMR_SMOKE_KILL_GRACE", value)
        with pytest.raises(ZmrError) as refused:
            kill_grace()
        assert refused.value.exit_code == 2 and f"ZMR_SMOKE_KILL_GRACE={value!r}: not a number of seconds from 0 to 86400" in refused.value.message


def test_ctrl_c_reaches_a_zmr_started_with_sigint_ignored(tmp_path, upstream):
    """A background job of a shell without job control starts with SIGINT ignored, and Python keeps it so: `zmr smoke` once sat out a Ctrl-C for 240 s."""
    project = _export_fixture(tmp_path, upstream, added=1)
    marker = tmp_path / "paused"

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    full = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmr", "export", "toy"],
        cwd=project.root,
        env={**full, "ZMR_TEST_PAUSE": f"locked={marker}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    err = interrupted(proc, "zmr export (started with SIGINT ignored)")
    assert proc.returncode == 130 and "zmr: interrupted" in err, err


def test_a_held_mirror_lock_is_waited_for_up_to_the_lock_timeout_and_its_holder_named(tmp_path, upstream):
    """The cache's lock of a mirror is zmr.infra.lock's too: a stuck holder is named after ZMR_LOCK_TIMEOUT seconds, never waited for forever (#49)."""
    from zmr.infra import lock
    from zmr.infra.cache import Cache

    project = make_project(tmp_path / "proj")
    simple_model(project, upstream)
    mirror_lock = Cache().mirror_for(str(upstream.path.resolve())).path.with_suffix(".lock")
    with lock.hold_file(mirror_lock, "a test holding the mirror", command="zmr build (a test)"):
        env = {**os.environ, "ZMR_LOCK_TIMEOUT": "0.3"}
        env.pop("ZMR_REPO", None)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "zmr", "build", "toy"], cwd=project.root, env=env, capture_output=True, text=True, timeout=60)
        waited = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    host = re.escape(socket.gethostname())
    assert re.search(rf"another zmr \(pid {os.getpid()} on {host}\) is working on the mirror of \S+ in the cache since {ISO_UTC}", result.stderr), result.stderr
    assert "`zmr build (a test)`" in result.stderr and "ZMR_LOCK_TIMEOUT=<seconds> (now 0.3)" in result.stderr
    assert waited < 30
    assert zmr("build", "toy", cwd=project.root).returncode == 0  # released: the next one goes through


def test_a_mirror_lock_waits_longer_than_a_components_by_default(monkeypatch):
    """A fetch holds the mirror's lock for as long as it takes: unset, the wait is lock.MIRROR_TIMEOUT; ZMR_LOCK_TIMEOUT governs both when set."""
    from zmr.infra import lock

    monkeypatch.delenv("ZMR_LOCK_TIMEOUT", raising=False)
    assert (lock.timeout(), lock.timeout(lock.MIRROR_TIMEOUT)) == (5.0, 600.0)
    monkeypatch.setenv("ZMR_LOCK_TIMEOUT", "12")
    assert (lock.timeout(), lock.timeout(lock.MIRROR_TIMEOUT)) == (12.0, 12.0)


def test_a_shared_lock_is_held_beside_others_and_against_a_probe(tmp_path):
    """git's writers lock: shared holders side by side, each on its own open file; an exclusive probe sees them and waits for none."""
    from zmr.infra import lock

    path = tmp_path / "mirror.writers"
    with lock.hold_file(path, "writers", shared=True), lock.hold_file(path, "writers", shared=True):
        with lock.probe(path, "writers") as idle:
            assert idle is False
        assert path.read_bytes() == b""  # a shared holder writes nothing into the file
    with lock.probe(path, "writers") as idle:
        assert idle is True
        with pytest.raises(lock.LockBusy, match="another zmr is working on writers"):
            with lock.hold_file(path, "writers", shared=True, wait=0.1):
                pass


def test_two_threads_that_want_one_lock_take_it_one_after_the_other(tmp_path):
    """Re-entrancy is per thread: a second thread waits for the first, as a second process would (zmr diff's threads each
    took a mirror's lock as if re-entrant, and the first to finish removed the other's hold: KeyError, and both made the mirror)."""
    import threading

    from zmr.infra import lock

    path = tmp_path / "m.lock"
    inside, overlaps = [], []

    def work() -> None:
        with lock.hold_file(path, "m", wait=30):
            inside.append(1)
            overlaps.append(len(inside))
            time.sleep(0.2)
            inside.pop()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1, 1, 1]
    with lock.hold_file(path, "m"), lock.hold_file(path, "m"):  # re-entrant within one thread
        pass
