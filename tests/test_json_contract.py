"""The JSON contract (docs/reference.md §6.2): every command's `--json` output starts with `tool`, `zmr` and
`schema_version`, and validates against its committed JSON Schema, docs/json-schema/<command>.json; under `--json` an
error is a JSON object on stdout too (docs/json-schema/error.json).

The schemas were first written from these outputs (`ZMR_WRITE_JSON_SCHEMAS=1 pytest tests/test_json_contract.py`
merges each output into its command's schema); after that a change of a key or of a type fails here until the schema,
the reference and, for a key that changes meaning or goes away, the command's `schema_version` say so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import zmr as zmr_package
from conftest import REPO_ROOT, git, make_project, simple_model, two_models, zmr

SCHEMAS = REPO_ROOT / "docs" / "json-schema"
WRITE = os.environ.get("ZMR_WRITE_JSON_SCHEMAS") == "1"
ENVELOPE = ["tool", "zmr", "schema_version"]
# Every command with --json but `ci-matrix` (a GitHub Actions matrix: no envelope, §6.2);
# test_every_command_with_a_json_option_is_here asks the CLI which those are.
COMMANDS = {
    "init", "list", "validate", "fetch", "build", "verify", "locate", "new", "mismatch", "docs", "publish", "smoke",
    "checkout", "export", "rebase", "upstreamed", "update", "diff", "import", "status", "bisect", "schema",
}  # fmt: skip
NO_ENVELOPE = {"ci-matrix"}
SEEN: set[str] = set()


def _infer(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"type": "object", "required": list(value), "properties": {k: _infer(v) for k, v in value.items()}}
    if isinstance(value, list):
        schema: dict[str, Any] = {"type": "array"}
        for item in value:
            schema["items"] = _merge(schema["items"], _infer(item)) if "items" in schema else _infer(item)
        return schema
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}[type(value)]
    return {"type": kind}


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One schema that both samples' schemas accept: the union of types, properties merged, the common keys required."""
    if not a or not b:  # either may be anything: so may both
        return {}
    kinds = sorted(set(_types(a)) | set(_types(b)))
    if "number" in kinds and "integer" in kinds:
        kinds.remove("integer")
    merged: dict[str, Any] = {"type": kinds[0] if len(kinds) == 1 else kinds} if kinds else {}
    for key in ("const", "description"):
        if key in a and a.get(key) == b.get(key, a[key]):
            merged[key] = a[key]
    if "properties" in a or "properties" in b:
        pa, pb = a.get("properties", {}), b.get("properties", {})
        merged["properties"] = {k: _merge(pa[k], pb[k]) if k in pa and k in pb else pa.get(k) or pb[k] for k in [*pa, *(k for k in pb if k not in pa)]}
        ra, rb = a.get("required"), b.get("required")
        merged["required"] = [k for k in ra if k in rb] if ra is not None and rb is not None else (ra if rb is None else rb)
    if "items" in a or "items" in b:
        merged["items"] = _merge(a["items"], b["items"]) if "items" in a and "items" in b else a.get("items") or b["items"]
    return merged


def _loosen(schema: dict[str, Any]) -> dict[str, Any]:
    """A value that was null in every sample may be anything: its schema says nothing rather than "null"."""
    if schema.get("type") == "null":
        return {}
    loose = dict(schema)
    if "properties" in loose:
        loose["properties"] = {k: _loosen(v) for k, v in loose["properties"].items()}
    if "items" in loose:
        loose["items"] = _loosen(loose["items"])
    return loose


def _schema_path(name: str) -> Path:
    return SCHEMAS / f"{name}.json"


def _write(name: str, data: dict[str, Any]) -> None:
    path = _schema_path(name)
    inferred = _infer(data)
    inferred["properties"]["tool"] = {"const": "zmr", "description": "Always zmr."}
    inferred["properties"]["zmr"] = {"type": "string", "description": "The version of zmr that wrote this output."}
    inferred["properties"]["schema_version"] = {"const": data["schema_version"], "description": "Raised when a key changes meaning or goes away."}
    if path.is_file():
        old = json.loads(path.read_text())
        body = _merge({k: v for k, v in old.items() if k in ("type", "required", "properties")}, inferred)
    else:
        body = inferred
    body = _loosen(body)
    title = "an error under --json" if name == "error" else f"zmr {name} --json"
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"https://zmr.invalid/json-schema/{name}.json", "title": title, **body}
    SCHEMAS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=2) + "\n")


def check(command: str, result, codes=(0, 1)) -> dict[str, Any]:
    """*result*'s stdout: one JSON object in the envelope that validates against the command's schema (or error.json)."""
    assert result.returncode in codes, f"zmr {command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    data = json.loads(result.stdout)
    assert list(data)[:3] == ENVELOPE, list(data)
    assert (data["tool"], data["zmr"]) == ("zmr", __import__("zmr.model.source", fromlist=["version"]).version())
    assert isinstance(data["schema_version"], int)
    name = "error" if "error" in data and data.get("ok") is False else command
    if WRITE:
        _write(name, data)
    schema = json.loads(_schema_path(name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
    SEEN.add(name)
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
    import typer.main

    from zmr.cli import app

    group = typer.main.get_command(app)
    commands = getattr(group, "commands", {})
    with_json = {name for name, command in commands.items() if any("--json" in getattr(param, "opts", ()) for param in command.params)}
    assert with_json - NO_ENVELOPE == COMMANDS, f"not in COMMANDS: {sorted(with_json - NO_ENVELOPE - COMMANDS)}; without --json: {sorted(COMMANDS - with_json)}"
    assert NO_ENVELOPE <= with_json and "help" in commands and len(commands) > len(COMMANDS)  # the CLI was read


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


@pytest.fixture(scope="module", autouse=True)
def _every_command_checked():
    yield
    if not WRITE and len(SEEN) > 1:  # only when the whole file ran
        missing = COMMANDS - SEEN
        assert not missing or len(SEEN) < 5, f"commands whose --json output no test validated: {sorted(missing)}"
    assert sorted(p.stem for p in SCHEMAS.glob("*.json")) == sorted(COMMANDS | {"error"}) or WRITE
