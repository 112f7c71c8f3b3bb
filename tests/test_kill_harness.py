"""Every writing command SIGKILLed at a fault point, then recovered by the next zmr commands (tests/killing.py says what is checked).

The normal suite kills each command at one point, chosen by a seed per
command: the transaction's commit point where the command has one (the
step after which the next command must finish, not undo), and the first
cherry-pick of a move made in a checkout; else one of its points. ``ZMR_KILL_POINTS=N`` tries N seeded points more per command;
``python scripts/kill_harness.py`` tries every point of every command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import killing
from conftest import git

MORE = int(os.environ.get("ZMR_KILL_POINTS", "0"))
# Random instants in the normal suite (#47.10): a few seeds for the writers whose kills git's own work can cut short;
# `python scripts/kill_harness.py --random N` tries N seeds of every writer.
RANDOM = {"update-apply-3way": [1, 2, 3], "rebase-continue": [1, 2], "checkout-merge": [1, 2], "export": [1]}


@pytest.mark.parametrize("scenario", killing.SCENARIOS, ids=[s.name for s in killing.SCENARIOS])
def test_a_command_killed_at_a_fault_point_is_recovered_by_the_next_ones(tmp_path, scenario):
    def pick(points: list[str]) -> list[int]:
        chosen = set(killing.sample(MORE, seed=36)(points) if MORE else [])
        # The first cherry-pick too: a move killed in its checkout (issue #36: the rerun said "a rebase is in progress", exit 0).
        chosen |= {points.index(name) + 1 for name in ("commit-point", "git cherry-pick") if name in points}
        return sorted(chosen) or killing.sample(1, seed=36, always=())(points)

    points, trials = killing.run_scenario(scenario, tmp_path, pick)
    assert points >= 10, points  # the command really passes its fault points (git processes, writes, renames)
    assert trials and all(trial.killed for trial in trials), trials
    for trial in trials:
        if trial.name == "commit-point":
            assert trial.recovered == "finished", trial  # past the commit point: the next command finishes the write and says so


def test_rebase_skip_killed_between_its_cherry_picks_drops_only_the_patch_it_was_asked_to(tmp_path):
    """Found by the harness: --skip killed after its skip, before the next cherry-pick ran; the rerun of --skip dropped that next patch too."""
    scenario = next(s for s in killing.SCENARIOS if s.name == "rebase-skip")

    def before_the_next_pick(points: list[str]) -> list[int]:
        picks = [n for n, name in enumerate(points, start=1) if name == "git cherry-pick"]
        return [picks[1]]  # the first is --skip's `cherry-pick --quit`; at the second the state names the next patch, whose pick has not run

    points, trials = killing.run_scenario(scenario, tmp_path, before_the_next_pick)
    assert [t.name for t in trials] == ["git cherry-pick"] and trials[0].killed


def test_rebase_continue_killed_after_a_clean_cherry_pick_records_no_resolution(tmp_path):
    """Found by the harness at full strength: --continue killed after zmr's own cherry-pick of the next patch went through,
    before it saved that it went on; the rerun took that commit for the engineer's resolution of the patch it had stopped
    on and wrote a file into resolutions/ that the uninterrupted run does not (run_scenario compares every file)."""
    scenario = next(s for s in killing.SCENARIOS if s.name == "rebase-continue")

    def after_a_clean_pick(points: list[str]) -> list[int]:
        picks = [n for n, name in enumerate(points, start=1) if name == "git cherry-pick"]
        return [picks[0] + 1]  # the write of the state that says the pick went through

    points, trials = killing.run_scenario(scenario, tmp_path, after_a_clean_pick)
    assert [t.name for t in trials] == ["atomic-write"] and trials[0].killed


def _killed_at(tmp_path, choose, name="update-apply-3way"):
    """The scenario *name* SIGKILLed at the point *choose* picks from the uninterrupted run's points: its fixture and that run's snapshot."""
    scenario = next(s for s in killing.SCENARIOS if s.name == name)
    fx = scenario.build(tmp_path / "run")
    pristine = tmp_path / "pristine"
    shutil.copytree(fx.base, pristine, symlinks=True)
    log = tmp_path / "points"
    assert killing.run_zmr(fx.args, fx.cwd, fx.env, {"ZMR_TEST_KILL_LOG": str(log)}).returncode == 0
    expected = killing.snapshot(fx)
    point = choose(log.read_text().splitlines())
    shutil.rmtree(fx.base)
    shutil.copytree(pristine, fx.base, symlinks=True)
    killed = killing.run_zmr(fx.args, fx.cwd, fx.env, {"ZMR_TEST_KILL": str(point)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return fx, expected


def _killed_before_its_first_pick(tmp_path):
    """update-apply-3way killed as its first `git cherry-pick` starts: its fixture, the uninterrupted run's snapshot, the pick."""
    # The first pick of a patch: right after the state that names it is saved (an earlier `cherry-pick --quit` readies the checkout).
    fx, expected = _killed_at(
        tmp_path, lambda points: next(n for n in range(2, len(points) + 1) if points[n - 1] == "git cherry-pick" and points[n - 2] == "atomic-rename")
    )
    state = json.loads((fx.cwd / ".git/zmr/rebase/toy/rollout/state.json").read_text())
    return fx, expected, state["old_chain"][state["stopped"]["index"]]


