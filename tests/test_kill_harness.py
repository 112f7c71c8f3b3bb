"""Every writing command SIGKILLed at a fault point, then recovered by the next zmr commands (tests/killing.py says what is checked).

The normal suite kills each command at one point, chosen by a seed per
command: the transaction's commit point where the command has one (the
step after which the next command must finish, not undo), and the first
cherry-pick of a move made in a checkout; else one of its points. ``ZMR_KILL_POINTS=N`` tries N seeded points more per command;
``python scripts/kill_harness.py`` tries every point of every command.
"""

from __future__ import annotations

import os

import pytest

import killing

MORE = int(os.environ.get("ZMR_KILL_POINTS", "0"))


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
