"""`zmr export`: write the commits of a checkout back into its series, byte-stable (docs/reference.md §7.7).

The checkout (`zmr.ops.checkout`) is read under the component lock; the commits
between `zmr/base` and HEAD are planned into patch files by
`zmr.ops.patchplan.plan_export`, checked against the three sides (the series as
the checkout last exported it, as the repository has it now, and the
commits), and written through the state journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from zmr.infra import transaction
from zmr.infra.cache import Cache
from zmr.infra.lock import locked
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.model.project import Project
from zmr.model.series import Series
from zmr.ops.checkout import (
    SERIES_KEY,
    Checkout,
    CheckoutError,
    dirty,
    mark_exported,
    refuse_during_merge,
    refuse_during_rebase,
    require_checkout,
    rewritten_advice,
    series_fingerprint,
    show_path,
    upstream_commits_problem,
)
from zmr.ops import legacy
from zmr.ops.patchplan import ExportPlan, list_commits, plan_export, stage_plan, PlannedPatchJson
from zmr.infra.reports import Report


class ExportResultJson(TypedDict):
    """One component: its series folder and checkout, whether the series changes, each patch (*old_name*: the file it
    was, null: the same name or a new patch), the files removed, whether the series file is rewritten, and what this
    export did first to one a kill cut short (finished, undone; null: nothing)."""

    model: str
    component: str
    series: str
    checkout: str
    changed: bool
    patches: list[PlannedPatchJson]
    removed: list[str]
    series_rewritten: bool
    recovered: str | None


class ExportJson(TypedDict):
    """*dry_run*: nothing was written (what an export would write)."""

    dry_run: bool
    exports: list[ExportResultJson]


@dataclass
class ExportResult:
    component: Component
    path: Path
    plan: ExportPlan
    recovered: str | None = None  # "finished" or "undone": what this export did first to one a kill cut short

    def to_json(self) -> ExportResultJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "series": self.component.patches,
            "checkout": str(self.path),
            "changed": self.plan.changed,
            "patches": [p.to_json() for p in self.plan.patches],
            "removed": self.plan.removed,
            "series_rewritten": self.plan.series_text is not None,
            "recovered": self.recovered,
        }


@dataclass(frozen=True)
class ExportReport(Report):
    """What ``zmr export`` wrote (or, *dry_run*, would write): one result per component."""

    exports: list[ExportResult]
    dry_run: bool

    def to_json(self) -> ExportJson:
        return {"dry_run": self.dry_run, "exports": [r.to_json() for r in self.exports]}


@locked
def export(project: Project, component: Component, path: Path | None = None, dry_run: bool = False, cache: Cache | None = None) -> ExportResult:
    """Write the checkout's commits (zmr/base..HEAD) back into the series, byte-stable."""
    refuse_during_rebase(project, component, "an export")
    co = require_checkout(project, component, path)
    refuse_during_merge(co, component)
    where = show_path(project, co.path)
    base = co.base()
    head = co.head()
    if co.pin != component.commit or base != component.commit:
        raise CheckoutError(
            f"{where}: the base moved: the checkout is on {(base or co.pin)[:12]}, the manifest pins {component.commit[:12]}",
            details=["the series belongs to the new pin now; exporting would write patches made for the old one", *_take_the_new_series(co, component)],
        )
    if head is None or not co.repo.is_ancestor(base, head):
        raise CheckoutError(
            f"{where}: HEAD is not on top of zmr/base ({base[:12]})",
            details=[
                "rebase your branch onto zmr/base (git rebase zmr/base), then export again",
                f"to move the series to another upstream commit, use `zmr rebase {component.model} -c {component.key} --onto REV`",
            ],
        )
    moved = upstream_commits_problem(project, component, co, base, head, cache)
    if moved is not None:
        raise moved
    problems = dirty(co, untracked_files=False)
    if problems:
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or stash the changes, then export again"])
    commits = list_commits(co.repo, base, head, component.label)
    name = transaction_name(component)
    recovered = None if dry_run else transaction.finish_interrupted(project, name)  # before planning: the plan reads the series folder
    owned = legacy.export_journal_names(project, component)  # an older zmr's interrupted export, still honoured (zmr.ops.legacy)
    series = project.series(component, no_links=True)
    plan = plan_export(co.repo, base, commits, project.series_folder(component), component.patches, owned, series=series)
    _check_three_sides(project, component, co, head, plan, series)
    if not dry_run:
        if plan.needs_writing:
            with transaction.begin(project, name) as txn:
                stage_plan(plan, txn)
        if plan.interrupted:
            legacy.forget_export_journal(project, component)
        written = None if plan.needs_writing else series  # the series as export left it: read again only where it wrote
        mark_exported(co, head, "zmr export", series_fingerprint(project, component, component.commit, written))
    return ExportResult(component, co.path, plan, recovered)


