"""`zmr status`: where each component stands, as `git status` says where a work tree stands.

Per component: the pin, whether a checkout is there and holds commits not exported, whether a rebase is in progress,
whether the release branch is current (its trailers name this pin and this series' digest; `zmr verify` rebuilds to be
sure), who holds its lock, and how many patches declare each upstream status (`zmr.upstream_status`). Reads only: no fetch, no build, no lock taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from zmr.manifest import Component
    from zmr.project import Project


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
    lock_holder: dict | None = None  # {pid, command, started} while another zmr works on it
    upstream_status: dict[str, int] = field(default_factory=dict)  # the series' patches per upstream status kind (`none`: no header)

    def to_json(self) -> dict:
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
        }


@dataclass
class StatusReport:
    components: list[ComponentStatus]

    def to_json(self) -> dict:
        return {"components": [c.to_json() for c in self.components]}


def status(project: Project, components: list[Component]) -> StatusReport:
    return StatusReport([component_status(project, c) for c in components])


def component_status(project: Project, component: Component) -> ComponentStatus:
    from zmr import checkout, lock, upstream_status
    from zmr.errors import ZmrError

    co = checkout.remembered_checkout(project, component) or checkout.checkout_of(project.default_checkout(component), component)
    work: list[str] = []
    if co is not None:
        _, work = checkout.sync_state(project, component, co)
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
    )


def _release_state(project: Project, component: Component) -> tuple[str, str | None]:
    """current: the branch's trailers name this pin and this series' digest; stale: they do not; missing: no branch."""
    from zmr.errors import ZmrError
    from zmr.provenance import TRAILER_SERIES, TRAILER_UPSTREAM_COMMIT

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
