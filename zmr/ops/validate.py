"""`zmr validate`: manifests, cases and series checked together, every problem at once (docs/reference.md §7.2).

`validate` reads what every other command reads (`zmr.model.cases.check_project`
for the manifests and cases, `Project.series` for each component's series) and
returns a `ValidateReport`: the problems as located records (file, line, what
to do), the warnings, and the errors as raised, so that the CLI can show them
as text or as JSON. It writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from zmr.infra.errors import CaseError, Located, ZmrError, ProblemJson
from zmr.model.cases import check_project
from zmr.model.manifest import Manifest
from zmr.model.project import Project
from zmr.model.series import Patch, message_split_problem
from zmr.model.yamlnodes import Problem
from zmr.infra.reports import Report
from zmr.infra.wording import counted


class ValidateJson(TypedDict):
    """``ok``: no problem; the models and cases checked, the patches read, every problem found, the warnings."""

    ok: bool
    models: list[str]
    cases: list[str]
    patches: int
    problems: list[ProblemJson]
    warnings: list[str]


@dataclass
class ValidateReport(Report):
    """``zmr validate --json``: the models and cases checked, the patches read, every problem found and the warnings."""

    models: list[str]
    cases: list[str]
    patches: int
    problems: list[Located]
    warnings: list[str]
    # As raised, for the text output: the manifests' and cases' one error, then one per series.
    errors: list[ZmrError] = field(default_factory=list, repr=False)

    def failed(self) -> bool:
        return bool(self.problems)

    def reason(self) -> str:
        """How many problems (exit 2: they are bad input, not a failed check)."""
        return counted(len(self.problems), "problem") if self.problems else ""

    def to_json(self) -> ValidateJson:
        problems = [p.to_json() for p in self.problems]
        return {"ok": not problems, "models": self.models, "cases": self.cases, "patches": self.patches, "problems": problems, "warnings": self.warnings}


def validate(project: Project, models: list[str] | None = None, *, require_upstream_status: bool = False) -> ValidateReport:
    """Check the manifests, cases and series of *models* (all when empty); never raises for what it finds.

    *require_upstream_status*: a patch that declares no upstream status is a problem too.
    """
    report = ValidateReport([], [], 0, [], [])
    manifests: list[Manifest] = []
    try:
        manifests, cases = check_project(project, models)
        report.models, report.cases = [m.model for m in manifests], [c.model for c in cases]
    except CaseError as err:  # every problem of the manifests (their series' too: Project.manifests) and cases
        known = {str(p) for p in err.problems}
        more = [p for p in project.series_problems(models) if str(p) not in known]
        report.problems += [*err.problems, *more]
        report.errors.append(CaseError([*err.problems, *more]) if more else err)
    for manifest in manifests:
        for comp in manifest.components.values():
            try:
                series = project.series(comp)
            except ZmrError as err:
                report.errors.append(err)
                listed = getattr(err, "problems", [])
                report.problems += listed or [Problem(comp.patches, 0, err.message, "; ".join(err.details))]
                continue
            report.patches += len(series.patches)
            report.warnings.extend(series.warnings)
            split = _message_problems(comp.patches, series.patches) + _status_problems(comp.patches, series.patches, require_upstream_status)
            if split:
                report.problems += split
                report.errors.append(
                    ZmrError(f"{len(split)} problem{'s' if len(split) != 1 else ''} in {comp.patches}/series", details=[str(p) for p in split])
                )
    return report


def _message_problems(folder: str, patches: Sequence[Patch]) -> list[Located]:
    """Patch files whose commit message would be cut or read as a diff (`series.message_split_problem`)."""
    found: list[Located] = []
    for patch in patches:
        split = message_split_problem(patch)
        if split is not None:
            fix = "edit the file, or reword the commit in a checkout and export it again"
            found.append(Problem(f"{folder}/{patch.name}", split[0], split[1], fix))
    return found


def _status_problems(folder: str, patches: Sequence[Patch], require: bool) -> list[Located]:
    """Malformed upstream-status headers; with *require*, patches that declare none (`zmr.model.upstream_status`)."""
    from zmr.model.upstream_status import FIX, status_of

    found: list[Located] = []
    for patch in patches:
        status, problems = status_of(patch)
        found += [Problem(f"{folder}/{patch.name}", line, message, FIX) for line, message in problems]
        if require and status is None and not problems:
            found.append(Problem(f"{folder}/{patch.name}", 1, "no upstream status (--require-upstream-status)", FIX))
    return found
