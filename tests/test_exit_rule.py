"""One rule from report to exit status (#34): a library report says whether its check failed (`failed()`) and why
(`reason()`); only zmr/cli/ turns that into exit 1 (`CheckFailed`). The one exception: publish, whose remote refuses
the push in the middle of the operation."""

from __future__ import annotations

import ast
from pathlib import Path

ZMR = Path(__file__).resolve().parent.parent / "zmr"
# Library modules that may still raise CheckFailed, and why.
EXCEPTIONS = {"publish.py": "the remote refuses or rejects the push mid-operation: not a report the CLI could judge before"}


def _check_failed_uses(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "CheckFailed"]


def test_only_the_cli_decides_exit_1():
    library = [p for p in ZMR.rglob("*.py") if "cli" not in p.relative_to(ZMR).parts and p.name != "errors.py"]
    offenders = {str(p.relative_to(ZMR)): lines for p in library if (lines := _check_failed_uses(p)) and p.name not in EXCEPTIONS}
    assert offenders == {}, "a library module builds the exit-1 error; give its report failed() and reason() instead"
    assert any(_check_failed_uses(p) for p in (ZMR / "cli").glob("*.py"))


def test_reports_that_are_checks_say_failed_and_why():
    from zmr.docs import Outcome
    from zmr.evidence.locate import LocateReport
    from zmr.smoke.runner import Report
    from zmr.verify import VerifyReport

    for report_class in (VerifyReport, LocateReport, Report, Outcome):
        assert callable(getattr(report_class, "failed", None)) and callable(getattr(report_class, "reason", None)), report_class
    assert VerifyReport([], None).failed() is False and VerifyReport([], None).reason() == ""
