"""Checkouts: a git working tree per component where engineers change a series.

``zmr checkout`` turns a series into commits (this package) and ``zmr export``
(``zmr.ops.export``) turns commits back into a series, on top of ``zmr.ops.replay``
(series → commits) and ``zmr.ops.export`` (commits → series, planned by ``zmr.ops.patchplan``).
``zmr.ops.patchplan`` knows nothing of checkouts, so that checkout (is there
unexported work?), export and rebase all plan with it and no import goes
in a circle::

    series ──build_chain (zmr.ops.replay: a temp index in the mirror, one fast-import)──▶ chain of commits
           ──(local fetch: objects copied, never borrowed)──▶ checkout: branch <model>/<component>
    checkout ──(rev-list zmr/base..HEAD)──▶ zmr.ops.patchplan.plan_export ──▶ write_plan ──▶ series

Where state is kept, inside the checkout's ``.git``:

- config ``zmr.model``, ``zmr.component``, ``zmr.pin``, ``zmr.branch``,
  ``zmr.project``, ``zmr.upstream``: what the checkout is of;
- config ``zmr.token``: a random marker written by the zmr that made (or
  first saved) the checkout; state that names a checkout (the remembered
  ``--dir``, a rebase's saved checkout) names its token too, and zmr changes
  or deletes a folder named by state only when it carries that token;
- ``refs/zmr/base``: the pinned upstream commit (``git log zmr/base..``
  shows exactly the series);
- ``refs/zmr/exported``: the last tip known to equal the series (set by
  checkout, export and rebase: ``mark_exported``); a HEAD elsewhere may hold
  unexported work;
- config ``zmr.series``: the fingerprint of the series ``refs/zmr/exported``
  equals (``series_fingerprint``), so export can tell a stale checkout from
  new work (the three sides, docs/reference.md §7.7);
- ``zmr-merge/``: present only while ``zmr checkout --merge`` replays the
  checkout's new commits on the repository's series (``merge``);
- ``refs/zmr/backup/<time>[-worktree]``: what ``--force`` discarded;
- remote ``upstream``: the component's upstream (history on demand: ``--history``);
- ``zmr-refresh``: present only while a refresh runs, so an interrupted one
  is finished by the next ``zmr checkout`` instead of being taken for work
  (``Checkout.half_refreshed``).

A checkout made with ``--dir`` is remembered in the git directory
(``Project.checkout_pointer``). Which checkout a command uses is
``checkout_path`` (the checkout-selection rule, docs/reference.md §8.1).
The package, by concern (this module is the ``zmr checkout`` command itself
and re-exports what other modules use):

- ``worktree``: the ``Checkout`` porcelain class, ``PickResult``, and the
  git working-tree verbs (``create_checkout``, ``refresh``, ``dirty``);
  git porcelain that changes a working tree (cherry-pick, commit, reset,
  ...) and the files git keeps for an operation in progress
  (``CHERRY_PICK_HEAD``, ...) are used in no module outside this package
  (tests/test_architecture.py checks);
- ``state``: which checkout (pointer, token, ``checkout_path``), the series
  fingerprint, ``sync_state`` (is there unexported work?);
- ``merge``: ``zmr checkout --merge | --continue | --abort``;
- ``handoff``: what ``zmr rebase`` does to a checkout (``snapshot``,
  ``restore``, ``place``, ``mark_rebased``).
State and commands: docs/reference.md §8.1, §7.6, §7.7.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from zmr.infra.cache import HEADS, TAGS, Cache, Mirror
from zmr.infra.git import Progress
from zmr.infra.lock import locked
from zmr.infra.reports import Report
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.model.project import Project
from zmr.ops.checkout.handoff import (
    SavedCheckout,
    mark_rebased,
    place,
    restore,
    snapshot,
)
from zmr.ops.checkout.merge import (
    MERGE_DIR,
    MergeResult,
    merge,
    merge_abort,
    merge_continue,
    merge_state,
    refuse_during_merge,
)
from zmr.ops.checkout.state import (
    Pointer,
    checkout_of,
    checkout_path,
    clear_stale_locks,
    config_values,
    default_path,
    finish_refresh_locks,
    forget_pointer,
    keep_out_of_status,
    read_pointer,
    rebase_in_progress,
    refuse_during_rebase,
    remembered_checkout,
    require_checkout,
    rewritten_advice,
    same_folder,
    series_fingerprint,
    series_moved,
    show_path,
    sync_state,
    upstream_commits_in,
    upstream_commits_problem,
    write_pointer,
)
from zmr.ops.checkout.worktree import (
    BACKUP_PREFIX,
    BASE_REF,
    EXPORTED_REF,
    REFRESH_MARKER,
    SERIES_KEY,
    TOKEN_KEY,
    Checkout,
    CheckoutError,
    PickResult,
    PickStatus,
    backup,
    branch_name,
    check_identity,
    check_not_half_refreshed,
    create_checkout,
    dirty,
    mark_exported,
    new_token,
    open_checkout,
    refresh,
)
from zmr.ops.replay import build_chain

__all__ = [
    "BACKUP_PREFIX",
    "BASE_REF",
    "Checkout",
    "CheckoutError",
    "CheckoutReport",
    "CheckoutResult",
    "EXPORTED_REF",
    "MERGE_DIR",
    "MergeResult",
    "PickResult",
    "PickStatus",
    "Pointer",
    "REFRESH_MARKER",
    "SERIES_KEY",
    "SavedCheckout",
    "TOKEN_KEY",
    "UPSTREAM_REMOTE",
    "add_history",
    "backup",
    "branch_name",
    "check_identity",
    "check_not_half_refreshed",
    "checkout",
    "checkout_of",
    "checkout_path",
    "clear_stale_locks",
    "config_values",
    "create_checkout",
    "default_path",
    "dirty",
    "ensure_upstream_remote",
    "forget_pointer",
    "keep_out_of_status",
    "mark_exported",
    "mark_rebased",
    "merge",
    "merge_abort",
    "merge_continue",
    "merge_state",
    "new_token",
    "open_checkout",
    "place",
    "read_pointer",
    "rebase_in_progress",
    "refresh",
    "refuse_during_merge",
    "refuse_during_rebase",
    "remembered_checkout",
    "require_checkout",
    "restore",
    "same_folder",
    "series_fingerprint",
    "series_moved",
    "rewritten_advice",
    "show_path",
    "snapshot",
    "sync_state",
    "upstream_commits_in",
    "upstream_commits_problem",
    "write_pointer",
]


class CheckoutResultJson(TypedDict):
    """A checkout: where, its branch, the base (the pin) and tip commits, its patches, what was done (created, refreshed,
    unchanged), the backup refs of commits it replaced, and whether upstream's history was added (--history)."""

    model: str
    component: str
    path: str
    branch: str
    base: str
    tip: str
    patches: int
    action: str
    backups: list[str]
    history: bool


