"""zmr update --test/--smoke: the newest commit where a check passes in the built release, by bisection, resumed from kept results."""

from __future__ import annotations

import json
import math

from conftest import git, simple_model, state_dir, zmr
from test_update import grow

# Passes where the release tree holds the series (line 10 patched) and upstream has not broken it; counts each run.
CHECK = 'echo "$ZMR_UPSTREAM_COMMIT" >> "$COUNTER"; grep -q "line 10 fixed split" src/model.py || exit 3; if [ -e BROKEN ]; then echo "broken at $ZMR_UPSTREAM_COMMIT"; exit 1; fi'


def runs(counter) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


def update_check(project, counter, *args: str) -> tuple[int, dict, str]:
    result = zmr("update", "toy", "--json", *args, cwd=project.root, env={"COUNTER": str(counter)})
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)["components"][0], result.stderr


def test_a_failing_test_blocks_the_move_newest_good_is_chosen_in_log2_tests_and_a_rerun_tests_nothing(project, upstream, tmp_path):
    pin = simple_model(project, upstream)
    made = grow(upstream, 60, special={37: ({"BROKEN": "upstream broke it\n"}, "Break the build")})
    line = [upstream.commits[2], *made]
    counter = tmp_path / "runs"
    rc, data, _ = update_check(project, counter, "--test", CHECK)
    assert rc == 0
    check = data["check"]
    # The series replays onto the tip; the test fails there; the newest good is the commit right before the break.
    assert data["status"] == "partial" and data["target"] == made[36] and check["newest_good"] == made[36]
    assert data["steps"] == line.index(made[36]) + 1 and data["blocked_by"] is None
    assert check["first_bad"]["commit"] == made[37] and check["first_bad"]["verdict"] == "bad"
    assert f"broken at {made[37]}" in check["first_bad"]["output"]
    tested = runs(counter)
    # The tip, the pin, then a bisection of 61 positions: log2, not one per commit.
    assert check["tests"] == len(tested) <= 2 + math.ceil(math.log2(len(line)))
    assert tested[:2] == [made[-1], pin] and check["skipped"] == [] and check["cached"] == 0
    assert all(t["verdict"] == ("good" if line.index(t["commit"]) < 37 + 1 else "bad") for t in check["tried"] if t["commit"] != pin)
    # The results are kept under zmr's state (the git directory), not in a file a commit could hold.
    kept = list((state_dir(project.root) / "checks/toy/rollout").glob("*.json"))
    assert len(kept) == 1 and git("status", "--porcelain", cwd=project.root) == ""
    # Re-run: nothing is tested again, the answer is the same.
    rc, again, _ = update_check(project, counter, "--test", CHECK)
    assert runs(counter) == tested
    assert again["check"]["tests"] == 0 and again["check"]["cached"] == len(again["check"]["tried"]) == len(tested)
    assert again["target"] == made[36] and again["check"]["first_bad"]["commit"] == made[37]
    # Another command is another check: tested anew.
    update_check(project, counter, "--test", CHECK + " # v2")
    assert len(runs(counter)) == 2 * len(tested)
    # Text output: newest good, first bad, the check's output.
    text = zmr("update", "toy", "--test", CHECK, cwd=project.root, env={"COUNTER": str(counter)})
    assert f"toy/rollout: first bad {made[37][:12]}: test: exit status 1" in text.stdout and f"broken at {made[37]}" in text.stdout
    assert f"newest good {made[36][:12]} (0 checks run, {len(tested)} reused)" in text.stdout
    # --apply moves the pin to the newest good commit, from the kept results.
    rc, applied, _ = update_check(project, counter, "--test", CHECK, "--apply")
    assert applied["applied"] is True and applied["target"] == made[36] and applied["check"]["tests"] == 0
    assert made[36] in (project.root / "manifests/toy.yaml").read_text()


def test_a_check_that_fails_at_the_pin_moves_nothing_and_skips_are_set_aside(project, upstream, tmp_path):
    pin = simple_model(project, upstream)
    made = grow(upstream, 12)
    counter = tmp_path / "runs"
    rc, data, _ = update_check(project, counter, "--test", "echo \"$ZMR_UPSTREAM_COMMIT\" >> \"$COUNTER\"; exit 4", "--apply")
    assert data["status"] == "blocked" and data["target"] == pin and data["applied"] is False
    assert data["check"]["fails_at_pin"]["commit"] == pin and data["check"]["fails_at_pin"]["reason"] == "test: exit status 4"
    assert runs(counter) == [made[-1], pin]
    assert pin in (project.root / "manifests/toy.yaml").read_text()
    # Exit 125 = skip: the commits in 4..8 cannot be tested; the break is at 6: the first bad is one of 4..8's skipped commits or 9.
    skip = 'n=$(cat NOTE_INDEX 2>/dev/null || echo 0); if [ "$n" -ge 4 ] && [ "$n" -le 8 ]; then exit 125; fi; [ "$n" -lt 6 ]'
    grow_notes = {k: ({"NOTE_INDEX": f"{k}\n"}, f"Note index {k}") for k in range(13)}
    more = grow(upstream, 13, start=100, special={k + 100: v for k, v in grow_notes.items()})
    line = [upstream.commits[2], *made, *more]
    rc, data, _ = update_check(project, counter, "--test", skip)
    check = data["check"]
    assert check["newest_good"] == more[3] and data["target"] == more[3]
    assert check["skipped"] and set(check["skipped"]) <= set(more[4:9])
    assert check["first_bad"] is None or check["first_bad"]["commit"] == more[9]
    assert all(t["verdict"] == "skip" for t in check["tried"] if t["commit"] in more[4:9])
    assert set(check["skipped"]) == {t["commit"] for t in check["tried"] if t["verdict"] == "skip"}  # all between newest good and first bad
    assert len(check["tried"]) < len(line) == 26


