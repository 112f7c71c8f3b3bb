"""Every command's `--json` output in every mode (success, failure, skips, empty, errors) validates against its schema in
docs/json-schema/, which is generated from the report types (`zmr.infra.reports`). The outputs the schemas inferred from a few
samples rejected are here: export's `old_name` null, bisect's `tree` null, mismatch and smoke with other names and no
provenance, diff's pin of an added component, rebase stopped and aborted; and `update --json` with nothing to update,
which printed text."""

from __future__ import annotations

import json

import pytest

from conftest import git, make_project, simple_model, two_models, zmr
from test_json_contract import COMMANDS, _evidence_test_module, check


def test_export_of_an_added_patch_has_old_name_null(project, upstream):
    simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    co = project.root / "work/toy/rollout"
    (co / "setup.cfg").write_text("[metadata]\nname = toy\n")
    git("add", "setup.cfg", cwd=co)
    git("commit", "-q", "-m", "Pin the toy version", cwd=co)
    data = check("export", zmr("export", "toy", "--json", cwd=project.root))
    patches = data["exports"][0]["patches"]
    assert [(p["status"], p["old_name"]) for p in patches] == [("unchanged", "0001-fixed-split.patch"), ("unchanged", "0002-contiguous.patch"), ("added", None)]
    empty = check("export", zmr("export", "toy", "--dry-run", "--json", cwd=project.root))
    assert empty["exports"][0]["changed"] is False


def test_bisect_with_skips_and_an_untested_bad_has_tree_null(project, upstream, tmp_path):
    from test_update import grow

    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    made = grow(upstream, 8, special={3: ({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")})
    data = check("bisect", zmr("bisect", "toy", "--good", made[0], "--bad", made[-1], "--test", "true", "--json", cwd=project.root))
    assert data["first_bad"]["tree"] is None and any(t["tree"] is None for t in data["tried"]) and data["skipped"]


def test_mismatch_with_other_names_and_no_provenance(tmp_path):
    mismatch = _evidence_test_module("test_mismatch")
    rec = mismatch.rec
    mismatch.write_dump(tmp_path / "r.jsonl", [rec("a", 0, [-0.5, -1.25])])
    mismatch.write_dump(tmp_path / "t.jsonl", [rec("a", 0, [-0.5, -1.25])], provenance={"trees": {"big-trainer": "ab" * 20}})
    data = check("mismatch", zmr("mismatch", str(tmp_path / "r.jsonl"), str(tmp_path / "t.jsonl"), "--json", cwd=tmp_path))
    assert data["rollout"]["provenance"] is None and data["bitwise_equal"] is True
    data = check("mismatch", zmr("mismatch", str(tmp_path / "r.jsonl"), str(tmp_path / "t.jsonl"), "--check", "--json", cwd=tmp_path))
    assert data["verdict"] == "bitwise_equal"


def test_smoke_of_another_model_passing_and_failing(project, upstream):
    two_models(project, upstream)
    manifest = project.root / "manifests" / "other.yaml"
    report = '{"schema_version": 3, "verdict": "mismatch", "bitwise_equal": false, "overall": {"tokens": 4}}'
    tests = [("passes", "true"), ("fails", "exit 3"), ("measures", f"echo '{report}' > \"$ZMR_ARTIFACTS/$ZMR_TEST.mismatch.json\"")]
    manifest.write_text(manifest.read_text() + "    smoke:\n" + "".join(f"      - name: {name}\n        run: {json.dumps(run)}\n" for name, run in tests))
    project.commit_all("smoke tests")
    data = check("smoke", zmr("smoke", "other", "--json", cwd=project.root))
    assert data["ok"] is False and data["counts"]["failed"] == 1 and set(data["artifacts"]) == {"other"}
    assert [t["mismatch"] for t in data["tests"]][2] == [{"file": "trainer.measures.mismatch.json", **json.loads(report)}]


def test_empty_project(tmp_path):
    """A repository without a model: every report is there, with empty lists (`update` printed text here before)."""
    empty = make_project(tmp_path / "empty")
    nothing = check("diff", zmr("diff", "--json", cwd=empty.root), codes=(2,))  # no commit to compare with: an error object
    assert nothing["error"]["message"].startswith("base: HEAD has no commit yet") and nothing["error"]["details"]
    empty.commit_all("nothing yet")
    for command in (["list"], ["validate"], ["status"], ["build", "--all"], ["verify", "--all"], ["fetch", "--all"], ["upstreamed", "--all"], ["diff"]):
        check(command[0], zmr(*command, "--json", cwd=empty.root))
    assert check("update", zmr("update", "--all", "--json", cwd=empty.root))["components"] == []
    assert check("update", zmr("update", "--json", cwd=empty.root))["components"] == []


def test_failed_checks_and_refusals_print_their_report(project, upstream, tmp_path):
    """Exit 1 with the report on stdout: a rebase stopped (then aborted), update --check behind, diff --check changed,
    a publish refused, docs --check stale."""
    project.commit_all("start")
    start = git("rev-parse", "HEAD", cwd=project.root).strip()
    pin = simple_model(project, upstream)
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    new = upstream.commit({"docs/guide.md": "guide v2\n"}, "Update the guide")
    behind = check("update", zmr("update", "toy", "--check", "--json", cwd=project.root), codes=(1,))
    assert behind["components"][0]["status"] == "partial" and behind["components"][0]["blocked_by"]["patch"] == "0001-fixed-split.patch"
    changed = check("diff", zmr("diff", start, "--check", "--json", cwd=project.root), codes=(1,))
    assert changed["components"][0]["status"] == "added" and changed["components"][0]["pin"]["old"] is None
    stopped = check("rebase", zmr("rebase", "toy", "--onto", new, "--json", cwd=project.root), codes=(1,))
    assert stopped["status"] == "stopped" and stopped["files"] == ["src/model.py"]
    assert check("rebase", zmr("rebase", "toy", "--abort", "--json", cwd=project.root))["status"] == "aborted"
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("push", "-q", str(remote), f"{start}:refs/heads/rollout/toy", cwd=project.root)  # a branch zmr did not build
    unbuilt = check("publish", zmr("publish", "toy", "--remote", str(remote), "--dry-run", "--json", cwd=project.root), codes=(1,))
    assert unbuilt["error"]["code"] == 1 and unbuilt["error"]["type"] == "CheckFailed"  # a check failed before any report
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    refused = check("publish", zmr("publish", "toy", "--remote", str(remote), "--dry-run", "--json", cwd=project.root), codes=(1,))
    assert refused["refused"] and refused["branches"][0]["not_built_by_zmr"] and refused["pushed"] is False
    sections = ["support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes"]
    project.write("README.md", "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n" for s in sections))
    stale = check("docs", zmr("docs", "--check", "--json", cwd=project.root), codes=(1,))
    assert stale["up_to_date"] is False and stale["written"] is False


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_usage_errors_are_error_objects(project, command):
    result = zmr(command, "--json", "--no-such-option", cwd=project.root)
    data = check(command, result, codes=(2,))
    assert data["ok"] is False and data["error"]["code"] == 2 and "No such option" in data["error"]["message"]
    assert json.loads(result.stdout) == data
