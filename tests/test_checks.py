"""zmr.ops.checks on its own: the search over a first-parent line, what names a check, the kept results, one check run.

The commands that use it (``zmr update --test``, ``zmr bisect``) are tested end to end in test_update_check.py and
test_bisect.py; here each piece is held to its contract where the commands cannot reach its edges (a result file that is
not zmr's, a position every check skips, an exit 125, an output longer than what is kept).
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import git
from zmr.ops import checks
from zmr.ops.checks import BAD, GOOD, SKIP, Check, CheckError, Command, Results, Tried, bisect_line, command_check, expected_checks, run_check, smoke_check
from zmr.model.manifest import Component, SmokeTest
from zmr.model.project import Project
from zmr.infra.state import CHECKS, StateMalformed


# -- bisect_line ----------------------------------------------------------------------------------


def _search(lo: int, hi: int, first_bad: int, skips: set[int] = frozenset(), skipped: tuple[int, ...] = ()) -> tuple[checks.LineSearch, list[int]]:
    asked: list[int] = []

    def verdict(i: int) -> str:
        assert lo < i < hi, f"position {i} outside ({lo}, {hi}) was checked"
        assert i not in asked, f"position {i} was checked twice"
        asked.append(i)
        return SKIP if i in skips else (BAD if i >= first_bad else GOOD)

    return bisect_line(lo, hi, verdict, skipped), asked


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 100])
def test_the_search_finds_the_first_bad_position_in_log2_checks(n):
    for first_bad in range(1, n + 2):
        found, asked = _search(0, n + 1, first_bad)
        assert (found.lo, found.hi, found.skipped) == (first_bad - 1, first_bad, [])
        assert len(asked) <= expected_checks(n), (n, first_bad, asked)


def test_expected_checks_is_the_ceiling_of_log2_of_the_positions_plus_one():
    assert [expected_checks(n) for n in (0, 1, 2, 3, 4, 7, 8)] == [0, 1, 2, 2, 3, 3, 4]
    assert expected_checks(-3) == 0
    assert expected_checks(1000) == math.ceil(math.log2(1001))


def test_neighbours_need_no_check():
    found, asked = _search(4, 5, first_bad=5)
    assert (found.lo, found.hi, found.skipped, asked) == (4, 5, [], [])


def test_a_skipped_position_is_set_aside_and_reported_when_the_first_bad_may_be_it():
    found, asked = _search(0, 10, first_bad=6, skips={5})
    assert (found.lo, found.hi) == (4, 6)
    assert found.skipped == [5]  # the first bad is 5 or 6: the search cannot tell
    assert 5 in asked


def test_skips_outside_the_final_range_are_not_reported():
    found, _ = _search(0, 10, first_bad=8, skips={2, 5})
    assert (found.lo, found.hi, found.skipped) == (7, 8, [])


def test_every_position_skipped_leaves_the_whole_range_between_the_ends():
    found, asked = _search(0, 6, first_bad=6, skips={1, 2, 3, 4, 5})
    assert (found.lo, found.hi, found.skipped) == (0, 6, [1, 2, 3, 4, 5])
    assert sorted(asked) == [1, 2, 3, 4, 5]


def test_positions_known_to_skip_are_never_checked_again():
    found, asked = _search(0, 8, first_bad=5, skipped=(3, 4))
    assert 3 not in asked and 4 not in asked
    assert (found.lo, found.hi, found.skipped) == (2, 5, [3, 4])


def test_the_position_nearest_the_middle_is_tried_first_the_lower_one_on_a_tie():
    _, asked = _search(0, 10, first_bad=10)
    assert asked[0] == 5
    _, asked = _search(0, 10, first_bad=10, skipped=(5,))
    assert asked[0] == 4  # 4 and 6 are as near to 5: the lower one


# -- what a check is -------------------------------------------------------------------------------


def test_an_empty_test_command_is_refused_with_an_example():
    for blank in ("", "   ", "\n"):
        with pytest.raises(CheckError) as err:
            command_check(blank)
        assert "--test needs a command" in err.value.message
        assert any("--test '" in d for d in err.value.details)


def test_the_key_names_the_commands_and_their_environment_not_the_timeouts():
    base = Check("test", (Command("test", "make check"),))
    assert base.key == command_check("make check").key
    assert len(base.key) == 20 and int(base.key, 16) >= 0
    assert Check("test", (Command("test", "make check", timeout=5.0),)).key == base.key
    others = [
        Check("test", (Command("test", "make check2"),)),
        Check("smoke", (Command("test", "make check"),)),
        Check("test", (Command("test", "make check", env=(("A", "1"),)),)),
        Check("test", (Command("test", "make check", trees=(("trainer", "0" * 40),)),)),
        Check("test", (Command("test", "make check", in_root=True),)),
        Check("test", (Command("other", "make check"),)),
    ]
    assert len({base.key, *(c.key for c in others)}) == len(others) + 1


def test_labels_name_the_command_or_the_smoke_tests():
    assert command_check("pytest -x").label == "--test pytest -x"
    assert Check("smoke", (Command("unit", "a"), Command("lint", "b"))).label == "--smoke (unit, lint)"
    assert Check("bitwise", (Command("bitwise-logprobs", "x", in_root=True),)).label == "--bitwise (bitwise-logprobs)"


def _component(**kw) -> Component:
    return Component(model="toy", key="rollout", upstream="../up", commit="0" * 40, branch="rollout/toy", **kw)


def test_smoke_needs_declared_smoke_tests_and_says_where_to_declare_them():
    with pytest.raises(CheckError) as err:
        smoke_check(_component())
    assert "--smoke needs smoke tests" in err.value.message
    assert any("manifests/toy.yaml" in d for d in err.value.details)


def test_smoke_runs_each_declared_test_with_its_timeout_and_environment():
    tests = (SmokeTest("unit", "pytest", timeout=30, env=(("X", "1"),)), SmokeTest("lint", "ruff check"))
    check = smoke_check(_component(smoke=tests))
    assert check.kind == "smoke"
    assert [(c.name, c.run, c.timeout, c.env, c.in_root) for c in check.commands] == [
        ("unit", "pytest", 30.0, (("X", "1"),), False),
        ("lint", "ruff check", float(tests[1].timeout), (), False),
    ]


# -- the kept results ------------------------------------------------------------------------------


@pytest.fixture
def zproject(tmp_path) -> Project:
    root = tmp_path / "project"
    (root / "manifests").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    return Project.find(root)


TREE = "a" * 40


def test_a_result_is_written_at_once_and_read_back_as_cached(zproject):
    check = command_check("true")
    results = Results(zproject, _component(), check)
    assert results.get("c1", TREE) is None
    results.put(Tried("c1", BAD, "test: exit status 1", TREE, "boom"))
    assert results.path == zproject.state_dir / "checks/toy/rollout" / f"{check.key}.json"
    again = Results(zproject, _component(), check).get("c1", TREE)
    assert again == Tried("c1", BAD, "test: exit status 1", TREE, "boom", cached=True)
    assert Results(zproject, _component(), check).get("c1", "b" * 40) is None  # another tree: tested again
    assert Results(zproject, _component(), command_check("false")).get("c1", TREE) is None  # another check
    body = json.loads(results.path.read_text())
    assert body["version"] == CHECKS.version and body["check"] == check.to_json()


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"version": 99, "results": {f"c1:{TREE}": {"verdict": "good"}}}),
        json.dumps({"version": 1, "results": {f"c1:{TREE}": {"verdict": "great"}}}),
        json.dumps({"version": 1, "results": {f"c1:{TREE}": "good"}}),
    ],
)
def test_results_of_another_zmr_or_an_entry_zmr_did_not_write_are_read_as_no_result(zproject, text):
    """Another version's file is tested again; an entry that is not a verdict zmr writes is no result."""
    check = command_check("true")
    results = Results(zproject, _component(), check)
    results.path.parent.mkdir(parents=True)
    results.path.write_text(text)
    assert Results(zproject, _component(), check).get("c1", TREE) is None


