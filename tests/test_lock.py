"""One zmr per component (zmr.lock): a held lock refuses every writing command with exit 2, names its holder, or is waited for.

The races use test_transaction's pause points (``ZMR_TEST_PAUSE=POINT=FILE``).
"""

from __future__ import annotations

import fcntl
import re
import time

from conftest import make_project, simple_model, state_dir, zmr
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
            assert "git" not in result.stderr.lower(), (args, result.stderr)
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
    assert re.search(rf"another zmr \(pid {first.pid}\) is working on toy/rollout since {ISO_UTC}\n", refused.stderr), refused.stderr
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
        assert f"another zmr (pid {first.pid}) is working on toy/rollout since" in result.stderr, (second, result.stderr)
        assert "git" not in result.stderr.split("working on")[1].lower(), result.stderr
    marker.unlink()
    code, err = _finish(first)
    assert code == 0, err
    assert upstream.commits[2] in (project.root / "manifests/toy.yaml").read_text()
    assert not (state_dir(project.root) / "rebase/toy/rollout").exists()