@pytest.mark.parametrize("left", ["staged", "tree", "tree-locked", "committed", "ref-locked"])
def test_update_apply_killed_inside_git_cherry_pick_is_finished_by_the_rerun(tmp_path, left):
    """Issue #47.10: a kill inside git's own cherry-pick (SIGKILL or SIGHUP of the job: git dies too) left zmr's half-written
    pick in the checkout, and the rerun said "the working tree is not clean ... commit or drop those changes" about files the
    user never touched. Here real git leaves what a pick cut short at each of its steps leaves: the pick merged into the index
    and the tree, not committed (CHERRY_PICK_HEAD); the tree written, the index not (SIGHUP: git's handler removes its lock);
    the same with git's index.lock left (SIGKILL); committed, its state not removed yet; merged, killed as it moved the
    branch (the ref's lock left: found by the random kills). The rerun must finish the move."""
    fx, expected, commit = _killed_before_its_first_pick(tmp_path)
    co = fx.cwd / "work/toy/rollout"
    git("cherry-pick", "--no-commit", commit, cwd=co)
    if left == "committed":
        git("commit", "-q", "--no-verify", "-C", commit, cwd=co)
    if left in ("staged", "committed", "ref-locked"):
        git("update-ref", "CHERRY_PICK_HEAD", commit, cwd=co)
    if left == "ref-locked":
        (co / ".git/refs/heads/toy/rollout.lock").write_bytes(b"")
    else:
        git("read-tree", "HEAD", cwd=co)
        if left == "tree-locked":
            (co / ".git/index.lock").write_bytes(b"")
    rerun = killing.run_here(fx.args, fx.cwd, fx.env)
    assert rerun.returncode == 0, rerun.stderr
    assert "not clean" not in rerun.stderr
    if left == "ref-locked":
        assert "undone now: the lock refs/heads/toy/rollout.lock that zmr's killed git left in work/toy/rollout" in rerun.stderr, rerun.stderr
    if left != "committed":
        assert re.search(r"undone now: zmr's interrupted cherry-pick of 0001-\S+ in work/toy/rollout", rerun.stderr), rerun.stderr
    now = killing.snapshot(fx)
    for key in expected:
        if key.startswith("checkout ") and left == "committed":
            assert now[key][0] == expected[key][0] and now[key][1:] == expected[key][1:], key  # the commit: git's committer, not zmr's
            continue
        assert now[key] == expected[key], key
    assert not (co / ".git/index.lock").exists() and not (co / ".git/CHERRY_PICK_HEAD").exists()
    assert not list((co / ".git/refs").rglob("*.lock"))


