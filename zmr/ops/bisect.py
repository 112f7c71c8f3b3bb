"""``zmr bisect``: the upstream commit that first breaks a check for the current series.

Pipeline of ``zmr bisect MODEL -c COMP --good REV --bad REV --test CMD|--smoke|--bitwise``::

    REV ──upstream.resolve_rev (history)──▶ good, bad (bad descends from good)
    good..bad along first parents, descendants of good (upstream.first_parent_line) ──▶ c1 .. cN (cN = bad)
    each commit asked: the series replayed onto it in memory (zmr.ops.update.SeriesAtPin.trial), its tree written
        to a temporary folder, the check run there (zmr.ops.checks.run_check); where the series does not replay: skip
    zmr.ops.checks.bisect_line(0 = good, N = bad) ──▶ the last good commit, the first bad one, the skips between them

As ``git bisect``, *good* and *bad* are taken as given: neither is tested.
The results are those of ``zmr update``'s checks (the same file under zmr's
state, the same keys), so a bisection cut short, or one after an update
with the same check, reuses every result it has: checks, and where the series
does not replay (kept too, ``CheckedLine``), so a re-run neither replays nor tests. Read-only but for those
results and the mirror.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TypedDict

from zmr.infra.cache import Cache
from zmr.infra.errors import ZmrError
from zmr.infra.git import Progress
from zmr.model.manifest import Component
from zmr.model import resolutions
from zmr.model.project import Project
from zmr.ops.checks import BAD, SKIP, Check, Tried, bisect_line, expected_checks, CheckJson, TriedJson
from zmr.ops.update import CheckedLine, SeriesAtPin
from zmr.ops.upstream import commit_subject, first_parent_line, resolve_rev
from zmr.infra.reports import Report


class BisectError(ZmrError):
    """The range cannot be bisected: bad does not descend from good, or there is nothing between them."""


class BisectJson(TypedDict):
    """What ``zmr bisect`` found for one component: the first bad commit (``found``: exactly, no skipped commit before
    it; the given ``--bad`` one, untested, when every commit before it passes), the last good one, every answer."""

    model: str
    component: str
    check: CheckJson
    good: str
    bad: str
    candidates: int
    last_good: str
    first_bad: TriedJson
    first_bad_subject: str
    found: bool
    skipped: list[str]
    tried: list[TriedJson]
    tests: int
    cached: int
    not_replayed: int
    expected: int


@dataclass
class BisectReport(Report):
    """What ``zmr bisect`` found for one component.

        *first_bad*: the first commit where the check fails (the given bad one
        when every commit before it passes: then untested); *last_good*: its
        first-parent predecessor, or, with *skipped* commits between them, the
        newest good commit found (the first bad is one of *skipped* or
        *first_bad*). *candidates*: commits strictly between good and bad;
        *tests*: checks run now; *tried*: every answer, in order (``cached``: those an
    earlier run's results gave; ``not_replayed``: commits where the series does not replay).
    """

    component: Component
    check: Check
    good: str
    bad: str
    candidates: int
    last_good: str
    first_bad: Tried
    first_bad_subject: str = ""
    skipped: list[str] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    tests: int = 0
    expected: int = 0

    @property
    def cached(self) -> int:
        """Answers taken from the kept results (checks and replays of earlier runs), not found now."""
        return sum(1 for t in self.tried if t.cached)

    @property
    def not_replayed(self) -> int:
        """Commits set aside because the series does not replay onto them (no check runs there)."""
        return sum(1 for t in self.tried if t.tree is None and t.verdict == SKIP)

    @property
    def found(self) -> bool:
        """The first bad commit is known exactly (no skipped commit in between)."""
        return not self.skipped

    def to_json(self) -> BisectJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "check": self.check.to_json(),
            "good": self.good,
            "bad": self.bad,
            "candidates": self.candidates,
            "last_good": self.last_good,
            "first_bad": self.first_bad.to_json(),
            "first_bad_subject": self.first_bad_subject,
            "found": self.found,
            "skipped": self.skipped,
            "tried": [t.to_json() for t in self.tried],
            "tests": self.tests,
            "cached": self.cached,
            "not_replayed": self.not_replayed,
            "expected": self.expected,
        }


def bisect(
    project: Project, component: Component, good: str, bad: str, check: Check, cache: Cache | None = None, progress: Progress | None = None
) -> BisectReport:
    """The first commit of good..bad (first parents) where *check* fails for the current series of *component*."""
    upstream = (cache or Cache()).for_component(component, project.root)
    upstream.ensure([component.commit])
    repo, good_commit = resolve_rev(upstream, good)
    repo, bad_commit = resolve_rev(upstream, bad)
    if good_commit == bad_commit or not repo.is_ancestor(good_commit, bad_commit):
        raise BisectError(
            f"{component.label}: --bad {bad} ({bad_commit[:12]}) does not descend from --good {good} ({good_commit[:12]})",
            details=["give a good commit older than the bad one, on the bad one's history"],
        )
    line = first_parent_line(repo, good_commit, bad_commit)
    if progress:
        progress(f"{component.label}: {len(line)} first-parent commits from {good_commit[:12]} to {bad_commit[:12]}; preparing the series")
    prepared = SeriesAtPin(repo, component, project.series(component).patches, bad_commit, functools.partial(resolutions.recorded, project.root))
    checked = CheckedLine(project, component, check, prepared, progress)
    found = bisect_line(0, len(line), lambda position: checked(line[position - 1]).verdict)
    asked = {t.commit: t for t in checked.tried}
    first = line[found.hi - 1]
    first_bad = asked.get(first) or Tried(first, BAD, "given as --bad (not tested)")
    report = BisectReport(
        component,
        check,
        good_commit,
        bad_commit,
        len(line) - 1,
        line[found.lo - 1] if found.lo else good_commit,
        first_bad,
        commit_subject(repo, first),
        [line[i - 1] for i in found.skipped],
        checked.tried,
        checked.tests,
        expected_checks(len(line) - 1),
    )
    return report
