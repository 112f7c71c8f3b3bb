"""Move a series to a new upstream commit (``zmr rebase``): the stateful part, on top of ``zmr.ops.upstream``.

Pipeline of ``zmr rebase MODEL -c COMP --onto REV``::

    REV ──Cache.fetch_ref (history)──▶ new commit
    series ──build_chain on the old pin──▶ old commits ──patch-id──┐
    upstream old..new (commits touching the series' files) ─patch-id┴▶ hints: the upstream commit to name
    pin only: the series' files unchanged between the pins, or every hunk applies where
        it was (one ``git apply`` of the whole series in a throwaway index), and no
        checkout: only the manifest's pin moves
    fast path: temporary index in the mirror holding just the series' files, new pin + each patch in order:
        upstream holds its change (``zmr.ops.landed``'s answer: landed) → dropped (and reported)
        applies → committed;   does not apply → slow path from this patch on
    slow path: the checkout at (new pin + patches so far), then ``git cherry-pick`` of each
        remaining old commit (3-way); a pick that changes nothing, or conflicts where the checkout
        already holds its change (``zmr.ops.landed``), is dropped as upstream; any other conflict stops with the files in conflict;
        ``--continue`` commits the resolution and goes on; ``--skip`` drops the patch (nothing else drops one that upstream lacks)
    finish: export into the series (byte-stable), the manifest's ``commit:`` value edited
        in place, the checkout (if any) moved to the result; an ``Outcome`` (zmr/cli/rebase.py renders the report).

The fast path is ``zmr.ops.replay``'s driver (``Replayer.replay``); this module
adds only the policy: drop a patch upstream has, stop at the first conflict.

State of a rebase under way lives in ``Project.rebase_dir`` (in the git directory):
``state.json`` (a ``RebaseState``: pins, the old commits, what was dropped,
what is left, the phase) and copies of everything the rebase may change
(the manifest, every file of the series folder, and what
``zmr.ops.checkout.snapshot`` saves of the checkout). It is written completely
(temporary folder + rename) before anything else changes, and
``state.json`` is replaced atomically after each step, so an interrupted
run is resumed by ``--continue`` or undone by ``--abort`` (docs/reference.md §8.2).

The read-only questions (what REV names, which patches upstream holds, the
in-memory replay ``replay_onto``) are ``zmr.ops.upstream``'s; ``zmr upstreamed``
asks them there, with the same definition of upstream (a patch-id match only
names the commit).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from zmr.infra import git, transaction
from zmr.infra.cache import Cache
from zmr.infra.errors import ZmrError
from zmr.infra.files import atomic_write
from zmr.infra.git import Progress
from zmr.infra.lock import locked
from zmr.infra.reports import Report
from zmr.infra.wording import counted
from zmr.model import resolutions
from zmr.model.manifest import Component, parse_manifest
from zmr.model.project import Project
from zmr.model.resolutions import NotReplayed, NotReplayedJson
from zmr.model.series import Patch, Series
from zmr.ops import checkout, legacy
from zmr.ops.checkout import Checkout, PickResult
from zmr.ops.landed import Dropped, blob_reader, declared_commit, following_renames, judge, picked_empty, renamed_files, renamed_since, DroppedJson
from zmr.ops.patchplan import ExportPlan, list_commits, plan_export, stage_plan
from zmr.ops.rebase_state import RebaseState, Saved, StoppedAt
from zmr.ops.replay import build_chain, chain_patch_ids, file_sets, patch_file_sets, patch_ids, series_applies
from zmr.ops.upstream import (
    ChangedPatch,
    ChangedPatchJson,
    changed_patches,
    component_inputs,
    dropped_for,
    files_stand,
    name_landing,
    replay_onto,
    resolve_rev,
    step_change,
    upstream_patch_ids,
)

RESOLUTIONS_SAVED = "resolutions.orig"  # in the state folder: the resolution files --continue replaced, as they were


class RebaseError(ZmrError):
    """A rebase cannot start or go on."""


# -- rebase: state (zmr.ops.rebase_state) ------------------------------------------------------------


def _load(project: Project, component: Component) -> RebaseState:
    path = project.rebase_state(component)
    if not path.is_file():
        raise RebaseError(f"{component.label}: no rebase in progress", details=[f"start one with `zmr rebase {component.model} -c {component.key} --onto REV`"])
    return RebaseState.load(path)


def finishing_onto(project: Project, component: Component) -> str | None:
    """The new pin of a rebase of *component* that a kill cut short with nothing left to the engineer; else None.

    That is one in phase ``finalize`` (writing its result), or one in phase
    ``picking`` that has not handed a conflict to the engineer (killed
    between or during its cherry-picks, which ``resume`` runs again). One
    stopped on a conflict is the engineer's: None.
    """
    if not project.rebase_state(component).is_file():
        return None
    state = _load(project, component)
    if state.phase == "finalize" or (state.phase == "picking" and not (state.stopped is not None and state.stopped.conflict)):
        return state.new
    return None


def _save(project: Project, component: Component, state: RebaseState) -> None:
    state.save(project.rebase_state(component))


def _snapshot(project: Project, component: Component, state: RebaseState, co: Checkout | None, co_path: Path) -> None:
    """Save everything a rebase may change, then state.json, into the state folder in one rename."""
    final = project.rebase_dir(component)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # an interrupted start changed nothing else
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        manifest = project.manifest_path(component.model)
        shutil.copyfile(manifest, tmp / "manifest.orig")
        folder = project.series_folder(component)
        files = []
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    rel = path.relative_to(folder).as_posix()
                    target = tmp / "series" / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
                    files.append(rel)
        state.saved = Saved(files, legacy.export_journal_exists(project, component), checkout.snapshot(co, co_path, tmp))
        state.save(tmp / project.rebase_state(component).name)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pinned_manifest(project: Project, component: Component, old: str, new: str) -> bytes | None:
    """The manifest's bytes with just the text of *component*'s ``commit:`` value moved from *old* to *new* (checked by parsing); None: done already."""
    path = project.manifest_path(component.model)
    display = f"manifests/{component.model}.yaml"
    data = path.read_bytes()
    lines = data.split(b"\n")
    index = component.commit_line - 1
    line = lines[index] if 0 <= index < len(lines) else b""
    if line.count(new.encode()) == 1 and old.encode() not in line:
        return None  # done already (an interrupted finish)
    if line.count(old.encode()) != 1:
        raise RebaseError(
            f"{display}:{component.commit_line}: expected the pin {old} on this line",
            details=[
                f"the manifest changed during the rebase; set components.{component.key}.commit to {new} by hand and run --continue",
                "or undo the whole rebase with --abort",
            ],
        )
    lines[index] = line.replace(old.encode(), new.encode())
    edited = b"\n".join(lines)
    with tempfile.TemporaryDirectory(prefix="zmr-pin-") as tmp:
        probe = Path(tmp) / path.name
        probe.write_bytes(edited)
        manifest, problems = parse_manifest(probe, project.root)
    if problems or manifest is None or component.key not in manifest.components or manifest.components[component.key].commit != new:
        details = [str(p).replace(str(probe), display) for p in problems] or ["the edited file did not read back; it is unchanged"]
        raise RebaseError(f"{display}: could not update the pin", details=details)
    return edited


def _transaction_name(component: Component) -> str:
    """The transaction that writes the series and the pin of *component* together (zmr.infra.transaction)."""
    return f"rebase/{component.model}/{component.key}"


def _write_result(project: Project, component: Component, old: str, new: str, plan: ExportPlan | None, series_text: bytes | None) -> None:
    """Series (*plan*, or just a new ``series`` text) and the moved pin, written all together or not at all."""
    with transaction.begin(project, _transaction_name(component)) as txn:
        if plan is not None:
            stage_plan(plan, txn)
        elif series_text is not None:
            txn.write(project.root / component.patches / "series", series_text)
        manifest = pinned_manifest(project, _reload(project, component), old, new)
        if manifest is not None:
            txn.write(project.manifest_path(component.model), manifest)


# -- rebase: results -----------------------------------------------------------------------------


@dataclass
class Outcome(Report):
    """A finished rebase: what happened to each patch."""

    component: Component
    old: str
    new: str
    rev: str
    upstream: str
    upstream_count: int
    kept: list[tuple[str, str, str]] = field(default_factory=list)  # (name, subject, note)
    changed: list[ChangedPatch] = field(default_factory=list)
    added: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    path: str = "fast"  # pin-only (nothing to replay) | fast (in memory) | checkout (after conflicts)
    already: bool = False
    report: str | None = None  # where the rebase was asked (at its start) to write its report
    reused: list[str] = field(default_factory=list)  # patches replayed by their recorded resolution (zmr.model.resolutions)
    recorded: list[str] = field(default_factory=list)  # files of resolutions recorded by --continue (commit them)
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried where their patch conflicted, and why not replayed
    recovered: list[str] = field(default_factory=list)  # what this run finished or undid of a zmr killed mid-operation (§7.8.4)

    def to_json(self) -> RebaseDoneJson:
        return {
            "status": "done",
            "model": self.component.model,
            "component": self.component.key,
            "old": self.old,
            "new": self.new,
            "rev": self.rev,
            "path": self.path,
            "kept": [{"name": n, "subject": s, "note": note} for n, s, note in self.kept],
            "changed": [c.to_json() for c in self.changed],
            "added": [{"name": n, "subject": s} for n, s in self.added],
            "dropped": [d.to_json() for d in self.dropped],
            "reused_resolutions": self.reused,
            "recorded_resolutions": self.recorded,
            "unused_resolutions": [u.to_json() for u in self.unused],
            "recovered": self.recovered,
        }


class KeptPatchJson(TypedDict):
    name: str
    subject: str
    note: str


class AddedPatchJson(TypedDict):
    name: str
    subject: str


class RebaseDoneJson(TypedDict):
    """A rebase done: the pin moved from *old* to *new* (*rev* as named), how the series was replayed (*path*: pin-only,
    fast, checkout), the patches kept, changed, added and dropped, the recorded resolutions replayed, recorded and not
    replayed, and what this run finished or undid of a zmr killed mid-operation."""

    status: Literal["done"]
    model: str
    component: str
    old: str
    new: str
    rev: str
    path: str
    kept: list[KeptPatchJson]
    changed: list[ChangedPatchJson]
    added: list[AddedPatchJson]
    dropped: list[DroppedJson]
    reused_resolutions: list[str]
    recorded_resolutions: list[str]
    unused_resolutions: list[NotReplayedJson]
    recovered: list[str]


class RebaseStoppedJson(TypedDict):
    """A rebase halted on a conflict: the patch and its files in conflict, the checkout where to resolve them, the
    commit rebased onto, the patches left to replay after it, and as a done rebase's."""

    status: Literal["stopped"]
    model: str
    component: str
    patch: str
    subject: str
    files: list[str]
    checkout: str
    new: str
    rev: str
    remaining: int
    dropped: list[DroppedJson]
    reused_resolutions: list[str]
    unused_resolutions: list[NotReplayedJson]
    recovered: list[str]
    renamed_from: dict[str, str]


