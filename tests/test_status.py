"""`zmr status`: per component its pin, release branch (missing, current, stale), checkout and the work not exported,
rebase in progress, and who holds its lock: read from real repositories, checkouts and a zmr process holding the lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import git, simple_model, zmr


def _status(project) -> dict:
    result = zmr("status", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    [entry] = json.loads(result.stdout)["components"]
    return entry


def test_status_follows_a_component_through_build_checkout_and_edits(project, upstream):
    pin = simple_model(project, upstream)
    entry = _status(project)
    assert (entry["model"], entry["component"], entry["pin"], entry["branch"]) == ("toy", "rollout", pin, "rollout/toy")
    assert (entry["release"], entry["release_tip"], entry["checkout"], entry["not_exported"]) == ("missing", None, None, [])
    assert entry["rebase_in_progress"] is False and entry["lock_holder"] is None
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    entry = _status(project)
    assert entry["release"] == "current" and entry["release_tip"] == project.ref("refs/heads/rollout/toy")
    # A checkout with a commit not exported yet.
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    work = project.root / "work" / "toy" / "rollout"
    (work / "src" / "new.py").write_text("x = 1\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "Add new.py", cwd=work)
    entry = _status(project)
    assert entry["checkout"] == str(work)
    assert entry["not_exported"] and "not exported" in entry["not_exported"][0]
    text = zmr("status", cwd=project.root)
    assert "toy/rollout" in text.stdout and "(not exported)" in text.stdout and "current" in text.stdout
    # Exported: the series changed, so the branch built before is stale until the next build.
    assert zmr("export", "toy", cwd=project.root).returncode == 0
    entry = _status(project)
    assert entry["not_exported"] == [] and entry["release"] == "stale"
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert _status(project)["release"] == "current"


def test_status_names_the_lock_holder(project, upstream, tmp_path):
    simple_model(project, upstream)
    pause = tmp_path / "paused"
    env = dict(os.environ, ZMR_TEST_PAUSE=f"locked={pause}")
    holder = subprocess.Popen([sys.executable, "-m", "zmr", "checkout", "toy"], cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not pause.exists():
            assert holder.poll() is None and time.monotonic() < deadline, holder.stderr.read() if holder.stderr else ""
            time.sleep(0.05)
        entry = _status(project)
        assert entry["lock_holder"]["pid"] == holder.pid and "checkout toy" in entry["lock_holder"]["command"]
    finally:
        pause.unlink(missing_ok=True)
        holder.wait(timeout=120)
    assert holder.returncode == 0
    assert _status(project)["lock_holder"] is None
