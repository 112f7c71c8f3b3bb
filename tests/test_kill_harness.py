

def test_rebase_skip_killed_between_its_cherry_picks_drops_only_the_patch_it_was_asked_to(tmp_path):
    """Found by the harness: --skip killed after its skip, before the next cherry-pick ran; the rerun of --skip dropped that next patch too."""
    scenario = next(s for s in killing.SCENARIOS if s.name == "rebase-skip")

    def before_the_next_pick(points: list[str]) -> list[int]:
        return [points.index("git cherry-pick") + 1]  # the state names the next patch, its pick has not run

    points, trials = killing.run_scenario(scenario, tmp_path, before_the_next_pick)
    assert [t.name for t in trials] == ["git cherry-pick"] and trials[0].killed