class RebaseAbortedJson(TypedDict):
    """A rebase undone by ``--abort``: pin, series and checkout are as they were before it started."""

    status: Literal["aborted"]
    model: str
    component: str


@dataclass
class Stopped(Report):
    """A rebase halted on a conflict, in the checkout: a failed report (exit 1) until it is continued or aborted."""

    component: Component
    name: str
    subject: str
    files: list[str]
    checkout: str
    new: str
    remaining: int
    dropped: list[Dropped] = field(default_factory=list)
    rev: str = ""
    reused: list[str] = field(default_factory=list)  # patches replayed by their recorded resolution before it stopped
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried (the one of the patch it stopped on too), not replayed
    recovered: list[str] = field(default_factory=list)  # as Outcome's
    renamed: dict[str, str] = field(default_factory=dict)  # a file of *files* upstream renamed since the old pin → its name there

    @property
    def file_names(self) -> list[str]:
        """*files* as the report names them: a renamed one with the name the patch knows it by (``zmr.ops.landed.renamed_files``)."""
        return renamed_files(self.files, self.renamed)

    def failed(self) -> bool:
        return True

    def reason(self) -> str:
        return f"{self.component.label}: patch {self.name} ({self.subject}) conflicts with upstream {self.new[:12]}"

    def to_json(self) -> RebaseStoppedJson:
        return {
            "status": "stopped",
            "model": self.component.model,
            "component": self.component.key,
            "patch": self.name,
            "subject": self.subject,
            "files": self.files,
            "checkout": self.checkout,
            "new": self.new,
            "rev": self.rev,
            "remaining": self.remaining,
            "dropped": [d.to_json() for d in self.dropped],
            "reused_resolutions": self.reused,
            "unused_resolutions": [u.to_json() for u in self.unused],
            "recovered": self.recovered,
            "renamed_from": self.renamed,
        }