def test_a_user_edit_left_in_the_checkout_of_an_interrupted_move_is_not_taken_for_zmrs(tmp_path):
    """The other side of #47.10: a file the interrupted pick does not touch, changed in the checkout, is the user's: refused, kept."""
    fx, _, commit = _killed_before_its_first_pick(tmp_path)
    co = fx.cwd / "work/toy/rollout"
    git("cherry-pick", "--no-commit", commit, cwd=co)
    git("read-tree", "HEAD", cwd=co)
    (co / "README.md").write_text("my own edit\n")
    rerun = killing.run_here(fx.args, fx.cwd, fx.env)
    assert rerun.returncode != 0 and "README.md" in rerun.stderr, rerun.stderr
    assert (co / "README.md").read_text() == "my own edit\n"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in killing.SCENARIOS if s.name in RANDOM], ids=lambda s: s.name)
def test_a_writer_killed_at_random_instants_is_recovered_by_the_next_commands(tmp_path, scenario):
    """#47.10: SIGKILL or SIGHUP of the whole process group (zmr and its git) at seeded random instants, not only at fault points."""
    trials = killing.run_random(scenario, tmp_path, RANDOM[scenario.name])
    assert [t.failed for t in trials if t.failed] == []
    assert len(trials) == len(RANDOM[scenario.name])


