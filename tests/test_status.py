"""`zmr status`: per component its pin, release branch (missing, current, stale), checkout and the work not exported,
rebase in progress, and who holds its lock: read from real repositories, checkouts and a zmr process holding the lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from conftest import git, simple_model, team_clones, zmr


def _status(project) -> dict:
    """The one component's entry of `zmr status --json` in *project* (a Project, or a clone's folder)."""
    result = zmr("status", "--json", cwd=project if isinstance(project, Path) else project.root)
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


# -- issue #47: what status did not say ------------------------------------------------------------------------------


def _colleague_changes_0002(theirs, text: str = "    return (a @ b).contiguous()  # theirs\n") -> None:
    """In their clone: check out, reword 0002's change, export, commit, push."""
    assert zmr("checkout", "toy", cwd=theirs).returncode == 0
    work = theirs / "work/toy/rollout"
    (work / "src/kernels/matmul.py").write_text("def matmul(a, b):\n" + text)
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=work)
    assert zmr("export", "toy", cwd=theirs).returncode == 0
    git("commit", "-q", "-am", "colleague: 0002 says theirs", cwd=theirs)
    git("push", "-q", "origin", "main", cwd=theirs)


def test_a_checkout_made_stale_by_a_pull_is_behind_the_series_not_my_work(tmp_path, upstream):
    """A colleague's change to 0002, pulled, showed as my own "modified 0002"; status tells it from my edits."""
    mine, theirs = team_clones(tmp_path, upstream)
    assert zmr("checkout", "toy", cwd=mine).returncode == 0
    _colleague_changes_0002(theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    entry = _status(mine)
    assert entry["checkout_state"] == "behind" and entry["not_exported"] == [], entry
    assert entry["series_changed"] == ["0002-contiguous.patch"], entry
    text = zmr("status", cwd=mine).stdout
    assert "behind the series" in text and "0002-contiguous.patch" in text and "zmr checkout toy -c rollout" in text, text
    assert "not exported" not in text, text
    # My own commit on top as well: both sides moved, and status names the merge.
    work = mine / "work/toy/rollout"
    (work / "NOTES").write_text("mine\n")
    git("add", "NOTES", cwd=work)
    git("commit", "-q", "-m", "My notes", cwd=work)
    entry = _status(mine)
    assert entry["checkout_state"] == "diverged" and entry["series_changed"] == ["0002-contiguous.patch"], entry
    assert "zmr checkout toy -c rollout --merge" in zmr("status", cwd=mine).stdout
    # Following the advice: merged, exported, nothing left behind; status is clean again.
    assert zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=mine).returncode == 0
    assert zmr("export", "toy", cwd=mine).returncode == 0
    assert "# theirs" in (mine / "patches/toy/rollout/0002-contiguous.patch").read_text()
    entry = _status(mine)
    assert entry["checkout_state"] == "current" and entry["series_changed"] == [] and entry["not_exported"] == [], entry


def test_my_own_edit_is_work_not_exported_and_not_behind(tmp_path, upstream):
    mine, _ = team_clones(tmp_path, upstream)
    assert zmr("checkout", "toy", cwd=mine).returncode == 0
    work = mine / "work/toy/rollout"
    (work / "src/kernels/matmul.py").write_text("def matmul(a, b):\n    return (a @ b).contiguous()  # mine\n")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=work)
    entry = _status(mine)
    assert entry["checkout_state"] == "work" and entry["series_changed"] == [] and entry["not_exported"], entry


def test_a_patch_file_in_conflict_after_a_pull_is_named(tmp_path, upstream):
    mine, theirs = team_clones(tmp_path, upstream)
    _colleague_changes_0002(theirs)
    patch = mine / "patches/toy/rollout/0002-contiguous.patch"
    patch.write_text(patch.read_text().replace("+    return (a @ b).contiguous()\n", "+    return (a @ b).contiguous()  # mine\n"))
    git("commit", "-q", "-am", "mine: 0002 says mine", cwd=mine)
    git("pull", "-q", "--no-rebase", cwd=mine, check=False)
    assert "patches/toy/rollout/0002-contiguous.patch" in git("ls-files", "-u", cwd=mine)
    entry = _status(mine)
    assert entry["unmerged"] == ["patches/toy/rollout/0002-contiguous.patch"], entry
    text = zmr("status", cwd=mine)
    assert text.returncode == 0
    conflicted = "patches/toy/rollout/0002-contiguous.patch"
    assert f"{conflicted}: in conflict" in text.stdout and f"`git add {conflicted}`" in text.stdout, text.stdout
    # The advice, literally: their side taken, added, the merge finished; the series is theirs and builds.
    for command in (f"git checkout --theirs -- {conflicted}", f"git add {conflicted}", "git commit"):
        assert f"`{command}`" in text.stdout, (command, text.stdout)
        git(*command.split()[1:], *(["--no-edit"] if command == "git commit" else []), cwd=mine)
    assert _status(mine)["unmerged"] == [] and "# theirs" in (mine / conflicted).read_text()
    assert zmr("build", "toy", cwd=mine).returncode == 0