# -- rebase: start --------------------------------------------------------------------------------


@locked
def start(
    project: Project,
    component: Component,
    rev: str | None,
    cache: Cache | None = None,
    checkout_dir: Path | None = None,
    progress: Progress | None = None,
    report: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> Outcome | Stopped:
    """Replay the series onto *rev* (None: the component's ``track``); in memory when every patch applies.

    *warn* hears of a move backwards: *rev* an ancestor of the pin (a downgrade).

    *report*: where the report goes (``Outcome.report``); kept in the state
    of a rebase that stops, for the ``--continue`` that finishes it.
    """
    if rev is None:
        if not component.track:
            raise RebaseError(
                f"{component.label}: no upstream revision to rebase onto",
                details=[f"pass --onto REV, or add `track: <branch>` to the component in manifests/{component.model}.yaml"],
            )
        rev = component.track
    return _report_to(_start(project, component, rev, cache, checkout_dir, progress, report, warn), report)


def _report_to(result: Outcome | Stopped, report: Path | None) -> Outcome | Stopped:
    """*result*, its report going to *report* when one is given now (else where the rebase was asked to at its start)."""
    if isinstance(result, Outcome) and report is not None:
        result.report = str(report.absolute())
    return result


def _start(
    project: Project,
    component: Component,
    rev: str,
    cache: Cache | None,
    checkout_dir: Path | None,
    progress: Progress | None,
    report: Path | None,
    warn: Callable[[str], None] | None,
) -> Outcome | Stopped:
    if project.rebase_state(component).is_file():
        raise RebaseError(
            f"{component.label}: a rebase is already in progress",
            details=[f"go on with `zmr rebase {component.model} -c {component.key} --continue`, or undo it with `--abort`"],
        )
    upstream, series = component_inputs(project, component, cache)
    cache = upstream.cache
    old = component.commit
    co_path = checkout.checkout_path(project, component, checkout_dir)
    co = checkout.open_checkout(co_path)
    if co is not None:
        checkout.check_identity(co, component)
        checkout.check_not_half_refreshed(co, component)
        checkout.refuse_during_merge(co, component)
        uncommitted = checkout.dirty(co)
        problems = uncommitted + checkout.sync_state(project, component, co, cache)[1]
        if problems:
            export = f"zmr export {component.model} -c {component.key}"
            # export reads commits and refuses a dirty tree: uncommitted work is committed (or stashed) first.
            todo = f"commit it (git commit) and export it (`{export}`)" if uncommitted else f"export it first (`{export}`)"
            raise RebaseError(
                f"{checkout.show_path(project, co_path)}: the checkout has work that is not in the series",
                details=[*problems, f"{todo}, or discard it (`zmr checkout {component.model} -c {component.key} --force`)"],
            )
    if progress:
        progress(f"{component.label}: fetching {rev}")
    upstream.ensure([old])
    repo, new = resolve_rev(upstream, rev)
    if new == old:
        return Outcome(component, old, new, rev, component.upstream, 0, already=True)
    if warn is not None and repo.is_ancestor(new, old):
        behind = repo.count(old, exclude=[new])
        warn(f"{component.label}: {rev} ({new[:12]}) is an ancestor of the pin {old[:12]}: this moves the pin back {counted(behind, 'commit')} (a downgrade)")
    if progress:
        progress(f"{component.label}: replaying {counted(len(series.patches), 'patch')} on {new[:12]}")
    files = patch_file_sets(repo, series.patches)
    if co is None and files_stand(repo, series, old, new, files):
        return _pin_only(project, component, repo, series, old, new, rev)
    old_chain = build_chain(repo, component, old, series.patches, files, progress=progress)
    chain_files = file_sets(repo, old_chain)
    paths = sorted(set().union(*chain_files.values()))
    upstream_ids = upstream_patch_ids(repo, old, new, paths, set(chain_files.values()))
    # No upstream commit changes the same files as a patch: nothing can have landed, no ids to compare.
    pids = chain_patch_ids(repo, old_chain) if upstream_ids else {}
    hits = [upstream_ids.get(pids.get(commit, "")) for commit in old_chain]  # the upstream commit with each patch's patch id
    if co is None and not any(hits) and series_applies(repo, new, series.patches, paths, in_place=True):
        # Every hunk applies where it was: a replay would commit these patches and export the same bytes.
        return _pin_only(project, component, repo, series, old, new, rev)
    memory = replay_onto(repo, old, new, series.patches, old_chain, chain_files, hits, resolved=functools.partial(resolutions.recorded, project.root))
    conflict_at = memory.conflict_at
    state = RebaseState(
        model=component.model,
        component=component.key,
        old=old,
        new=new,
        rev=rev,
        url=upstream.url,
        old_chain=old_chain,
        names=[p.name for p in series.patches],
        subjects=[p.subject for p in series.patches],
        upstream_count=repo.count(new, exclude=[old]),
        phase="finalize",
        path="fast",
        dropped=memory.dropped,
        report=str(report.absolute()) if report is not None else None,
        reused=list(memory.reused),
        unused=list(memory.unused),
    )
    if conflict_at is None:
        state.new_tip, state.replayed = memory.tip, memory.replayed
        _snapshot(project, component, state, co, co_path)
        return _finalize(project, component, state, cache, progress)
    # The patches after the conflict are cherry-picked: one that upstream holds picks empty and is dropped then.
    state.phase, state.path, state.partial = "picking", "checkout", memory.tip
    state.remaining = list(range(conflict_at, len(series.patches)))
    _snapshot(project, component, state, co, co_path)
    return _run(project, component, state, cache, progress)


def _pin_only(project: Project, component: Component, repo: git.Repo, series: Series, old: str, new: str, rev: str) -> Outcome:
    transaction.finish_interrupted(project, _transaction_name(component))
    _write_result(project, component, old, new, None, _header_with_pin(_series_bytes(series.folder), old, new))
    count = repo.count(new, exclude=[old])
    kept = [(p.name, p.subject, "") for p in series.patches]
    return Outcome(component, old, new, rev, component.upstream, count, kept=kept, path="pin-only")


def _prepare(project: Project, component: Component, state: RebaseState, cache: Cache) -> Checkout:
    """The checkout at the new pin with the patches replayed so far; the old commits fetched for cherry-pick."""
    assert state.partial is not None
    mirror = cache.mirror_for(state.url)
    extra = [state.old_chain[-1]] if state.old_chain else []
    assert state.saved is not None
    co = checkout.place(project, component, state.saved.checkout, mirror.path, state.new, state.partial, extra_objects=extra)
    state.prepared = True
    _save(project, component, state)
    return co


def _run(project: Project, component: Component, state: RebaseState, cache: Cache, progress: Progress | None) -> Outcome | Stopped:
    co = state.open_checkout() if state.prepared else None
    if co is None or co.half_refreshed:
        if progress:
            progress(f"{component.label}: preparing the checkout for conflict resolution")
        co = _prepare(project, component, state, cache)
    while state.remaining:
        index = state.remaining[0]
        commit = state.old_chain[index]
        if progress:
            progress(f"{component.label}: cherry-picking {state.names[index]}")
        state.stopped = StoppedAt(index, co.head())
        _save(project, component, state)
        picked = co.cherry_pick(commit)
        if picked.status == "conflict":
            # Back to HEAD (a kill now leaves the pick to run again) while zmr asks whether the checkout holds its change already.
            co.skip_pick()
            landed = _landed_here(project, component, state, cache, co)
            if landed is not None:  # upstream's, not a conflict for the engineer
                state.remaining.pop(0)
                state.dropped.append(landed)
                state.stopped = None
                _save(project, component, state)
                continue
            picked = co.cherry_pick(commit)  # not there: the conflict again, for the engineer (or its recorded resolution)
        if picked.status == "conflict" and _replay_recorded(project, component, state, cache, co, index):
            picked = PickResult("picked")
        if picked.status == "picked":
            state.remaining.pop(0)
            state.unused = [u for u in state.unused if u.patch != state.names[index]]  # it went in: a resolution that did not is beside the point
            state.stopped = None
            _save(project, component, state)
            continue
        if picked.status == "conflict":
            files = picked.files
            state.stopped.conflict, state.stopped.files = True, files
            _save(project, component, state)
            stopped = Stopped(
                component,
                state.names[index],
                state.subjects[index],
                files,
                checkout.show_path(project, co.path),
                state.new,
                len(state.remaining) - 1,
                list(state.dropped),
                state.rev,
                list(state.reused),
                list(state.unused),
            )
            renames = renamed_since(cache.mirror_for(state.url).repo, state.old, state.new)
            stopped.renamed = {new: old for old, new in renames.items() if new in files}
            return stopped
        if picked.status == "empty":
            co.skip_pick()
            _drop_current(project, component, state, cache, "empty")
            continue
        raise RebaseError(
            f"{component.label}: cherry-pick of {state.names[index]} failed in {co.path}",
            details=[*picked.error[-6:], f"fix the checkout, then `zmr rebase {component.model} -c {component.key} --continue` (or --abort)"],
        )
    return _finalize(project, component, state, cache, progress)


def _replay_recorded(project: Project, component: Component, state: RebaseState, cache: Cache, co: Checkout, index: int) -> bool:
    """The cherry-pick of patch *index* conflicts: replay its recorded resolution (``zmr.model.resolutions``) in the checkout in its
    place, as the in-memory pass does. True: committed (message and author of the patch); False: the conflict is back as git
    left it (the resolution, when there is one, is in ``state.unused`` with why)."""
    patch = _old_patch(project, component, state, index)
    if patch is None:
        return False
    commit = state.old_chain[index]

    def replay(alternative: Patch) -> str | None:
        co.reset_hard_to_head()
        co.quit_pick()
        if not co.apply_to_index(alternative.data):
            reason = "does not apply where the patch conflicts (the new upstream with the patches before it)"
        elif co.index_matches_head():
            reason = "changes nothing there"
        else:
            co.commit_as(commit)
            return None
        co.reset_hard_to_head()
        co.cherry_pick(commit)  # the conflict back, for the engineer
        return reason

    # A resolution recorded before upstream renamed its files: tried at their new names too.
    renames = functools.partial(renamed_since, cache.mirror_for(state.url).repo, state.old, state.new)
    return resolutions.try_recorded(functools.partial(resolutions.recorded, project.root), patch, replay, state.reused, state.unused, renames)


def _landed_here(project: Project, component: Component, state: RebaseState, cache: Cache, co: Checkout) -> Dropped | None:
    """The patch whose pick stopped, when its change is in the checkout's HEAD already (``zmr.ops.landed``): its entry as dropped."""
    index = state.remaining[0]
    head = co.head()
    patch = _old_patch(project, component, state, index)
    if head is None or patch is None:
        return None
    repo = cache.mirror_for(state.url).repo
    chain_files = file_sets(repo, [state.old_chain[index]])
    change = step_change(repo, state.old, state.old_chain, chain_files, index)
    declared, named = declared_commit(repo, patch, state.new)
    answer = judge("failed", lambda: False, change, following_renames(repo, state.old, state.new, blob_reader(co.repo, head)), declared, named)
    if not answer.landed:
        return None
    drop = dropped_for(repo, patch, answer, None)
    name_landing(repo, state.old, state.new, drop, change, sorted(chain_files[state.old_chain[index]]))
    return drop


def _drop_current(project: Project, component: Component, state: RebaseState, cache: Cache, method: str) -> None:
    index = state.remaining.pop(0)
    repo = cache.mirror_for(state.url).repo
    drop = Dropped(state.names[index], state.subjects[index], method)
    if method in ("empty", "resolved-empty"):
        commit = state.old_chain[index]
        chain_files = file_sets(repo, [commit])
        change = step_change(repo, state.old, state.old_chain, chain_files, index)
        patch = _old_patch(project, component, state, index) if method == "empty" else None
        if patch is not None:  # upstream's: ``empty``, or ``backport`` naming the commit it declares (``zmr.ops.landed``)
            drop = dropped_for(repo, patch, picked_empty(repo, patch, change, state.new), None)
        name_landing(repo, state.old, state.new, drop, change, sorted(chain_files[commit]))
    state.dropped.append(drop)
    state.stopped = None
    _save(project, component, state)


def _old_patch(project: Project, component: Component, state: RebaseState, index: int) -> Patch | None:
    """The patch as it was before the rebase (from the saved copy of the series)."""
    from zmr.model.series import load_patch

    name = state.names[index]
    path = project.rebase_dir(component) / "series" / name
    if not path.is_file():
        return None
    saved_series = project.rebase_dir(component) / "series" / "series"
    series_text = saved_series.read_text() if saved_series.is_file() else ""
    strip = 1
    for line in series_text.splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0] == name:
            strip = next((int(w[2:]) for w in words[1:] if re.fullmatch(r"-p\d+", w)), 1)
    return load_patch(path, name, strip, name)


