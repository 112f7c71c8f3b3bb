"""`--json` reports: the CLI prints a library report (`print_report`, through the one envelope), and each report keeps its keys."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import two_models, zmr

CLI = Path(__file__).resolve().parent.parent / "zmr" / "cli"
# Restructured in parallel (issue #26), which adds their to_json(); checked here once that lands.
NOT_YET: set[str] = set()  # CLI modules not yet held to the rule (none)


# The one module that writes JSON without the envelope: a GitHub Actions matrix (§6.2).
NO_ENVELOPE = {"ci_matrix.py"}


def _json_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls that print JSON: `print_report(...)`, `print_json(...)` (its old name) and `json.dumps(...)`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("print_report", "print_json", "dumps"):
                found.append(node)
    return found


def _is_report(call: ast.Call) -> bool:
    """`print_report(<a report>)`: one argument that is neither a dict, nor a `to_json()` (that skips the envelope's
    schema_version and the type check), nor a json.dumps."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name != "print_report" or not call.args:
        return False
    arg = call.args[0]
    built = isinstance(arg, (ast.Dict, ast.DictComp)) or (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "to_json")
    return not built


def test_cli_prints_only_reports_through_the_envelope():
    """No dict is built in zmr/cli from library objects and no JSON written by hand: every JSON printed is one report
    given to `render.print_report`, which puts it in the one envelope (`zmr.infra.reports.envelope`)."""
    checked = 0
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "asdict" not in names | imported, f"{path.name}: asdict() copies library internals; give the result a to_json()"
        if path.name in NOT_YET | NO_ENVELOPE | {"render.py", "reports.py"}:  # render.py writes the envelope, reports.py schemas
            continue
        for call in _json_calls(tree):
            checked += 1
            printed = ast.unparse(call)
            assert _is_report(call), f"{path.name}:{call.lineno}: give print_report() the library's report, not {printed}"
    assert checked >= 15  # the checker found the calls it is meant to check


def test_checker_rejects_a_hand_built_dict():
    """The check above would catch the old build.py (a dict made of BranchUpdate fields) and a to_json() printed raw."""
    for old in ('print_json({"branches": [{"branch": u.branch, "old": u.old} for u in updates]})', "print_report(BuildReport(updates).to_json())",
                'sys.stdout.write(json.dumps(report.to_json()))'):  # fmt: skip
        calls = _json_calls(ast.parse(old))
        assert len(calls) == 1 and not _is_report(calls[0]), old
    assert _is_report(_json_calls(ast.parse("print_report(zmr.ops.build.BuildReport(updates))"))[0])


def _keys(result) -> dict:
    """The report without the envelope every `--json` output starts with (tests/test_json_contract.py checks it)."""
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    if "include" in data:  # ci-matrix: a GitHub Actions matrix, no envelope
        return data
    assert list(data)[:3] == ["tool", "zmr", "schema_version"]
    return {k: v for k, v in data.items() if k not in ("tool", "zmr", "schema_version")}


def test_json_reports_keep_their_keys(project, upstream):
    """Key names and order of each report (the bytes printed depend on both)."""
    two_models(project, upstream)
    sections = ["support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes"]
    project.write("README.md", "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n" for s in sections))
    project.commit_all("readme")
    root = project.root
    listing = _keys(zmr("list", "--json", cwd=root))
    assert list(listing) == ["models"]
    assert list(listing["models"][0]) == ["model", "title", "components", "smoke"]
    assert list(listing["models"][0]["components"][0]) == ["component", "upstream", "commit", "track", "branch", "release", "patches", "series", "upstream_status"]
    assert list(_keys(zmr("validate", "--json", cwd=root))) == ["ok", "models", "cases", "patches", "problems", "warnings"]
    fetched = _keys(zmr("fetch", "--all", "--json", cwd=root))
    assert list(fetched) == ["fetched"] and list(fetched["fetched"][0]) == ["model", "component", "commit", "mirror"]
    built = _keys(zmr("build", "--all", "--json", cwd=root))
    assert list(built) == ["branches"] and list(built["branches"][0]) == ["branch", "old", "new", "status", "old_tip_kept_as"]
    verified = _keys(zmr("verify", "--all", "--json", cwd=root))
    assert list(verified) == ["ok", "remote", "branches"]
    assert list(verified["branches"][0]) == ["model", "component", "branch", "status", "expected", "actual", "reasons"]
    checked_out = _keys(zmr("checkout", "toy", "--json", cwd=root))
    assert list(checked_out) == ["checkouts"]
    assert list(checked_out["checkouts"][0]) == ["model", "component", "path", "branch", "base", "tip", "patches", "action", "backups", "history"]
    exported = _keys(zmr("export", "toy", "--dry-run", "--json", cwd=root))
    assert list(exported) == ["dry_run", "exports"]
    assert list(exported["exports"][0]) == ["model", "component", "series", "checkout", "changed", "patches", "removed", "series_rewritten", "recovered"]
    assert list(exported["exports"][0]["patches"][0]) == ["name", "status", "written", "old_name", "subject"]
    merged = _keys(zmr("checkout", "toy", "--merge", "--json", cwd=root))
    assert list(merged) == ["model", "component", "path", "action", "replayed", "left", "commit", "subject", "files"]
    assert list(_keys(zmr("docs", "--check", "--json", cwd=root))) == ["readme", "check", "up_to_date", "changed", "written", "warnings"]
    matrix = _keys(zmr("ci-matrix", cwd=root))
    assert list(matrix) == ["include"] and set(matrix["include"][0]) >= {"name", "model", "component", "branch", "smoke", "gpu"}
    created = _keys(zmr("new", "fresh", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", "--json", cwd=root))
    assert list(created) == ["model", "files", "changed", "warnings"] and created["model"] == "fresh"


def test_the_envelope_has_one_builder():
    """`tool` and `zmr` are written as keys only by `zmr.infra.reports.envelope` (mismatch, locate and smoke wrote their own,
    the CLI another): every other module hands its report to it."""
    zmr_folder = CLI.parent
    writers = []
    for path in sorted(zmr_folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict) and {"tool", "zmr"} & {k.value for k in node.keys if isinstance(k, ast.Constant)}:
                writers.append(f"{path.relative_to(zmr_folder)}:{node.lineno}")
    assert {w.partition(":")[0] for w in writers} == {"infra/reports.py"}, writers  # the envelope, and its schema
