"""``zmr checkout --merge | --continue | --abort``: the checkout's commits since its last export replayed on the repository's series (docs/reference.md §7.6).

State: ``zmr-merge/`` in the checkout's git directory (``merge_state``):
``saved.json`` and a copy of the config (what ``--abort`` restores, made by
``zmr.ops.checkout.handoff.snapshot``) and ``todo.json`` (the commits left);
read and written through ``zmr.infra.state`` (``MERGE_SAVED``, ``MERGE_TODO``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from zmr.infra.cache import Cache
from zmr.infra.git import FULL_OID_RE, Progress
from zmr.infra.lock import locked
from zmr.infra.state import MERGE_DIR as MERGE_FOLDER, MERGE_SAVED, MERGE_TODO, StateRefused
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.model.patchfile import CommitMeta
from zmr.model.project import Project
from zmr.ops.checkout.handoff import SavedCheckout, restore, snapshot
from zmr.ops.checkout.state import checkout_path, config_values, finish_refresh_locks, refuse_during_rebase, require_checkout, rewritten_advice, show_path
from zmr.ops.checkout.worktree import Checkout, CheckoutError, branch_name, check_identity, dirty, open_checkout, refresh
from zmr.ops.patchplan import list_commits
from zmr.ops.replay import build_chain
from zmr.infra.reports import Report

MERGE_DIR = MERGE_FOLDER.where  # in the checkout's .git while `zmr checkout --merge` is under way (merge_state)


class MergeJson(TypedDict):
    """Where ``zmr checkout --merge`` got: its action (merged, stopped, aborted), the commits replayed and left, the commit
    that stopped and its files in conflict ('' and [] when none)."""

    model: str
    component: str
    path: str
    action: str
    replayed: int
    left: int
    commit: str
    subject: str
    files: list[str]


@dataclass
class MergeResult(Report):
    """Where ``zmr checkout --merge`` (or its ``--continue``) got: *action* ``merged``, ``stopped`` (a conflict) or ``aborted``.

    *replayed*: the checkout's commits replayed so far; *commit*, *subject*
    and *files*: the commit that stopped and its files in conflict.
    """

    component: Component
    path: Path
    action: str
    replayed: int = 0
    left: int = 0
    commit: str = ""
    subject: str = ""
    files: list[str] = field(default_factory=list)

    def to_json(self) -> MergeJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "path": str(self.path),
            "action": self.action,
            "replayed": self.replayed,
            "left": self.left,
            "commit": self.commit,
            "subject": self.subject,
            "files": self.files,
        }


def merge_state(co: Checkout) -> Path:
    """The folder of a merge under way: what ``restore`` needs (``saved.json`` + a copy of the config) and ``todo.json``."""
    return MERGE_FOLDER.path(co.git_dir)


def _todo_path(state: Path) -> Path:
    return state / Path(MERGE_TODO.where).name


def _load_todo(state: Path, component: Component) -> dict[str, Any]:
    """``todo.json`` of the merge folder *state*, checked: the commits left (full ids), the HEAD before a pick, the count
    replayed. One that is not is refused with the way out that needs only ``saved.json``: ``--abort``."""
    path = _todo_path(state)
    try:
        todo = MERGE_TODO.load(path)
        if todo is None:
            raise MERGE_TODO.refused(path, "no such file")
        left, head, replayed = todo.get("todo"), todo.get("head"), todo.get("replayed")
        if not (isinstance(left, list) and all(isinstance(c, str) and FULL_OID_RE.match(c) for c in left)) or not (head is None or isinstance(head, str)):
            raise MERGE_TODO.refused(path, "not the commits left and the HEAD before a pick, as zmr writes them")
        if not isinstance(replayed, int) or isinstance(replayed, bool):
            raise MERGE_TODO.refused(path, "not the count of commits replayed, as zmr writes it")
    except StateRefused as err:
        raise CheckoutError(err.message, details=[f"undo the merge with `zmr checkout {component.model} -c {component.key} --abort`"]) from None
    return cast(dict[str, Any], todo)


def _save_todo(state: Path, todo: dict[str, Any]) -> None:
    MERGE_TODO.save(_todo_path(state), todo)


def refuse_during_merge(co: Checkout, component: Component) -> None:
    if merge_state(co).is_dir():
        m, k = component.model, component.key
        raise CheckoutError(
            f"{co.path}: a `zmr checkout --merge` is in progress",
            details=[f"finish it with `zmr checkout {m} -c {k} --continue`, or undo it with `zmr checkout {m} -c {k} --abort`"],
        )


@locked
def merge(project: Project, component: Component, cache: Cache | None = None, path: Path | None = None, progress: Progress | None = None) -> MergeResult:
    """Replay the checkout's commits since its last export on a fresh checkout of the repository's series (§7.6).

    Before anything moves, ``snapshot`` saves the checkout in its own
    ``.git`` (``merge_state``), so ``--abort`` puts it back exactly.
    """
    refuse_during_rebase(project, component, "a merge")
    there = open_checkout(checkout_path(project, component, path))
    if there is not None:
        check_identity(there, component)
        refuse_during_merge(there, component)  # before the half-refreshed check: a --merge killed while it refreshed is finished by --continue
    co = require_checkout(project, component, path)
    where = show_path(project, co.path)
    problems = dirty(co)
    if problems:
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or stash the changes, then merge again"])
    head, exported = co.head(), co.exported()
    if head is None or exported is None or not co.repo.is_ancestor(exported, head):
        raise CheckoutError(
            f"{where}: HEAD does not descend from the last exported tip ({(exported or '?')[:12]}): the checkout's commits were rewritten",
            details=rewritten_advice(component, co),
        )
    mine = list_commits(co.repo, exported, head, component.label)
    # Everything that can refuse (the series read, the pin fetched, each patch applied) before the merge state is
    # written: a refused --merge leaves nothing behind, no merge in progress (#47).
    target = _series_tip(project, component, cache, progress)
    state = merge_state(co)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MERGE_DIR}.tmp-", dir=co.git_dir))
    try:
        saved = snapshot(co, co.path, tmp)
        MERGE_SAVED.save(tmp / Path(MERGE_SAVED.where).name, saved.to_json())
        _save_todo(tmp, {"todo": mine, "head": None, "replayed": 0})
        os.rename(tmp, state)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _refresh_to_series(project, component, co, target)
    return _replay_mine(component, co)


def _series_tip(project: Project, component: Component, cache: Cache | None = None, progress: Progress | None = None) -> tuple[Path, str]:
    """The repository's series as commits on the pin: (the mirror holding them, their tip); refuses, changing nothing, when it does not apply."""
    cache = cache or Cache()
    series = project.series(component)
    mirror = cache.for_component(component, project.root).ensure([component.commit])
    if progress:
        progress(f"{component.label}: committing {counted(len(series.patches), 'patch')}")
    chain = build_chain(mirror.repo, component, component.commit, series.patches, progress=progress)
    return mirror.path, chain[-1] if chain else component.commit