# -- rebase: continue and abort --------------------------------------------------------------------


@locked
def resume(
    project: Project, component: Component, cache: Cache | None = None, progress: Progress | None = None, report: Path | None = None
) -> Outcome | Stopped:
    """``--continue``: take the engineer's resolution, replay the rest, finish; *report*: where the report goes, instead of the one named at the start."""
    return _report_to(_resume(project, component, cache or Cache(), progress), report)


def _resume(project: Project, component: Component, cache: Cache, progress: Progress | None) -> Outcome | Stopped:
    state = _load(project, component)
    stopped = state.stopped
    recovered = _stale_locks(project, state)
    if state.phase == "finalize":
        result: Outcome | Stopped = _finalize(project, component, state, cache, progress)
        result.recovered = recovered + result.recovered
        return result
    if stopped and state.prepared:
        co = state.open_checkout()
        if co is None:
            raise RebaseError(
                f"{state.checkout_path}: the checkout of the rebase is gone",
                details=[f"undo the rebase with `zmr rebase {component.model} -c {component.key} --abort`"],
            )
        commit = state.old_chain[stopped.index]
        where = checkout.show_path(project, co.path)
        if not stopped.conflict:
            recovered += _own_pick(co, stopped, commit, f"{state.names[stopped.index]} in {where}")
        if co.pick_in_progress():
            files = co.unmerged_paths()
            if files:
                raise RebaseError(
                    f"{where}: conflicts in {', '.join(files)} are not resolved yet",
                    details=["edit the files, `git add` them, then run --continue again"],
                )
            marked = co.conflict_marked(stopped.files)
            if marked:
                raise RebaseError(
                    f"{where}: conflict markers left in {', '.join(marked)}", details=["remove them, `git add` the files, then run --continue again"]
                )
            unstaged = co.unstaged_paths()
            if unstaged:
                raise RebaseError(
                    f"{where}: changes not staged in {', '.join(unstaged)}",
                    details=["`git add` them (or `git checkout -- FILE` to drop them), then run --continue again"],
                )
            if co.index_matches_head():
                co.skip_pick()
                _drop_current(project, component, state, cache, "resolved-empty")
            else:
                co.commit_as(commit)
                _record_resolution(project, component, state, co)
                state.remaining.pop(0)
                state.stopped = None
                _save(project, component, state)
        elif checkout.dirty(co, untracked_files=False):
            raise RebaseError(
                f"{where}: the working tree is not clean",
                details=[*checkout.dirty(co, untracked_files=False), "commit or drop those changes, then run --continue again"],
            )
        elif co.head() != stopped.head_before:
            if stopped.conflict:  # the engineer committed the resolution (git cherry-pick --continue / git commit)
                _record_resolution(project, component, state, co)
            # else: zmr's own cherry-pick went through and zmr was killed before it saved so: nothing to record
            state.remaining.pop(0)
            state.stopped = None
            _save(project, component, state)
        elif stopped.conflict:
            # The conflict is gone and nothing was committed (git cherry-pick --abort, --skip, reset --hard):
            # the patch is neither resolved nor proven upstream, so it is not dropped without being asked.
            m, k = component.model, component.key
            raise RebaseError(
                f"{where}: the cherry-pick of {state.names[stopped.index]} is no longer in progress and nothing was committed",
                details=[
                    "was it undone (`git cherry-pick --abort`)? zmr drops a patch only when upstream has it, or when told to",
                    f"redo it: `git cherry-pick {commit}` there, resolve, `git add` the files, then `zmr rebase {m} -c {k} --continue`",
                    f"or drop the patch from the series: `zmr rebase {m} -c {k} --skip`",
                    f"or undo the whole rebase: `zmr rebase {m} -c {k} --abort`",
                ],
            )
        # else: interrupted before the cherry-pick ran (or its half was undone above): it runs again below.
    result = _run(project, component, state, cache, progress)
    result.recovered = recovered + result.recovered
    return result