def transaction_name(component: Component) -> str:
    """The transaction an export of *component* writes its series with (zmr.infra.transaction)."""
    return f"export/{component.model}/{component.key}"


def _check_three_sides(project: Project, component: Component, co: Checkout, head: str, plan: ExportPlan, series: Series) -> None:
    """Refuse an export that would write one side over the other (docs/reference.md §7.7).

    The sides: the series the checkout was made from or last exported to
    (``zmr.series``, with ``refs/zmr/exported``), the series in the
    repository now, and the checkout's commits. Only the checkout moved:
    export. Only the repository moved (a colleague's change pulled): the
    checkout is stale; writing it back would revert that change. Both moved:
    a conflict. An export that changes nothing, or finishes an interrupted
    one, overwrites nobody.
    """
    recorded = co.config.get(SERIES_KEY)
    if recorded is None or not plan.changed or plan.interrupted:
        return  # a checkout made before zmr recorded its series: two sides only
    if recorded == series_fingerprint(project, component, component.commit, series):
        return
    where = show_path(project, co.path)
    m, k = component.model, component.key
    exported = co.exported()
    if head == exported:
        raise CheckoutError(
            f"{where}: the series {component.patches} changed in the repository since this checkout was made or exported; the checkout has no work of its own",
            details=[
                "exporting would write the checkout's older patches over that change (a colleague's, pulled?)",
                f"refresh the checkout to the repository's series: `zmr checkout {m} -c {k}`",
            ],
        )
    mine = len(co.repo.commits_between(exported, head)) if exported and co.repo.is_ancestor(exported, head) else None
    if mine is None:
        combine = rewritten_advice(component, co)
    else:
        combine = [
            f"combine them: `zmr checkout {m} -c {k} --merge` replays your new commits on a checkout of the repository's series,"
            f" then `zmr export {m} -c {k}` (on a conflict: resolve, `git add`, `zmr checkout {m} -c {k} --continue`, or `--abort`)",
        ]
    raise CheckoutError(
        f"{where}: both sides moved: the series {component.patches} changed in the repository since this checkout was made or exported, "
        + (f"and the checkout has {counted(mine, 'commit')} since" if mine is not None else "and the checkout's commits were rewritten since"),
        details=["exporting would write one side over the other", *combine],
    )


def _take_the_new_series(co: Checkout, component: Component) -> list[str]:
    """What to do when the repository's series or pin moved under the checkout's new commits: ``checkout --merge`` when zmr can tell them apart."""
    m, k = component.model, component.key
    head, exported = co.head(), co.exported()
    if head is not None and exported is not None and co.repo.is_ancestor(exported, head):
        if head == exported:
            return [f"the checkout has no commits of its own: refresh it with `zmr checkout {m} -c {k}`"]
        return [
            f"keep your {counted(len(co.repo.commits_between(exported, head)), 'new commit')} on the repository's series: `zmr checkout {m} -c {k} --merge`,"
            f" then `zmr export {m} -c {k}` (on a conflict: resolve, `git add`, `zmr checkout {m} -c {k} --continue`, or `--abort`)",
        ]
    return rewritten_advice(component, co)
