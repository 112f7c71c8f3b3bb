"""zmr bisect: the first upstream commit that breaks a check for the current series, with skips."""

from __future__ import annotations

import json
import math

from conftest import simple_model, zmr
from test_update import grow

CHECK = 'echo "$ZMR_UPSTREAM_COMMIT" >> "$COUNTER"; grep -q "line 10 fixed split" src/model.py || exit 3; [ ! -e BROKEN ] || { echo "BROKEN here"; exit 1; }'


def bisect_json(project, counter, *args: str) -> dict:
    result = zmr("bisect", "toy", "--json", *args, cwd=project.root, env={"COUNTER": str(counter)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bisect_names_the_first_bad_commit_in_log2_checks(project, upstream, tmp_path):
    simple_model(project, upstream)
    made = grow(upstream, 50, special={33: ({"BROKEN": "x\n"}, "Break the release")})
    counter = tmp_path / "runs"
    data = bisect_json(project, counter, "--good", made[0], "--bad", "main", "--test", CHECK)
    assert data["found"] is True and data["first_bad"]["commit"] == made[33] and data["last_good"] == made[32]
    assert data["first_bad_subject"] == "Break the release" and "BROKEN here" in data["first_bad"]["output"]
    assert data["candidates"] == 48 and data["tests"] == len(counter.read_text().split()) <= math.ceil(math.log2(49)) == data["expected"]
    assert made[0] not in counter.read_text() and made[-1] not in counter.read_text()  # good and bad are given, not tested
    # Again: every answer is kept, nothing runs.
    again = bisect_json(project, counter, "--good", made[0], "--bad", "main", "--test", CHECK)
    assert again["tests"] == 0 and again["cached"] == data["tests"] and again["first_bad"]["commit"] == made[33]
    text = zmr("bisect", "toy", "--good", made[0], "--bad", made[-1], "--test", CHECK, cwd=project.root, env={"COUNTER": str(counter)})
    assert text.returncode == 0 and text.stdout.startswith(f"toy/rollout: first bad {made[33]} Break the release\n")


def test_bisect_skips_commits_the_series_does_not_replay_onto_and_exit_125(project, upstream, tmp_path):
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    special = {
        10: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10"),  # the series conflicts from here ...
        12: ({"BROKEN": "x\n"}, "Break the release"),
        14: ({"src/model.py": model_py}, "Revert the rework of line 10"),  # ... to here
        20: ({"SKIPME": "x\n"}, "Untestable from here"),
        22: ({"BROKEN2": "x\n"}, "Break it again"),
        24: ({"SKIPME": None}, "Testable again"),
    }
    made = grow(upstream, 30, special=special)
    counter = tmp_path / "runs"
    data = bisect_json(project, counter, "--good", made[0], "--bad", made[-1], "--test", "[ ! -e SKIPME ] || exit 125; " + CHECK)
    assert data["found"] is False and data["last_good"] == made[9]
    assert data["skipped"] == made[10:14] and data["first_bad"]["commit"] == made[14] and data["first_bad"]["verdict"] == "bad"
    reasons = {t["commit"]: t["reason"] for t in data["tried"]}
    assert all(reasons[c] == "the series does not replay onto it (0001-fixed-split.patch conflicts)" for c in made[10:14])
    assert all(t["tree"] is None for t in data["tried"] if t["commit"] in made[10:14])
    tested = counter.read_text().split()
    assert set(tested).isdisjoint(made[10:14])  # never run where the series does not apply
    text = zmr("bisect", "toy", "--good", made[0], "--bad", made[-1], "--test", "[ ! -e SKIPME ] || exit 125; " + CHECK, cwd=project.root, env={"COUNTER": str(counter)})
    assert "first bad is one of 5 commits" in text.stdout
    # An exit 125 range (20..23) around a break (22): the first bad is one of the skipped commits or the next.
    skip_then_break = "[ ! -e SKIPME ] || exit 125; [ ! -e BROKEN2 ]"
    data = bisect_json(project, counter, "--good", made[15], "--bad", made[-1], "--test", skip_then_break)
    assert data["found"] is False and data["last_good"] == made[19] and data["skipped"] == made[20:24] and data["first_bad"]["commit"] == made[24]
    assert {t["reason"] for t in data["tried"] if t["commit"] in made[20:24]} == {"test: exit 125 (skip)"}
    # Nothing breaks: the given bad is the first bad, untested.
    data = bisect_json(project, counter, "--good", made[15], "--bad", made[-1], "--test", "true")
    assert data["found"] is True and data["first_bad"] == {**data["first_bad"], "commit": made[-1], "reason": "given as --bad (not tested)"}


def test_bisect_refuses_a_bad_commit_that_does_not_descend_from_the_good_one(project, upstream, tmp_path):
    simple_model(project, upstream)
    made = grow(upstream, 4)
    result = zmr("bisect", "toy", "--good", made[3], "--bad", made[1], "--test", "true", cwd=project.root)
    assert result.returncode == 2 and "does not descend from --good" in result.stderr
    assert zmr("bisect", "toy", "--good", made[0], "--bad", made[3], cwd=project.root).returncode == 2  # no check
    assert "needs --good REV and --bad REV" in zmr("bisect", "toy", "--test", "true", cwd=project.root).stderr