def _stale_locks(project: Project, state: RebaseState) -> list[str]:
    """A zmr killed while its git wrote in the rebase's checkout (never handed to the engineer: no conflict stopped there)
    leaves git's lock files, which every later git command there refuses on: removed, and said."""
    if state.saved is None or (state.stopped is not None and state.stopped.conflict):
        return []
    co = state.open_checkout()
    if co is None:
        return []
    return checkout.clear_stale_locks(project, co)


def _own_pick(co: Checkout, stopped: StoppedAt, commit: str, what: str) -> list[str]:
    """What zmr's own cherry-pick of *commit*, killed while git ran it (*stopped* names it: no conflict was handed over), left
    in *co* (its lock files removed already: ``_stale_locks``): finished (committed, its state left: forgotten) or undone
    (HEAD is still *stopped.head_before*: the half-written index and files put back), as lines saying which; [] when it left
    nothing. What it cannot have written, a change to a file the pick does not touch, is the user's: left alone, for the
    checks after this to refuse with.
    """
    from zmr.ops.replay import file_sets

    if co.head() != stopped.head_before:
        if not co.pick_in_progress():
            return []
        co.quit_pick()  # committed: only git's own note of the pick is left (no commit of the engineer's: none was asked for)
        return [f"finished now: zmr's interrupted cherry-pick of {what} (committed; git's note of it removed)"]
    touched = file_sets(co.repo, [commit])[commit]
    left = co.pick_leftovers()
    if not left.any:
        return []
    if not set(left.paths) <= touched:
        return []  # something the pick does not write: the user's (refused below, nothing undone)
    co.undo_pick(stopped.head_before or "HEAD", [p for p in left.untracked if p in touched])
    return [f"undone now: zmr's interrupted cherry-pick of {what} (its half-written files put back: {', '.join(sorted(left.paths)) or 'none'}); it ran again"]