def _paused_update_apply(tmp_path, point: str) -> tuple[killing.Fixture, dict[str, object], subprocess.Popen[str]]:
    """update-apply-3way run in a process group of its own, held by the pause hook at *point* (`zmr.infra.faults`): its
    fixture, the uninterrupted run's snapshot, and the paused process (stderr piped) for the test to signal."""
    scenario = next(s for s in killing.SCENARIOS if s.name == "update-apply-3way")
    fx = scenario.build(tmp_path / "run")
    pristine = tmp_path / "pristine"
    shutil.copytree(fx.base, pristine, symlinks=True)
    assert killing.run_here(fx.args, fx.cwd, fx.env).returncode == 0
    expected = killing.snapshot(fx)
    shutil.rmtree(fx.base)
    shutil.copytree(pristine, fx.base, symlinks=True)
    marker = tmp_path / "paused"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmr", *fx.args],
        cwd=fx.cwd,
        env=killing.environment(fx.env, {"ZMR_TEST_PAUSE": f"{point}={marker}"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=killing.hang_up_by_default,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, f"zmr ended (exit {proc.returncode}) before {point}: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, f"zmr never reached {point}"
        time.sleep(0.02)
    return fx, expected, proc


@pytest.mark.slow
@pytest.mark.parametrize(("name", "point"), [("SIGHUP", "locked"), ("SIGHUP", "transaction-staged"), ("SIGTERM", "transaction-staged")])
def test_a_hang_up_or_sigterm_handled_in_string_compiled_code_ends_zmr_with_129_or_143(tmp_path, name, point):
    """Issue #47, found by the random kills under load: `zmr update --apply` hung up (SIGHUP to its process group) said
    "zmr: hung up", undid its work, returned 129, and ended killed by SIGINT (-2). The interrupt zmr's handler raised had
    left code compiled from a string (a dataclass made by a lazy import): CPython notes that as an unhandled Ctrl-C, and
    `python -m` ends by SIGINT at exit whatever the status. The pause hook waits in such code, so the signal lands there."""
    fx, expected, proc = _paused_update_apply(tmp_path, point)
    os.killpg(proc.pid, getattr(signal, name))
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == ((129, "zmr: hung up\n") if name == "SIGHUP" else (143, "zmr: terminated\n"))
    _, steps = killing.converge(fx)  # nothing half-done is left: the next commands reach the uninterrupted run's state
    assert killing.snapshot(fx) == expected, steps


@pytest.mark.parametrize("left", [["refs/heads/toy/rollout.lock"], ["index.lock", "refs/heads/toy/rollout.lock"]], ids=["ref", "index-and-ref"])
def test_a_hang_up_that_kills_a_git_in_the_checkout_still_undoes_the_move_and_exits_129(tmp_path, left):
    """Found by the random kills under load (CI, a third test worker): SIGHUP to `zmr update --apply`'s process group
    killed its git in the rebase's checkout, which left its lock files there. zmr's handler undid the move, but the undo's
    own git stopped on those locks: "git update-ref failed ... refs/heads/toy/rollout.lock: File exists", exit 2, the
    move half undone. Ctrl-C in a terminal signals the whole group the same way. The locks of zmr's own killed git
    are removed (and said) before the undo, which then completes: 129, and the next commands reach the uninterrupted
    run's state. Here the pause hook holds zmr inside the move, and the locks are what its killed git leaves."""
    fx, expected, proc = _paused_update_apply(tmp_path, "transaction-staged")
    co = fx.cwd / "work/toy/rollout"
    assert (fx.cwd / ".git/zmr/rebase/toy/rollout/state.json").is_file()  # inside the move: the undo has work to do
    for name in left:
        (co / ".git" / name).write_bytes(b"")
    os.killpg(proc.pid, signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 129, err
    assert err.startswith("zmr: hung up\n"), err
    assert f"undone now: the lock{'s' if len(left) > 1 else ''} {', '.join(sorted(left))} that zmr's killed git left in work/toy/rollout" in err, err
    assert not (fx.cwd / ".git/zmr/rebase/toy/rollout").exists()  # the move undone, all of it
    assert not list((co / ".git").rglob("*.lock"))
    _, steps = killing.converge(fx)
    assert killing.snapshot(fx) == expected, steps


def test_update_apply_killed_in_the_fetch_into_its_checkout_is_finished_by_the_rerun(tmp_path):
    """Issue #47.10, found by random kills of `zmr update --apply` on verl's history: killed while git fetched the old
    commits into the checkout (before any pick), git left `.git/shallow.lock`, and the rerun stopped with "git fetch
    failed ... Unable to create '.../shallow.lock': File exists". zmr's own killed git: the lock is removed, and said."""

    def the_fetch_into_the_checkout(points: list[str]) -> int:
        return max(n for n in range(1, points.index("git cherry-pick") + 1) if points[n - 1] == "git fetch")

    fx, expected = _killed_at(tmp_path, the_fetch_into_the_checkout)
    co = fx.cwd / "work/toy/rollout"
    (co / ".git/shallow.lock").write_bytes(b"")  # what git's fetch, killed there, leaves
    rerun = killing.run_here(fx.args, fx.cwd, fx.env)
    assert rerun.returncode == 0, rerun.stderr
    assert "undone now: the lock shallow.lock that zmr's killed git left in work/toy/rollout" in rerun.stderr, rerun.stderr
    assert killing.snapshot(fx) == expected
    assert not (co / ".git/shallow.lock").exists()


def test_checkout_merge_killed_in_the_fetch_into_its_checkout_is_finished_by_continue(tmp_path):
    """Found by the random kills of the suite under load: `zmr checkout --merge` SIGKILLed while git fetched the series into
    the checkout left `.git/shallow.lock`; the rerun said "a --merge is in progress: --continue", and every --continue
    stopped on "git fetch failed ... Unable to create '.../shallow.lock': File exists" (the advice led round in a circle).
    The refresh a kill cut short left its marker: the locks of its git are zmr's, removed, and said."""

    def the_fetch_into_the_checkout(points: list[str]) -> int:
        return max(n for n in range(1, points.index("git cherry-pick") + 1) if points[n - 1] == "git fetch")

    fx, expected = _killed_at(tmp_path, the_fetch_into_the_checkout, "checkout-merge")
    co = fx.cwd / "work/toy/rollout"
    assert (co / ".git/zmr-refresh").exists()  # killed inside the refresh
    (co / ".git/shallow.lock").write_bytes(b"")  # what git's fetch, killed there, leaves
    again = killing.run_here(fx.args, fx.cwd, fx.env)
    assert again.returncode == 2 and "zmr checkout toy -c rollout --continue" in again.stderr, again.stderr
    rerun = killing.run_here(["checkout", "toy", "-c", "rollout", "--continue"], fx.cwd, fx.env)
    assert rerun.returncode == 0, rerun.stderr
    assert "undone now: the lock shallow.lock that zmr's killed git left in work/toy/rollout" in rerun.stderr, rerun.stderr
    assert killing.snapshot(fx) == expected
    assert not (co / ".git/shallow.lock").exists()
