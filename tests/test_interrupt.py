"""Kill tests: SIGINT or SIGKILL at random moments of real runs, then check the invariants.

After every interruption: each release branch is absent or exactly the
expected commit (never half-moved), the repository passes `git fsck`, the
next run succeeds and verifies, and the cache holds no half-made mirror.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import git, make_patch, make_upstream, simple_model, zmr

KILLS = int(os.environ.get("ZMR_KILL_ITERATIONS", "24"))


def _start(args, cwd, cache):
    return subprocess.Popen(
        [sys.executable, "-m", "zmr", *args], cwd=cwd, env={**os.environ, "ZMR_CACHE": str(cache)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )


def _interrupt(proc, delay: float, sig: int) -> int:
    time.sleep(delay)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)  # the whole group, as a terminal's Ctrl-C would
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    return proc.returncode


def test_build_and_fetch_survive_interruption_at_random_points(tmp_path, upstream):
    project_root = tmp_path / "project"
    from conftest import make_project

    project = make_project(project_root)
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    reference_cache = tmp_path / "reference-cache"
    assert zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(reference_cache)}).returncode == 0
    expected = {ref: oid for ref, oid in project.refs().items() if ref.startswith("refs/heads/rollout/")}
    assert len(expected) == 2
    rng = random.Random(20261129)
    outcomes = {"killed": 0, "finished": 0}
    for iteration in range(KILLS):
        for ref in expected:
            git("update-ref", "-d", ref, cwd=project.root)
        cache = tmp_path / f"cache-{iteration % 3}"  # some runs start cold, some warm
        command = ["build", "--all"] if iteration % 4 else ["fetch"]
        sig = signal.SIGKILL if iteration % 2 else signal.SIGINT
        code = _interrupt(_start(command, project.root, cache), rng.uniform(0.0, 0.6), sig)
        outcomes["finished" if code == 0 else "killed"] += 1
        # Refs: absent or exactly right.
        for ref, oid in expected.items():
            assert project.ref(ref) in (None, oid), (iteration, ref)
        git("fsck", "--no-dangling", "--no-progress", cwd=project.root)
        # The next run recovers.
        result = zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)})
        assert result.returncode == 0, (iteration, result.stderr)
        assert {ref: project.ref(ref) for ref in expected} == expected
        assert not list((cache / "mirrors").glob(".tmp-*")), iteration
    # The random delays must really have hit runs in flight, not only finished ones.
    assert outcomes["killed"] >= KILLS // 3, outcomes