def _record_resolution(project: Project, component: Component, state: RebaseState, co: Checkout) -> None:
    """Keep the engineer's resolution of the patch the rebase stopped on (its commit, HEAD now) in ``resolutions/`` (zmr.model.resolutions)."""
    assert state.stopped is not None
    old = _old_patch(project, component, state, state.stopped.index)
    head = co.head()
    if old is None or head is None:
        return
    diff = co.repo.diff_patch(head, [])
    if diff.strip():
        rel = resolutions.file_of(old)
        target = project.no_links(rel, "recorded resolutions")  # (before anything is written: a link is refused)
        saved = project.rebase_dir(component) / RESOLUTIONS_SAVED / Path(rel).name
        if rel not in state.recorded:
            # What --abort puts back: the file as it was before this rebase (a copy), or no file (none saved). Noted in the
            # state before the file is written, so a kill in between leaves --abort knowing of it.
            if target.is_file() and not saved.exists():
                saved.parent.mkdir(exist_ok=True)
                atomic_write(saved, target.read_bytes())
            state.recorded.append(rel)
            _save(project, component, state)
        resolutions.record(project, old, diff[diff.find(b"diff --git ") :] if b"diff --git " in diff else diff)


@locked
def skip(project: Project, component: Component, cache: Cache | None = None, progress: Progress | None = None, report: Path | None = None) -> Outcome | Stopped:
    """``--skip``: drop the patch the rebase stopped on from the series (as ``git rebase --skip``), then go on (*report*: as ``resume``)."""
    return _report_to(_skip(project, component, cache or Cache(), progress), report)