def test_smoke_runs_the_components_smoke_tests_and_names_a_missing_one(project, upstream, tmp_path):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    result = zmr("update", "toy", "--smoke", cwd=project.root)
    assert result.returncode == 2 and "--smoke needs smoke tests, and the component declares none" in result.stderr
    assert zmr("update", "toy", "--smoke", "--test", "true", cwd=project.root).returncode == 2
    manifest.write_text(manifest.read_text() + "    smoke:\n      - name: unbroken\n        run: test ! -e BROKEN\n")
    project.commit_all("smoke")
    made = grow(upstream, 10, special={6: ({"BROKEN": "x\n"}, "Break it")})
    rc, data, _ = update_check(project, tmp_path / "runs", "--smoke")
    assert data["check"]["check"]["kind"] == "smoke" and data["target"] == made[5]
    assert data["check"]["first_bad"]["commit"] == made[6] and data["check"]["first_bad"]["reason"] == "unbroken: exit status 1"


def test_a_hang_up_ends_the_check_zmr_started_with_its_process_group(project, upstream, tmp_path):
    """SIGHUP (a closed terminal or ssh session) is handled as SIGTERM is: the running check's process group is ended, exit 129.

    Before, Python's default action ended zmr at once and the check, in a session of its own, ran on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    simple_model(project, upstream)
    grow(upstream, 3)
    pid_file = tmp_path / "check.pid"
    env = {k: v for k, v in os.environ.items() if k != "ZMR_REPO"}
    check = f'echo $$ > "{pid_file}.tmp" && mv "{pid_file}.tmp" "{pid_file}" && exec sleep 300'
    from killing import hang_up_by_default

    proc = subprocess.Popen(
        [sys.executable, "-m", "zmr", "update", "toy", "--test", check],
        cwd=project.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=hang_up_by_default,
    )
    until = time.monotonic() + 240
    while not pid_file.exists() and proc.poll() is None and time.monotonic() < until:
        time.sleep(0.02)
    assert pid_file.exists(), proc.communicate()
    group = int(pid_file.read_text())
    proc.send_signal(signal.SIGHUP)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("zmr still ran 60 s after SIGHUP") from None
    try:
        alive = True
        for _ in range(300):
            os.killpg(group, 0)
            time.sleep(0.1)
    except ProcessLookupError:
        alive = False
    finally:
        if alive:
            os.killpg(group, signal.SIGKILL)
    assert not alive, "the check's process group outlived zmr's hang-up"
    assert proc.returncode == 129 and "zmr: hung up" in err, (proc.returncode, err)


def test_bitwise_refuses_another_components_stale_release_branch(project, upstream):
    """--bitwise compares with the other components' release branches: one that no longer matches its manifest and series is named, not used."""
    from conftest import make_patch

    pin = simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    trainer = make_patch(upstream, pin, {"docs/guide.md": "guide v2\n"}, "Update the guide")
    project.series("toy", "trainer", [("0001-guide.patch", trainer)])
    manifest.write_text(
        manifest.read_text()
        + f"  trainer:\n    upstream: {upstream.path}\n    commit: {pin}\n"
        + 'smoke:\n  - name: bitwise\n    needs: [rollout, trainer]\n    run: test -d "$ZMR_TREE_TRAINER"\n'
    )
    project.commit_all("a trainer and the mismatch check")
    grow(upstream, 3)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    fresh = zmr("update", "toy", "-c", "rollout", "--bitwise", "--json", cwd=project.root)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    # The trainer's series changes (a colleague's pull); its branch is not rebuilt.
    project.series("toy", "trainer", [("0001-guide.patch", trainer.replace(b"+guide v2", b"+guide v3"))])
    project.commit_all("trainer: guide v3")
    stale = zmr("update", "toy", "-c", "rollout", "--bitwise", cwd=project.root)
    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert "a stale release branch of trainer" in stale.stderr and "run `zmr build toy` first" in stale.stderr, stale.stderr
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert zmr("update", "toy", "-c", "rollout", "--bitwise", cwd=project.root).returncode == 0