def _refresh_to_series(project: Project, component: Component, co: Checkout, target: tuple[Path, str]) -> None:
    """The checkout refreshed to the repository's series at *target* (``_series_tip``: the base the checkout's new commits are
    replayed on); run again, it finishes an interrupted one."""
    source, tip = target
    branch = branch_name(component)
    finish_refresh_locks(project, co)
    refresh(co, source, branch, component.commit, tip, config_values(project, component, branch), clean=False)


def _replay_mine(component: Component, co: Checkout) -> MergeResult:
    """Cherry-pick the commits left in ``todo.json``, one at a time; stop on a conflict; done: the merge folder goes."""
    state = merge_state(co)
    todo = _load_todo(state, component)
    while todo["todo"]:
        commit = todo["todo"][0]
        todo["head"] = co.head()
        _save_todo(state, todo)
        picked = co.cherry_pick(commit)
        if picked.status == "conflict":
            subject = CommitMeta.for_commit(co.repo.commit_info(commit)).subject
            return MergeResult(component, co.path, "stopped", todo["replayed"], len(todo["todo"]) - 1, commit, subject, picked.files)
        if picked.status == "failed":
            raise CheckoutError(
                f"{co.path}: git cherry-pick {commit[:12]} failed",
                details=[*picked.error[-6:], "fix the checkout, then --continue (or --abort)"],
            )
        if picked.status == "empty":
            co.skip_pick()  # the repository's series holds that change already
        else:
            todo["replayed"] += 1
        todo["todo"].pop(0)
        todo["head"] = None
        _save_todo(state, todo)
    shutil.rmtree(state)
    return MergeResult(component, co.path, "merged", todo["replayed"])