def _skip(project: Project, component: Component, cache: Cache, progress: Progress | None) -> Outcome | Stopped:
    state = _load(project, component)
    stopped = state.stopped
    if state.phase == "finalize" or (state.phase == "picking" and stopped is not None and not stopped.conflict):
        # Not stopped for the engineer: a run (this --skip's, killed after its skip) was cut short between cherry-picks or while
        # writing its result. Skipping now would drop a patch nobody asked to drop: go on as --continue does.
        return _resume(project, component, cache, progress)
    if state.phase != "picking" or stopped is None or not state.prepared or not state.remaining or state.remaining[0] != stopped.index:
        raise RebaseError(
            f"{component.label}: the rebase is not stopped on a patch; nothing to skip",
            details=[f"go on with `zmr rebase {component.model} -c {component.key} --continue`"],
        )
    co = state.open_checkout()
    if co is None:
        raise RebaseError(
            f"{state.checkout_path}: the checkout of the rebase is gone",
            details=[f"undo the rebase with `zmr rebase {component.model} -c {component.key} --abort`"],
        )
    if stopped.head_before is not None and co.head() != stopped.head_before:
        raise RebaseError(
            f"{checkout.show_path(project, co.path)}: {state.names[stopped.index]} is committed already (HEAD moved)",
            details=[
                f"keep it: `zmr rebase {component.model} -c {component.key} --continue`",
                f"or skip it: `git reset --hard {stopped.head_before[:12]}` there first",
            ],
        )
    co.reset_hard_to_head()
    co.quit_pick()
    _drop_current(project, component, state, cache, "skipped")
    return _run(project, component, state, cache, progress)


def _under_link(folder: Path, path: Path) -> bool:
    """Whether a folder between *folder* and *path* is a symbolic link (rglob does not follow them, but stay careful)."""
    return any(parent.is_symlink() for parent in path.parents if folder in parent.parents)


@dataclass
class Aborted(Report):
    """A rebase undone by ``--abort``: pin, series and checkout are as they were before it started."""

    component: Component

    def to_json(self) -> RebaseAbortedJson:
        return {"status": "aborted", "model": self.component.model, "component": self.component.key}


@locked
def abort(project: Project, component: Component) -> Aborted:
    """Put pin, series and checkout back exactly as they were before the rebase started.

    The lock files that zmr's own git, killed in the checkout, left there are
    removed first and said (``Project.notices``): a Ctrl-C or a hang-up of the
    whole process group kills that git as it interrupts zmr, and the undo's own
    git would stop on them (never where a conflict handed the checkout to the
    engineer: ``_stale_locks``).
    """
    state = _load(project, component)
    project.notices.extend(_stale_locks(project, state))
    folder = project.rebase_dir(component)
    saved = state.saved
    assert saved is not None
    # The series folder (saved files back, files the rebase added removed) and the manifest, in one transaction: a kill
    # leaves them all as the rebase made them or all as they were, and the journal says which (the next command
    # finishes or undoes it); the state folder stays until the end, so `--abort` run again does the rest.
    with transaction.begin(project, _transaction_name(component)) as txn:  # an interrupted one of the rebase's finished first
        series_folder = project.series_folder(component)
        saved_files = set(saved.series_files)
        if series_folder.is_dir():
            for path in sorted(series_folder.rglob("*"), reverse=True):
                rel = path.relative_to(series_folder).as_posix()
                is_ours = path.is_file() and not path.is_symlink() and not _under_link(series_folder, path)
                if is_ours and rel not in saved_files and (path.suffix in (".patch", ".diff") or path.name == "series"):
                    txn.remove(path)
        for rel in sorted(saved_files):
            data = (folder / "series" / rel).read_bytes()
            target = project.no_links(f"{component.patches}/{rel}", "a series folder")
            if not target.is_file() or target.read_bytes() != data:
                txn.write(target, data)
        manifest = project.manifest_path(component.model)
        original = (folder / "manifest.orig").read_bytes()
        if manifest.read_bytes() != original:
            txn.write(manifest, original)
        _forget_recorded(project, state, folder, txn)
    # zmr's own state (outside the repository, so outside the journal): what an older zmr's interrupted export left.
    legacy.abort_export_journal(project, component, saved.journal_existed)
    if not checkout.restore(saved.checkout, folder):
        raise RebaseError(
            f"{saved.checkout.path}: the checkout is gone, or is not the one this rebase saved (its zmr.token differs); nothing restored there",
            details=["the manifest and the series are back as they were", f"delete {folder} to forget the rebase"],
        )
    _forget(project, component)
    return Aborted(component)


def _forget_recorded(project: Project, state: RebaseState, folder: Path, txn: transaction.Transaction) -> None:
    """The resolutions ``--continue`` recorded during the rebase, back as they were before it (in *txn*): a file it
    replaced gets its saved copy back, one it made goes. Each path read from the state is checked first (a resolution's
    name, no link on the way); a file that is not a regular one is left alone."""
    for rel in state.recorded:
        if not resolutions.FILE_RE.fullmatch(rel):
            continue  # not a name zmr gives a resolution: not one it wrote
        target = project.no_links(rel, "recorded resolutions")
        saved = folder / RESOLUTIONS_SAVED / Path(rel).name
        if saved.is_file():
            data = saved.read_bytes()
            if not target.is_file() or target.read_bytes() != data:
                txn.write(target, data)
        elif target.is_file() and not target.is_symlink():
            txn.remove(target)


# -- rebase: finish -------------------------------------------------------------------------------


