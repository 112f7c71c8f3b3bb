"""The JSON contract (docs/reference.md §6.2): every command's `--json` output is one of its report types
(`zmr.cli.reports.command_reports`) in the one envelope (`tool`, `zmr`, `schema_version` first, `zmr.infra.reports.envelope`),
and validates against its committed JSON Schema, docs/json-schema/<command>.json; under `--json` an error is a JSON
object on stdout too (docs/json-schema/error.json).

The schemas are generated from the report types (`scripts/json-schemas`); the committed files must be what it writes,
so a changed report type fails here until they are regenerated (and the reference and, for a key that changes meaning
or goes away, the report's `schema_version` say so). tests/test_json_modes.py runs every command in its other modes.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import zmr as zmr_package
from conftest import REPO_ROOT, git, make_project, simple_model, two_models, zmr

SCHEMAS = REPO_ROOT / "docs" / "json-schema"
ENVELOPE = ["tool", "zmr", "schema_version"]
# Every command with --json but `ci-matrix` (a GitHub Actions matrix: no envelope, §6.2);
# test_every_command_with_a_json_option_is_here asks the CLI which those are.
COMMANDS = {
    "init", "list", "validate", "fetch", "build", "verify", "locate", "new", "mismatch", "docs", "publish", "smoke",
    "checkout", "export", "rebase", "upstreamed", "update", "diff", "import", "status", "bisect", "schema",
}  # fmt: skip
NO_ENVELOPE = {"ci-matrix"}


def check(command: str, result, codes=(0, 1)) -> dict[str, Any]:
    """*result*'s stdout: one JSON object in the envelope that validates against the command's schema (or error.json),
    printed (when the CLI ran in this process) from one of the command's report types."""
    from zmr.cli import render
    from zmr.cli.reports import command_reports

    assert result.returncode in codes, f"zmr {command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    data = json.loads(result.stdout)
    assert list(data)[:3] == ENVELOPE, list(data)
    assert (data["tool"], data["zmr"]) == ("zmr", __import__("zmr.model.source", fromlist=["version"]).version())
    assert isinstance(data["schema_version"], int)
    name = "error" if "error" in data and data.get("ok") is False else command
    if os.environ.get("ZMR_TEST_SUBPROCESS") != "1":
        assert render.JSON_PRINTED and render.JSON_PRINTED[-1] in command_reports()[name], (name, render.JSON_PRINTED)
        assert data["schema_version"] == render.JSON_PRINTED[-1].schema_version
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
    return data