class CheckoutJson(TypedDict):
    """What ``zmr checkout`` did: one entry per component."""

    checkouts: list[CheckoutResultJson]


@dataclass
class CheckoutResult:
    component: Component
    path: Path
    branch: str
    base: str
    tip: str
    patches: int
    action: str  # created | refreshed | unchanged
    backups: list[str] = field(default_factory=list)
    history: bool = False  # upstream's history was added (--history)

    def to_json(self) -> CheckoutResultJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "path": str(self.path),
            "branch": self.branch,
            "base": self.base,
            "tip": self.tip,
            "patches": self.patches,
            "action": self.action,
            "backups": self.backups,
            "history": self.history,
        }


@dataclass(frozen=True)
class CheckoutReport(Report):
    """What ``zmr checkout`` did: one result per component."""

    checkouts: list[CheckoutResult]

    def to_json(self) -> CheckoutJson:
        return {"checkouts": [r.to_json() for r in self.checkouts]}


@locked
def checkout(
    project: Project,
    component: Component,
    cache: Cache | None = None,
    path: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    history: bool = False,
) -> CheckoutResult:
    """Make (or refresh) the working tree of *component*: the pin plus one commit per patch.

    The checkout is shallow (the pin and the series: fast) with an ``upstream``
    remote; *history* also gives it upstream's history and branches (``add_history``).
    """
    cache = cache or Cache()
    result = _checkout(project, component, cache, path, force, progress)
    co = open_checkout(result.path)
    assert co is not None
    upstream = cache.for_component(component, project.root)
    ensure_upstream_remote(co, upstream.url)
    if history:
        if progress:
            progress(f"{component.label}: fetching upstream's history")
        add_history(co, upstream.ensure_history())
        result.history = True
    return result