def _merge_checkout(project: Project, component: Component, path: Path | None, aborting: bool = False) -> Checkout:
    """The checkout of the merge under way (``merge_continue`` first finishes a refresh that a kill cut short)."""
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    if co is None or not merge_state(co).is_dir():
        raise CheckoutError(
            f"{show_path(project, target)}: no `zmr checkout --merge` in progress",
            details=[f"start one with `zmr checkout {component.model} -c {component.key} --merge`"],
        )
    check_identity(co, component)
    return co


@locked
def merge_continue(project: Project, component: Component, path: Path | None = None) -> MergeResult:
    """``--continue``: commit the engineer's resolution of the commit that stopped, replay the rest."""
    co = _merge_checkout(project, component, path)
    where = show_path(project, co.path)
    state = merge_state(co)
    todo = _load_todo(state, component)
    if co.half_refreshed:
        if todo["head"] is None and todo["replayed"] == 0 and not co.pick_in_progress():
            # A --merge killed while it refreshed the checkout, before it replayed anything: finish the refresh, then replay.
            _refresh_to_series(project, component, co, _series_tip(project, component))
            return _replay_mine(component, co)
        raise CheckoutError(
            f"{co.path}: `zmr checkout --merge` was interrupted while it refreshed the checkout",
            details=[f"undo it with `zmr checkout {component.model} -c {component.key} --abort`, then --merge again"],
        )
    if co.pick_in_progress():
        files = co.unmerged_paths()
        if files:
            raise CheckoutError(f"{where}: conflicts in {', '.join(files)} are not resolved yet", details=["edit the files, `git add` them, then --continue"])
        marked = co.conflict_marked(co.staged_paths())
        if marked:
            raise CheckoutError(f"{where}: conflict markers left in {', '.join(marked)}", details=["remove them, `git add` the files, then --continue again"])
        if co.unstaged_paths():
            raise CheckoutError(f"{where}: changes not staged", details=["`git add` them (or `git checkout -- FILE`), then --continue again"])
        if co.index_matches_head():
            co.skip_pick()  # resolved to nothing: the repository's series has it
        else:
            co.commit_as(todo["todo"][0])
            todo["replayed"] += 1
        todo["todo"].pop(0)
    elif dirty(co, untracked_files=False):
        problems = dirty(co, untracked_files=False)
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or drop the changes, then --continue"])
    elif todo["todo"] and todo["head"] is not None and co.head() != todo["head"]:
        todo["todo"].pop(0)  # the engineer committed the resolution (git cherry-pick --continue)
        todo["replayed"] += 1
    todo["head"] = None
    _save_todo(state, todo)
    return _replay_mine(component, co)


@locked
def merge_abort(project: Project, component: Component, path: Path | None = None) -> MergeResult:
    """``--abort``: the checkout back as the merge found it (branch, refs, config, tree)."""
    co = _merge_checkout(project, component, path, aborting=True)
    state = merge_state(co)
    restore(_load_saved(state, co), state)
    shutil.rmtree(state)
    return MergeResult(component, co.path, "aborted")


def _load_saved(state: Path, co: Checkout) -> SavedCheckout:
    """``saved.json`` of the merge folder *state*, checked: it names *co*, the checkout whose ``.git`` holds it."""
    path = state / Path(MERGE_SAVED.where).name
    data = MERGE_SAVED.load(path)
    if data is None:
        raise MERGE_SAVED.refused(path, "no such file")
    try:
        saved = SavedCheckout.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise MERGE_SAVED.refused(path, f"damaged ({err!r} is missing or wrong)") from None
    if os.path.realpath(saved.path) != os.path.realpath(co.path):
        raise MERGE_SAVED.refused(path, f"it names {saved.path}, not the checkout it lies in ({co.path})")
    return saved