def test_every_command_with_json_in_one_project(tmp_path, project, upstream):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git("init", "-q", "-b", "main", cwd=fresh)
    check("init", zmr("init", "--json", cwd=fresh))

    two_models(project, upstream)
    sections = ["support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes"]
    project.write("README.md", "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n" for s in sections))
    project.commit_all("readme")
    root = project.root
    check("list", zmr("list", "--json", cwd=root))
    check("validate", zmr("validate", "--json", cwd=root))
    check("fetch", zmr("fetch", "--all", "--json", cwd=root))
    check("build", zmr("build", "--all", "--json", cwd=root))
    check("verify", zmr("verify", "--all", "--json", cwd=root))
    check("status", zmr("status", "--json", cwd=root))
    check("diff", zmr("diff", "--json", cwd=root))
    check("update", zmr("update", "--all", "--json", cwd=root))
    check("upstreamed", zmr("upstreamed", "--all", "--json", cwd=root))
    check("checkout", zmr("checkout", "toy", "--json", cwd=root))
    check("export", zmr("export", "toy", "--dry-run", "--json", cwd=root))
    check("checkout", zmr("checkout", "toy", "--merge", "--json", cwd=root))
    check("docs", zmr("docs", "--check", "--json", cwd=root))
    check("new", zmr("new", "fresh", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", "--json", cwd=root))
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    check("publish", zmr("publish", "toy", "--remote", str(remote), "--json", cwd=root))
    second = make_project(tmp_path / "second")
    check("import", zmr("import", "rollout/toy", "--remote", str(root), "--json", cwd=second.root))
    check("rebase", zmr("rebase", "toy", "--onto", upstream.commits[-1], "--json", cwd=root))


def test_smoke_with_json(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests" / "toy.yaml"
    manifest.write_text(manifest.read_text() + "    smoke:\n      - name: ok\n        run: grep -q 'fixed split' src/model.py\n")
    project.commit_all("a smoke test")
    data = check("smoke", zmr("smoke", "toy", "--json", cwd=project.root))
    assert data["ok"] is True


def test_every_command_with_a_json_option_is_here():
    """A new command with --json, or --json added to one, must join COMMANDS (and get its schema) to pass."""
    with_json = _json_commands()
    assert with_json - NO_ENVELOPE == COMMANDS, f"not in COMMANDS: {sorted(with_json - NO_ENVELOPE - COMMANDS)}; without --json: {sorted(COMMANDS - with_json)}"
    assert NO_ENVELOPE <= with_json


def test_bisect_and_schema_with_json(project, upstream, tmp_path):
    from test_update import grow

    simple_model(project, upstream)
    made = grow(upstream, 6, special={4: ({"BROKEN": "x\n"}, "Break the release")})
    data = check("bisect", zmr("bisect", "toy", "--good", made[0], "--bad", made[-1], "--test", "[ ! -e BROKEN ]", "--json", cwd=project.root))
    assert data["found"] is True and data["first_bad"]["commit"] == made[4]
    for name in ("manifest", "settings"):
        data = check("schema", zmr("schema", name, "--json", cwd=project.root))
        assert data["name"] == name and data["schema"] == json.loads((REPO_ROOT / "schemas" / f"{name}.schema.json").read_text())
        assert data["url"].endswith(f"/schemas/{name}.schema.json")
    assert "give one of manifest, settings" in check("schema", zmr("schema", "case", "--json", cwd=project.root), codes=(2,))["error"]["message"]


def _evidence_test_module(name: str) -> Any:
    """A module of tests/evidence/ (its fixtures' writers), loaded by path: that folder is on sys.path only when pytest collected it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"evidence_{name}", REPO_ROOT / "tests" / "evidence" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mismatch_and_locate_with_json(tmp_path):
    write_pair = _evidence_test_module("test_locate").write_pair
    _pair = _evidence_test_module("test_mismatch")._pair

    check("mismatch", zmr("mismatch", *map(str, _pair(tmp_path, differ=True)), "--json", cwd=tmp_path))
    rollout, trainer = write_pair(tmp_path / "locate")
    check("locate", zmr("locate", str(rollout), str(trainer), "--json", cwd=tmp_path))


def test_errors_under_json_are_json_on_stdout_and_text_on_stderr(project, upstream):
    simple_model(project, upstream)
    project.write("manifests/bad.yaml", "model: bad\ncomponents:\n  rollout:\n    upstream: nowhere\n    comit: 123\n")
    result = zmr("build", "bad", "--json", cwd=project.root)
    data = check("build", result, codes=(2,))
    assert data["ok"] is False and data["error"]["code"] == 2
    assert data["error"]["file"] == "manifests/bad.yaml" and isinstance(data["error"]["line"], int)
    assert result.stderr.startswith("zmr: error: ")
    usage = zmr("list", "--json", "--no-such-option", cwd=project.root)
    assert check("list", usage, codes=(2,))["error"]["message"].startswith("No such option")
    assert "No such option" in usage.stderr
    outside = zmr("list", "--json", cwd=project.root.parent)
    assert "not inside a zmr repository" in check("list", outside, codes=(2,))["error"]["message"]
    # Without --json, stdout stays empty.
    assert zmr("list", "--no-such-option", cwd=project.root).stdout == ""


def test_a_failed_check_after_the_report_prints_one_object(project, upstream):
    simple_model(project, upstream)
    result = zmr("verify", "--all", "--json", cwd=project.root)  # nothing built: drift, exit 1
    assert result.returncode == 1
    data = check("verify", result)  # json.loads would refuse a second object
    assert data["ok"] is False


def _json_commands() -> set[str]:
    import typer.main

    from zmr.cli import app

    commands = getattr(typer.main.get_command(app), "commands", {})
    assert "help" in commands and len(commands) > len(COMMANDS)  # the CLI was read
    return {name for name, command in commands.items() if any("--json" in getattr(param, "opts", ()) for param in command.params)}


def test_every_command_prints_reports_that_keep_the_protocol():
    """Each command with --json (the CLI asked) names its report types, and each is a `zmr.infra.reports.Report` whose
    failed/reason/details/to_json have the protocol's types, with a TypedDict (the schema's source) from to_json."""
    import typing

    from zmr.cli.reports import command_reports
    from zmr.infra.reports import Report, report_type

    reports = command_reports()
    assert _json_commands() - NO_ENVELOPE == set(reports) - {"error"}
    for name, types in reports.items():
        for report in types:
            assert issubclass(report, Report) and report.to_json is not Report.to_json, (name, report)
            assert typing.is_typeddict(report_type(report)), (name, report)
            assert isinstance(report.schema_version, int) and report.schema_version >= 1
            for method, returns in (("failed", bool), ("reason", str), ("details", list[str])):
                assert typing.get_type_hints(getattr(report, method))["return"] == returns, (report, method)
    # A check's reason is '' while it has not failed, and a line once it has: the ones each CLI module raises with.
    from zmr.infra.reports import ErrorReport

    error = ErrorReport("no such model 'x'", 2, "ZmrError", ["zmr list"])
    assert error.failed() and error.reason() == "no such model 'x'" and error.details() == ["zmr list"]
    assert Report().failed() is False and Report().reason() == "" and Report().details() == []


def test_the_committed_schemas_are_generated_from_the_report_types(monkeypatch):
    """docs/json-schema/ is what scripts/json-schemas writes; a report type changed without it fails here (and
    `scripts/json-schemas --check` exits 1)."""
    import subprocess
    import sys
    from typing import TypedDict

    import importlib

    from zmr.cli.reports import schemas, stale

    build = importlib.import_module("zmr.ops.build")  # (`zmr` here is conftest's runner)

    assert stale(REPO_ROOT) == [], "run scripts/json-schemas and commit docs/json-schema/"
    for name, schema in schemas().items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"].endswith(f"/{name}.json")
    script = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "json-schemas"), "--check"], capture_output=True, text=True)
    assert script.returncode == 0, script.stderr

    class BuildJson(TypedDict):  # a key added to `zmr build --json`'s type
        branches: list[str]
        pushed: bool

    monkeypatch.setattr(build, "BuildJson", BuildJson)
    assert stale(REPO_ROOT) == ["build.json"]
    assert "pushed" in schemas()["build"]["required"]


def test_the_schemas_say_what_the_types_say():
    """Optional is null allowed, dict[str, X] any keys, Literal an enum, a nested TypedDict a $defs entry, no other key."""
    from zmr.cli.reports import schemas

    made = schemas()
    patch = made["export"]["$defs"]["PlannedPatchJson"]
    assert patch["properties"]["old_name"] == {"type": ["string", "null"]} and patch["additionalProperties"] is False
    assert made["bisect"]["$defs"]["TriedJson"]["properties"]["tree"] == {"type": ["string", "null"]}
    dump = made["mismatch"]["$defs"]["DumpInfoJson"]["properties"]
    assert dump["trees"] == {"type": "object", "additionalProperties": {"type": "string"}} and dump["provenance"]["anyOf"][1] == {"type": "null"}
    assert made["smoke"]["properties"]["artifacts"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert made["mismatch"]["properties"]["verdict"] == {"enum": ["bitwise_equal", "mismatch"]}
    assert made["mismatch"]["properties"]["schema_version"]["const"] == 3 and made["build"]["properties"]["schema_version"]["const"] == 1
    assert [shape["properties"]["status"] for shape in made["rebase"]["oneOf"]] == [{"const": "done"}, {"const": "stopped"}, {"const": "aborted"}]
    assert made["error"]["properties"]["error"]["$ref"] == "#/$defs/ErrorDetailJson"
    assert made["error"]["$defs"]["ErrorDetailJson"]["required"] == ["message", "code", "type", "details"]  # file, line, problems: with problems


def test_every_command_with_json_is_checked_by_a_test_here():
    """Each of COMMANDS is the first argument of a `check(...)` call in this file, and each has a schema. Read from the
    source, not gathered while the tests run: a parallel run (pytest -n) spreads this file's tests over processes."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    called = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check" and node.args and isinstance(node.args[0], ast.Constant)
    }
    assert COMMANDS - called == set(), f"commands whose --json output no test here validates: {sorted(COMMANDS - called)}"
    assert sorted(p.stem for p in SCHEMAS.glob("*.json")) == sorted(COMMANDS | {"error"})