UPSTREAM_REMOTE = "upstream"


def ensure_upstream_remote(co: Checkout, url: str) -> None:
    """An ``upstream`` remote (the component's upstream) unless the checkout has one: ``git fetch upstream`` works there."""
    if co.repo.run(["config", "--get", f"remote.{UPSTREAM_REMOTE}.url"], check=False).returncode != 0:
        co.repo.run(["config", f"remote.{UPSTREAM_REMOTE}.url", url])
        co.repo.run(["config", f"remote.{UPSTREAM_REMOTE}.fetch", f"+refs/heads/*:refs/remotes/{UPSTREAM_REMOTE}/*"])


def add_history(co: Checkout, mirror: Mirror) -> None:
    """Upstream's whole history and branches in the checkout (``git log``, ``blame``, ``cherry-pick <upstream id>``).

    Copied from the mirror, which ``zmr rebase`` and ``upstreamed`` keep
    complete anyway: the same as ``git fetch --unshallow upstream``, without
    asking the upstream again.
    """
    shallow = ["--unshallow"] if (co.git_dir / "shallow").exists() else []
    refspecs = [f"+{HEADS}*:refs/remotes/{UPSTREAM_REMOTE}/*", f"+{TAGS}*:refs/tags/*"]
    co.repo.fetch(str(mirror.path), refspecs, extra=[*shallow, "--update-shallow"], own_source=True)


def _checkout(project: Project, component: Component, cache: Cache, path: Path | None, force: bool, progress: Progress | None) -> CheckoutResult:
    refuse_during_rebase(project, component, "a checkout")
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    in_sync = False
    if co is not None:
        check_identity(co, component)
        refuse_during_merge(co, component)
        if not co.half_refreshed:
            problems = dirty(co)
            in_sync, work = sync_state(project, component, co, cache)
            problems += work
            if problems and not force:
                m, k = component.model, component.key
                recorded = co.config.get(SERIES_KEY)
                moved = co.pin != component.commit or bool(recorded and recorded != series_fingerprint(project, component, component.commit))
                if moved:  # export would refuse: the repository's series (or pin) moved too
                    keep = f"keep it on the repository's series: commit (or stash) your changes, then `zmr checkout {m} -c {k} --merge`"
                else:
                    keep = f"keep it: commit, then `zmr export {m} -c {k}`"
                raise CheckoutError(
                    f"{show_path(project, target)}: the checkout of {component.label} has work that is not in the series",
                    details=[*problems, keep, f"or discard it: `zmr checkout {m} -c {k} --force` (saves it under {BACKUP_PREFIX}... first)"],
                )
            if in_sync and not problems:
                # The branch already is the series (maybe as the engineer's own commits): leave it.
                head = co.head() or ""
                mark_exported(co, head, "zmr checkout", series_fingerprint(project, component, component.commit))
                _remember(project, component, co)
                count = len(co.repo.commits_between(component.commit, head))
                return CheckoutResult(component, target, co.branch, component.commit, head, count, "unchanged")
    series = project.series(component, no_links=True)
    if progress:
        progress(f"{component.label}: fetching {component.commit[:12]}")
    mirror = cache.for_component(component, project.root).ensure([component.commit])
    if progress:
        progress(f"{component.label}: committing {counted(len(series.patches), 'patch')}")
    chain = build_chain(mirror.repo, component, component.commit, series.patches, progress=progress)
    tip = chain[-1] if chain else component.commit
    branch = branch_name(component)
    config = config_values(project, component, branch, series=series)
    if co is None:
        keep_out_of_status(project, target)
        create_checkout(target, mirror, branch, component.commit, tip, {**config, TOKEN_KEY: new_token()})
        action, backups = "created", []
    else:
        finish_refresh_locks(project, co)
        backups = backup(co) if force else []
        action = refresh(co, mirror.path, branch, component.commit, tip, config, clean=force, extra_updates=backups)
    made = open_checkout(target)
    assert made is not None
    _remember(project, component, made)
    return CheckoutResult(component, target, branch, component.commit, tip, len(series.patches), action, [u.ref for u in backups])


def _remember(project: Project, component: Component, co: Checkout) -> None:
    """A checkout outside ``work/<model>/<component>`` becomes the remembered ``--dir``, with its token."""
    if not same_folder(co.path, project.default_checkout(component)):
        write_pointer(project, component, co)