@pytest.mark.parametrize("text", ["not json {", "[1, 2]", json.dumps({"version": 1, "results": [1]})])
def test_a_results_file_zmr_did_not_write_is_refused_naming_it(zproject, text):
    """A damaged file is refused with the state files' one message, naming it and what to do (#49)."""
    check = command_check("true")
    results = Results(zproject, _component(), check)
    results.path.parent.mkdir(parents=True)
    results.path.write_text(text)
    with pytest.raises(StateMalformed) as refused:
        Results(zproject, _component(), check)
    assert str(results.path) in str(refused.value) and "check results" in str(refused.value)


def test_where_the_series_replayed_is_kept_and_a_tree_that_is_no_object_id_is_not_trusted(zproject):
    check = command_check("true")
    results = Results(zproject, _component(), check)
    assert results.replayed("c1", "s1") is None
    results.keep_replay("c1", "s1", TREE)
    results.keep_replay("c2", "s1", None, "0001-x.patch does not apply")
    fresh = Results(zproject, _component(), check)
    assert fresh.replayed("c1", "s1") == (TREE, "")
    assert fresh.replayed("c2", "s1") == (None, "0001-x.patch does not apply")
    assert fresh.replayed("c1", "s2") is None  # another series
    assert fresh.get("c1", "replay") is None  # a replay entry is no verdict
    body = json.loads(results.path.read_text())
    body["results"]["c1:replay:s1"]["tree"] = "../../etc"
    results.path.write_text(json.dumps(body))
    assert Results(zproject, _component(), check).replayed("c1", "s1") is None