def _finalize(project: Project, component: Component, state: RebaseState, cache: Cache, progress: Progress | None) -> Outcome:
    """Export the result into the series, move the pin, move the checkout, report."""
    if state.phase != "finalize":
        state.phase = "finalize"
        _save(project, component, state)
    old, new = state.old, state.new
    mirror = cache.mirror_for(state.url)
    folder = project.series_folder(component)
    owned = legacy.export_journal_names(project, component)  # an older zmr's interrupted export, still honoured (zmr.ops.legacy)
    transaction.finish_interrupted(project, _transaction_name(component))  # before planning: the plan reads the series folder
    if progress:
        progress(f"{component.label}: writing the series")
    if state.path == "fast":
        repo = mirror.repo
        tip = state.new_tip
        assert tip is not None
        made = [commit for commit, _, _ in state.replayed]
        # The replay's own list, when it has one (a walk of new..tip can take long on a big history).
        commits = made if made and made[-1] == tip else repo.commits_between(new, tip)
        # A moved flag of None: git's report could not say; export replays that patch itself.
        replayed = {commit: (name, moved) for commit, name, moved in state.replayed if moved is not None}
        plan = plan_export(repo, new, commits, folder, component.patches, owned, replayed)
    else:
        co = state.open_checkout()
        if co is None:
            raise RebaseError(
                f"{state.checkout_path}: the checkout of the rebase is gone",
                details=[f"undo the rebase with `zmr rebase {component.model} -c {component.key} --abort`"],
            )
        problems = checkout.dirty(co, untracked_files=False)
        if problems:
            raise RebaseError(
                f"{co.path}: the working tree is not clean",
                details=[*problems, f"commit or drop the changes, then `zmr rebase {component.model} -c {component.key} --continue`"],
            )
        repo = co.repo  # read only: the commits to export and compare
        tip = co.head() or new
        if not co.repo.is_ancestor(new, tip):
            raise RebaseError(f"{co.path}: HEAD is not on top of the new pin {new[:12]}", details=["reset the branch onto it, or --abort"])
        commits = list_commits(repo, new, tip, component.label)
        plan = plan_export(repo, new, commits, folder, component.patches, owned)
    header = _header_with_pin(plan.series_text if plan.series_text is not None else _series_bytes(folder), old, new)
    if header is not None:
        plan.series_text = header
    _write_result(project, component, old, new, plan if plan.needs_writing else None, None)
    if owned is not None:
        legacy.forget_export_journal(project, component)  # the leftovers of an interrupted export it listed are gone with this write
    outcome = _outcome(component, state, repo, tip, plan)
    outcome.report = state.report
    co = state.open_checkout()
    if co is not None:
        if state.path == "fast":
            assert state.saved is not None
            checkout.place(project, component, state.saved.checkout, mirror.path, new, tip)
        else:
            checkout.mark_rebased(co, new, tip, checkout.series_fingerprint(project, component, new))
    _forget(project, component)
    return outcome


def _forget(project: Project, component: Component) -> None:
    """The rebase's state removed, and its model's folder with it when no other rebase of the model is under way."""
    folder = project.rebase_dir(component)
    shutil.rmtree(folder)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()


def _series_bytes(folder: Path) -> bytes | None:
    path = folder / "series"
    return path.read_bytes() if path.is_file() else None


def _header_with_pin(text: bytes | None, old: str, new: str) -> bytes | None:
    """*text* (a ``series`` file) with the old pin replaced by the new one in its comment lines (``zmr new`` names it there); None: no change."""
    if text is None:
        return None
    lines = text.split(b"\n")
    changed = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(b"#") and old[:12].encode() in line:
            lines[i] = line.replace(old.encode(), new.encode()).replace(old[:12].encode(), new[:12].encode())
            changed = True
    return b"\n".join(lines) if changed else None


def _reload(project: Project, component: Component) -> Component:
    manifest, problems = parse_manifest(project.manifest_path(component.model), project.root)
    if manifest is None or component.key not in manifest.components:
        raise RebaseError(f"manifests/{component.model}.yaml: no longer valid", details=[str(p) for p in problems] + ["fix it, then run --continue again"])
    return manifest.components[component.key]


def _outcome(component: Component, state: RebaseState, repo: git.Repo, tip: str, plan: ExportPlan) -> Outcome:
    old, new = state.old, state.new
    old_chain = state.old_chain
    dropped = list(state.dropped)
    dropped_names = {d.name for d in dropped}
    outcome = Outcome(component, old, new, state.rev, component.upstream, state.upstream_count, dropped=dropped, path=state.path)
    outcome.reused, outcome.recorded, outcome.unused = list(state.reused), list(state.recorded), list(state.unused)
    by_subject: dict[str, tuple[str, str]] = {}
    for name, subject, commit in zip(state.names, state.subjects, old_chain):
        if name not in dropped_names:
            by_subject.setdefault(subject, (name, commit))
    if state.path == "fast" and all(item.status in ("unchanged", "refreshed") for item in plan.patches):
        # Each commit is a patch of the series that applied as it is (git apply never fuzzes): the same change.
        same = {item.commit for item in plan.patches}
    else:
        old_ids = chain_patch_ids(repo, old_chain)
        new_ids = patch_ids(repo, [p.commit for p in plan.patches])
        old_by_pid = {old_ids.get(c): n for n, c in zip(state.names, old_chain) if old_ids.get(c)}
        same = {item.commit for item in plan.patches if new_ids.get(item.commit) in old_by_pid}
    differ = [j for j, item in enumerate(plan.patches) if item.commit not in same] if old_chain else []
    new_chain = [item.commit for item in plan.patches]
    old_name_of = {item.old_name: j for j, item in enumerate(plan.patches) if item.old_name}
    known = [(i, old_name_of[name]) for i, name in enumerate(state.names) if name in old_name_of]
    pairs = changed_patches(repo, old, old_chain, state.names, new, new_chain, [item.name for item in plan.patches], differ, known=known)
    for j, item in enumerate(plan.patches):
        pair = pairs.get(j)
        if item.commit in same:
            note = "refreshed: same change, new line numbers" if item.data is not None else ""
            outcome.kept.append((item.name, item.subject, note))
        elif (pair is not None and pair.old is not None) or item.old_name or item.subject in by_subject:
            block = pair.interdiff or pair.line() if pair is not None else ""
            outcome.changed.append(ChangedPatch(item.name, item.subject, block, pair.kind if pair else None, pair.by if pair else None))
        else:
            outcome.added.append((item.name, item.subject))
    return outcome