def test_a_stopped_rebase_names_its_target_and_an_interrupted_update_apply_is_named(project, upstream):
    pin = simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    model_py = upstream.file_at(upstream.commits[-1], "src/model.py")
    target = upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Upstream changes line 10")
    stopped = zmr("rebase", "toy", "--onto", "main", cwd=project.root)
    assert stopped.returncode == 1, stopped.stderr
    entry = _status(project)
    assert entry["rebase"] == {"onto": target, "from": pin, "stopped_at": "0001-fixed-split.patch", "files": ["src/model.py"], "interrupted": False}, entry
    assert entry["not_exported"] == [], entry  # not "commits on the old pin": the rebase's own
    text = zmr("status", cwd=project.root).stdout
    assert "old pin" not in text, text
    assert f"onto {target[:12]} stopped at 0001-fixed-split.patch" in text and "zmr rebase toy -c rollout --continue" in text, text
    assert zmr("rebase", "toy", "--abort", cwd=project.root).returncode == 0
    assert _status(project)["rebase"] is None


def test_an_update_apply_cut_short_is_named_with_the_command_that_finishes_it(project, upstream, tmp_path):
    """A kill of `update --apply` leaves a rebase and a checkout that the next `update --apply` finishes: status says so
    (it said nothing, or "commits on the old pin"), and following it finishes the move."""
    project.write(".gitignore", "/work/\n")
    pin = simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    target = upstream.commit({"docs/notes.md": "notes\n"}, "Add notes")
    log = tmp_path / "points"
    counted = zmr("update", "toy", "--apply", cwd=project.root, env={**os.environ, "ZMR_TEST_KILL_LOG": str(log)})
    assert counted.returncode == 0, counted.stderr
    points = log.read_text().splitlines()
    git("reset", "-q", "--hard", "HEAD", cwd=project.root)
    assert zmr("checkout", "toy", "--force", cwd=project.root).returncode == 0
    assert upstream.commits[1] in (project.root / "manifests/toy.yaml").read_text()
    # Killed as the move begins to write its result (the series and manifest in one transaction): its state is there.
    killed = zmr("update", "toy", "--apply", cwd=project.root, env={**os.environ, "ZMR_TEST_KILL": str(points.index("journal") + 1)})
    assert killed.returncode == -9, killed.stderr
    entry = _status(project)
    assert entry["rebase"] == {"onto": target, "from": pin, "stopped_at": None, "files": [], "interrupted": True}, entry
    text = zmr("status", cwd=project.root).stdout
    assert "old pin" not in text and "interrupted" in text, text
    finish = re.search(r"`(zmr update toy -c rollout --apply)` finishes it", text)
    assert finish, text
    done = zmr(*finish.group(1).split()[1:], cwd=project.root)
    assert done.returncode == 0, done.stderr
    assert _status(project)["rebase"] is None and target in (project.root / "manifests/toy.yaml").read_text()


def test_the_advice_for_a_checkout_behind_the_series_followed_as_written_makes_it_current(tmp_path, upstream):
    mine, theirs = team_clones(tmp_path, upstream)
    assert zmr("checkout", "toy", cwd=mine).returncode == 0
    _colleague_changes_0002(theirs)
    git("pull", "-q", "--ff-only", cwd=mine)
    text = zmr("status", cwd=mine).stdout
    [refresh] = [c for c in re.findall(r"`([^`]+)`", text) if c.startswith("zmr checkout")]
    assert refresh == "zmr checkout toy -c rollout", text
    assert zmr(*refresh.split()[1:], cwd=mine).returncode == 0
    entry = _status(mine)
    assert entry["checkout_state"] == "current" and entry["series_changed"] == [], entry
    assert "# theirs" in (mine / "work/toy/rollout/src/kernels/matmul.py").read_text()
