"""`zmr status`: where each component stands, as `git status` says where a work tree stands.

Per component: the pin, whether a checkout is there and holds commits not exported, whether a rebase is in progress,
whether the release branch is current (its trailers name this pin and this series' digest; `zmr verify` rebuilds to be
sure), who holds its lock, and how many patches declare each upstream status (`zmr.model.upstream_status`). Reads only: no fetch, no build, no lock taken.

What a maintainer must not mistake (issue #47): a file of the series or the manifest in git's conflict state (a pull
stopped on it: ``unmerged``); a checkout the repository's series moved under, told from the engineer's own work
(``checkout_state`` ``behind`` or ``diverged``, and ``series_changed``: which patches, from the checkout's last
exported tip, so one's own commits never count); a rebase, by its target and where it stopped, and one a kill cut
short (``interrupted``: the next ``zmr update --apply`` finishes it, ``zmr rebase --abort`` undoes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.manifest import Component
    from zmr.model.project import Project


# "from" is a keyword: the functional form.
RebaseStatusJson = TypedDict("RebaseStatusJson", {"onto": str, "from": str, "stopped_at": str | None, "files": list[str], "interrupted": bool})
RebaseStatusJson.__doc__ = """A rebase under way: *from* the pin onto *onto*, the patch handed over to the engineer (null: none yet) and its
files in conflict, *interrupted*: killed with nothing handed over (the next ``update --apply`` finishes it)."""


class ComponentStatusJson(TypedDict):
    """One component: its pin and release branch (current, stale, missing; its tip, null: none), its checkout (null:
    none) and state, what exporting would save, the holder of its lock (null: free), the series' patches per upstream
    status kind, the patches the repository's series changed, files in git's conflict state, a rebase under way."""

    model: str
    component: str
    pin: str
    branch: str
    release: str
    release_tip: str | None
    checkout: str | None
    not_exported: list[str]
    rebase_in_progress: bool
    lock_holder: dict[str, Any] | None
    upstream_status: dict[str, int]
    checkout_state: str
    series_changed: list[str]
    unmerged: list[str]
    rebase: RebaseStatusJson | None


class StatusJson(TypedDict):
    """What ``zmr status`` found: one entry per component."""

    components: list[ComponentStatusJson]


@dataclass
class RebaseStatus:
    """A ``zmr rebase`` (or ``update --apply``, which moves a pin with it) under way: from the pin *old* onto *onto*."""

    onto: str
    old: str
    stopped_at: str | None  # the patch whose conflict the engineer resolves; None while none is handed over
    files: list[str]  # its files in conflict
    interrupted: bool  # killed with nothing left to the engineer: the next `update --apply` finishes it

    def to_json(self) -> RebaseStatusJson:
        return {"onto": self.onto, "from": self.old, "stopped_at": self.stopped_at, "files": self.files, "interrupted": self.interrupted}


# checkout_state: none (no checkout) | current | work (commits not exported) | behind (the repository's series moved,
# the checkout has no work of its own) | diverged (both) | rebase (a rebase holds it)
@dataclass
class ComponentStatus:
    model: str
    component: str
    pin: str
    branch: str
    release: str  # current | stale | missing
    release_tip: str | None
    checkout: str | None  # its path, None when there is none
    not_exported: list[str] = field(default_factory=list)  # what exporting would save
    rebase_in_progress: bool = False
    lock_holder: dict[str, Any] | None = None  # {pid, command, started} while another zmr works on it
    upstream_status: dict[str, int] = field(default_factory=dict)  # the series' patches per upstream status kind (`none`: no header)
    checkout_state: str = "none"
    series_changed: list[str] = field(default_factory=list)  # behind or diverged: the patches the repository's series changed
    unmerged: list[str] = field(default_factory=list)  # files of the series folder and the manifest in git's conflict state
    rebase: RebaseStatus | None = None

    def to_json(self) -> ComponentStatusJson:
        return {
            "model": self.model,
            "component": self.component,
            "pin": self.pin,
            "branch": self.branch,
            "release": self.release,
            "release_tip": self.release_tip,
            "checkout": self.checkout,
            "not_exported": self.not_exported,
            "rebase_in_progress": self.rebase_in_progress,
            "lock_holder": self.lock_holder,
            "upstream_status": self.upstream_status,
            "checkout_state": self.checkout_state,
            "series_changed": self.series_changed,
            "unmerged": self.unmerged,
            "rebase": self.rebase.to_json() if self.rebase is not None else None,
        }


@dataclass
class StatusReport(Report):
    components: list[ComponentStatus]

    def to_json(self) -> StatusJson:
        return {"components": [c.to_json() for c in self.components]}


def status(project: Project, components: list[Component]) -> StatusReport:
    return StatusReport([component_status(project, c) for c in components])


def component_status(project: Project, component: Component) -> ComponentStatus:
    from zmr.infra import lock
    from zmr.infra.errors import ZmrError
    from zmr.model import upstream_status
    from zmr.ops import checkout

    co = checkout.remembered_checkout(project, component) or checkout.checkout_of(project.default_checkout(component), component)
    work: list[str] = []
    state, moved = "none", None
    rebase = _rebase_status(project, component)
    unmerged = project.repo.unmerged([component.patches, project.manifest_path(component.model).relative_to(project.root).as_posix()])
    if co is not None and rebase is not None:
        state = "rebase"  # its commits are the rebase's, on its target: not work, and not "the old pin"
    elif co is not None:
        _, work = checkout.sync_state(project, component, co)
        try:
            moved = None if unmerged else checkout.series_moved(project, component, co)
        except ZmrError:  # a series that does not read: `zmr validate` says why
            moved = None
        own = co.head() != co.exported()
        state = ("diverged" if own else "behind") if moved is not None else ("work" if work else "current")
        if state == "behind":
            work = []  # the repository's change seen from the checkout: not the engineer's
    release, tip = _release_state(project, component)
    try:
        statuses = upstream_status.counts(project.series(component).patches)
    except ZmrError:  # a series that does not read: `zmr validate` says why; status still shows the rest
        statuses = {}
    return ComponentStatus(
        model=component.model,
        component=component.key,
        pin=component.commit,
        branch=component.branch,
        release=release,
        release_tip=tip,
        checkout=str(co.path) if co is not None else None,
        not_exported=work,
        rebase_in_progress=checkout.rebase_in_progress(project, component),
        lock_holder=lock.holder(project.lock_path(component.model, component.key)),
        upstream_status=statuses,
        checkout_state=state,
        series_changed=moved or [],
        unmerged=unmerged,
        rebase=rebase,
    )


def _rebase_status(project: Project, component: Component) -> RebaseStatus | None:
    from zmr.infra.errors import ZmrError
    from zmr.ops import rebase
    from zmr.ops.rebase_state import RebaseState

    path = project.rebase_state(component)
    if not path.is_file():
        return None
    try:
        state = RebaseState.load(path)
    except ZmrError:  # damaged: `zmr rebase --continue` or `--abort` says what to do (onto "": not read)
        return RebaseStatus("", "", None, [], False)
    stopped = state.stopped if state.stopped is not None and state.stopped.conflict else None
    name = state.names[stopped.index] if stopped is not None and 0 <= stopped.index < len(state.names) else None
    return RebaseStatus(state.new, state.old, name, list(stopped.files) if stopped else [], rebase.finishing_onto(project, component) is not None)


def _release_state(project: Project, component: Component) -> tuple[str, str | None]:
    """current: the branch's trailers name this pin and this series' digest; stale: they do not; missing: no branch."""
    from zmr.infra.errors import ZmrError
    from zmr.model.provenance import TRAILER_SERIES, TRAILER_UPSTREAM_COMMIT

    repo = project.repo
    tip = repo.resolve(f"refs/heads/{component.branch}")
    if tip is None:
        return "missing", None
    try:
        trailers = repo.commit_info(tip).trailers()
        digest = project.series(component).digest()
    except ZmrError:
        return "stale", tip
    if component.release == "two-commit":
        roots = repo.rev_list(["--max-parents=0", tip])
        pinned = repo.commit_info(roots[0]).trailers().get(TRAILER_UPSTREAM_COMMIT) if roots else None
    else:
        pinned = trailers.get(TRAILER_UPSTREAM_COMMIT)
    return ("current" if trailers.get(TRAILER_SERIES) == digest and pinned == component.commit else "stale"), tip