# -- one check run ---------------------------------------------------------------------------------


@pytest.fixture
def release(zproject) -> str:
    (zproject.root / "src").mkdir()
    (zproject.root / "src/model.py").write_text("x = 1\n")
    git("add", "-A", cwd=zproject.root)
    git("commit", "-q", "-m", "release", cwd=zproject.root)
    return git("rev-parse", "HEAD", cwd=zproject.root)


def _run(zproject, release, command: str, **kw):
    return run_check(zproject, _component(), Check("test", (Command("test", command, **kw),)), zproject.repo, "u" * 40, release)


def test_a_check_runs_in_the_release_tree_with_zmr_variables_and_no_git_variables(zproject, release, monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/nowhere")
    script = 'cat src/model.py; echo "$ZMR_MODEL $ZMR_COMPONENT $ZMR_UPSTREAM_COMMIT $ZMR_COMMIT ${GIT_DIR-unset}"; test "$ZMR_TREE" = "$PWD"'
    verdict, reason, output = _run(zproject, release, script)
    assert (verdict, reason) == (GOOD, "exit 0"), output
    assert output == f"x = 1\ntoy rollout {'u' * 40} {release} unset\n"
    assert git("status", "--porcelain", cwd=zproject.root) == ""  # the project's work tree is not the check's


def test_exit_125_is_skip_and_any_other_failure_is_bad_with_the_reason(zproject, release):
    assert _run(zproject, release, "exit 125")[:2] == (SKIP, "test: exit 125 (skip)")
    verdict, reason, output = _run(zproject, release, "echo no; exit 3")
    assert (verdict, reason) == (BAD, "test: exit status 3")
    assert output.startswith("no\n") and "zmr: failed: exit status 3" in output
    verdict, reason, _ = _run(zproject, release, "sleep 30", timeout=0.3)
    assert verdict == BAD and "timed out after 0.3 s" in reason


def test_only_the_end_of_a_long_output_is_kept(zproject, release):
    _, _, output = _run(zproject, release, "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done")
    assert len(output) == checks.OUTPUT_LIMIT
    assert output.endswith("line-1999\n") and "line-0\n" not in output


def test_the_first_failing_command_stops_the_check_and_each_output_is_headed(zproject, release):
    check = Check("smoke", (Command("one", "echo first"), Command("two", "exit 1"), Command("three", "touch ran")))
    verdict, reason, output = run_check(zproject, _component(), check, zproject.repo, "u" * 40, release)
    assert (verdict, reason) == (BAD, "two: exit status 1")
    assert output.startswith("$ echo first\nfirst\n$ exit 1\n")
    assert not (zproject.root / "ran").exists()


def test_a_release_whose_tree_cannot_be_written_is_skip(zproject, release):
    verdict, reason, _ = run_check(zproject, _component(), command_check("true"), zproject.repo, "u" * 40, "f" * 40)
    assert verdict == SKIP and reason.startswith("the tree could not be written")
