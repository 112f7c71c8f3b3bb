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
    from zmr.ops.docs import Outcome
    from zmr.evidence.locate import LocateReport
    from zmr.smoke.runner import Report
    from zmr.ops.verify import VerifyReport

    from zmr.ops.diff import DiffReport
    from zmr.ops.update import UpdateReport
    from zmr.evidence.mismatch import MismatchReport
    from zmr.ops.publish import PublishResult
    from zmr.ops.rebase import Stopped
    from zmr.infra.reports import Report as Protocol
    from zmr.ops.validate import ValidateReport

    checks = (VerifyReport, LocateReport, Report, Outcome, DiffReport, UpdateReport, MismatchReport, ValidateReport, PublishResult, Stopped)
    for report_class in checks:  # each its own failed() and reason(), of the one protocol (zmr.infra.reports)
        assert issubclass(report_class, Protocol) and "failed" in vars(report_class) and "reason" in vars(report_class), report_class
    assert VerifyReport([], None).failed() is False and VerifyReport([], None).reason() == ""
    assert Report([], "local", "", 0.0).reason() == "" and Report([], "local", "", 0.0).details() == []  # a str, as every reason()


def test_update_and_diff_reports_say_what_their_check_fails_on():
    """update: --apply fails on a component left unmoved, --check on one left behind; diff --check on a changed component."""
    from types import SimpleNamespace

    from zmr.ops.diff import DiffReport
    from zmr.ops.update import UpdateReport

    comp = SimpleNamespace(label="m/rollout")
    unmoved = SimpleNamespace(component=comp, refused="its checkout holds work not exported", left_behind=False)
    behind = SimpleNamespace(component=SimpleNamespace(label="m/trainer"), refused=None, left_behind=True)
    both = [unmoved, behind]
    assert not UpdateReport(both).failed() and UpdateReport(both).reason() == ""  # neither --apply nor --check: a report only
    applied = UpdateReport(both, applied=True)
    assert applied.failed() and applied.reason() == "1 of 2 components not moved: m/rollout"
    assert applied.details()[0] == "m/rollout: its checkout holds work not exported" and "--apply` again" in applied.details()[-1]
    checked = UpdateReport(both, checked=True, target="main")
    assert checked.failed() and checked.reason() == "1 component behind main: m/trainer" and checked.details() == []
    assert not UpdateReport([behind], applied=True).failed()  # behind but not refused: --apply moved what it could
    unchanged = SimpleNamespace(status="unchanged")
    changed = SimpleNamespace(status="changed")
    assert not DiffReport("a" * 40, "HEAD~1", None, None, [unchanged]).failed()
    report = DiffReport("a" * 40, "HEAD~1", None, None, [unchanged, changed])
    assert report.failed() and report.reason() == "1 of 2 components change"
