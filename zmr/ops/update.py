"""``zmr update``: move every pin as far as its series allows, and say exactly what blocks the rest.

Pipeline, per component with a ``track`` (or ``--onto REV``)::

    REV ──upstream.resolve_rev (Cache.fetch_ref, history)──▶ tip
    pin..tip, first parent, descendants of the pin only (upstream.first_parent_line) ──▶ c1 .. cN (cN = tip; c0 = the pin)
    good(c): the series replays onto c as ``zmr rebase`` would finish it without stopping:
        upstream.replay_onto (in memory: patches upstream holds dropped, ``zmr.ops.landed``'s answer);
        from the first patch that does not apply, ``replay.trial_pick``: each remaining commit of the
        series merged as the rebase's cherry-picks merge it (``git.Repo.pick_tree``: renames followed), in objects only;
        a pick that conflicts but whose change is there (``zmr.ops.landed``) is dropped; any other conflict is the blocking patch
        (a patch that conflicts is first replayed by its recorded resolution, ``zmr.model.resolutions``, when there is one)
    good(tip) ──▶ clean;  else binary search on c0..cN
    with a check (--test/--smoke/--bitwise, ``zmr.ops.checks``): among c1..c_lo, the newest where it passes in
        the release's tree (``search_checked``: c_lo, the pin, then ``checks.bisect_line`` with skips;
        each result kept in zmr's state, ``CheckedLine``) ──▶ the target
    each patch's upstream status (``zmr.model.upstream_status``) checked against history (``check_statuses``)
    --apply: ``rebase.start(target)`` for each component that can move and holds no work

The search keeps the invariant good(c_lo) and not good(c_hi), starting from
lo = 0 (the series applies to its pin: its commits are built there) and
hi = N, and halves hi - lo until they are neighbours: about log2(N)
replays. It returns c_lo, the last good commit found, as the *target*, and
c_hi, its first-parent successor, as the commit that blocks (with the patch
that conflicts there and the files in conflict). When good is monotone on
the line (once a commit breaks the series, every later one does) c_lo is
the newest commit the series replays onto; when it is not (upstream broke
the series, then repaired it), c_lo is still a commit onto which the series
replays and c_hi one onto which it does not, right after it.

Only ``zmr.ops.rebase`` writes anything (``start``, with ``--apply``); the rest is read-only
but for the mirror (fetched history, the series' commits on the pin, kept
patch ids) and a check's results in zmr's state (``zmr.ops.checks.Results``).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache as memoize
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

from zmr.infra import git, transaction
from zmr.infra.cache import Cache
from zmr.infra.errors import ZmrError
from zmr.infra.git import Progress
from zmr.infra.lock import hold
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.infra.reports import Report
from zmr.model.project import Project
from zmr.model.resolutions import NotReplayed, Recorded, recorded, NotReplayedJson
from zmr.model.series import Patch
from zmr.model.upstream_status import UpstreamStatus, status_of, UpstreamStatusJson
from zmr.ops import checkout
from zmr.ops.checks import BAD, GOOD, SKIP, Check, LineSearch, Results, Tried, bisect_line, run_check, CheckJson, TriedJson
from zmr.ops.landed import (
    NOT_LANDED,
    Answer,
    Change,
    Dropped,
    DroppedJson,
    Landing,
    LandingJson,
    blob_reader,
    declared_commit,
    following_renames,
    judge,
    naming,
    partial_landing,
    picked_empty,
    renamed_files,
    renamed_since,
)
from zmr.ops.rebase import Outcome, Stopped, abort, finishing_onto, resume, start
from zmr.ops.replay import build_chain, chain_patch_ids, file_sets, files_unchanged, patch_file_sets, patch_ids, trial_pick
from zmr.ops.upstream import (
    ChangedPatch,
    ChangedPatchJson,
    changed_patches,
    commit_subject,
    dropped_for,
    first_parent_line,
    name_landing,
    replay_onto,
    resolve_rev,
    step_change,
    upstream_commits,
    upstream_patch_ids,
)

UP_TO_DATE, CLEAN, PARTIAL, BLOCKED = "up-to-date", "clean", "partial", "blocked"
REPLAY_RULE = "landed-5"  # in the key of a kept replay (``CheckedLine``): a new rule for "upstream has it" (or for the picks) replays again


class UpdateError(ZmrError):
    """``zmr update`` cannot look at a component."""


class BlockedByJson(TypedDict):
    """The first commit onto which the series no longer replays, the series' patch that conflicts there and its author,
    and the part of that patch's change already at the commit (null: none)."""

    commit: str
    patch: str
    files: list[str]
    author_name: str
    author_email: str
    partially_landed: LandingJson | None
    renamed_from: dict[str, str]


class CheckSearchJson(TypedDict):
    """What ``--test``/``--smoke``/``--bitwise`` found: the newest commit where the check passes, the first where it fails
    after it (null: none), the commits skipped between them, every answer, the checks run now and the answers kept from
    earlier runs, and the check's answer at the pin when it fails there (null otherwise)."""

    check: CheckJson
    newest_good: str
    first_bad: TriedJson | None
    skipped: list[str]
    tried: list[TriedJson]
    tests: int
    cached: int
    fails_at_pin: TriedJson | None


class UpdateComponentJson(TypedDict):
    """One component: its status, pin, the commit the pin can move to (*target*), the tracked *tip* and *rev*, the commits
    behind, what a move drops, what blocks it (null: nothing), the patches it changes, whether ``--apply`` moved it and,
    when not, why (*refused*)."""

    model: str
    component: str
    status: str
    pin: str
    target: str
    tip: str
    behind: int
    dropped: list[DroppedJson]
    blocked_by: BlockedByJson | None
    changed: list[ChangedPatchJson]
    rev: str
    steps: int
    replays: int
    applied: bool
    refused: str | None
    check: CheckSearchJson | None
    partially_landed: dict[str, LandingJson]
    upstream_status: dict[str, UpstreamStatusJson]
    droppable: dict[str, str]
    reused_resolutions: list[str]
    unused_resolutions: list[NotReplayedJson]


class UpdateJson(TypedDict):
    """What ``zmr update`` found (and, with ``--apply``, did): one entry per component, in the order examined."""

    components: list[UpdateComponentJson]


@dataclass
class BlockedBy:
    """The first commit onto which the series no longer replays, and the patch that conflicts there."""

    commit: str
    subject: str
    patch: str
    patch_subject: str
    files: list[str]
    author_name: str = ""  # the blocking patch's author (the scheduled job mentions them)
    author_email: str = ""
    landing: Landing | None = None  # the part of the blocking patch's change already at *commit* (``zmr.ops.landed``), if any
    renamed: dict[str, str] = field(default_factory=dict)  # a file of *files* upstream renamed since the pin → its name at the pin

    @property
    def file_names(self) -> list[str]:
        """*files* as the report names them: a renamed one with the name the patch knows it by."""
        return renamed_files(self.files, self.renamed)

    def to_json(self) -> BlockedByJson:
        # the keys of `zmr update --json` (docs/reference.md §7.19)
        return {
            "commit": self.commit,
            "patch": self.patch,
            "files": self.files,
            "author_name": self.author_name,
            "author_email": self.author_email,
            "partially_landed": self.landing.to_json() if self.landing else None,
            "renamed_from": self.renamed,
        }


@dataclass
class Trial:
    """The series replayed onto *commit* (``good``): *ok*, or the patch at *conflict* does not go in.

    *made*: (commit, patch index) of each commit of the replay, in order; empty
    when the series' files are unchanged since the pin (nothing to replay).
    *tip*: the last of them (*commit* when none). *merged*: the patches that
    went in by a 3-way merge (their change may differ from the old one).
    """

    commit: str
    ok: bool
    dropped: list[Dropped]
    tip: str
    made: list[tuple[str, int]] = field(default_factory=list)
    merged: set[int] = field(default_factory=set)
    conflict: int | None = None
    files: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)  # patches that went in by their recorded resolution
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried where their patch conflicted, not replayed

    def to_json(self) -> dict[str, Any]:
        return {
            "reused": self.reused,
            "unused": [u.to_json() for u in self.unused],
            "commit": self.commit,
            "ok": self.ok,
            "dropped": [d.to_json() for d in self.dropped],
            "tip": self.tip,
            "made": [list(m) for m in self.made],
            "merged": sorted(self.merged),
            "conflict": self.conflict,
            "files": self.files,
        }


@dataclass
class Update:
    """What ``zmr update`` found (and, with ``--apply``, did) for one component.

    *target*: the commit the pin can move to (the pin itself when up to date
    or blocked); *tip*: the tracked tip; *behind*: first-parent commits from
    the pin to the tip; *steps*: from the pin to the target; *replays*: the
    commits the series was replayed onto to find out.
    """

    component: Component
    rev: str
    status: str
    pin: str
    target: str
    tip: str
    behind: int
    steps: int = 0
    replays: int = 0
    dropped: list[Dropped] = field(default_factory=list)
    blocked_by: BlockedBy | None = None
    changed: list[ChangedPatch] = field(default_factory=list)
    applied: bool = False
    refused: str | None = None  # why --apply left the component alone
    outcome: Outcome | None = None
    check: CheckSearch | None = None  # --test / --smoke / --bitwise: the search for the newest commit where the check passes
    partial: dict[str, Landing] = field(default_factory=dict)  # patches kept at the target whose change it holds in part
    statuses: dict[str, UpstreamStatus] = field(default_factory=dict)  # each patch's declared upstream status (zmr.model.upstream_status)
    droppable: dict[str, str] = field(default_factory=dict)  # patch → why: its backport/accepted commit is at or below the target
    reused: list[str] = field(default_factory=list)  # patches the move replays by their recorded resolution (zmr.model.resolutions)
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried where their patch conflicts, and why not replayed

    @property
    def can_move(self) -> bool:
        return self.status in (CLEAN, PARTIAL)

    @property
    def left_behind(self) -> bool:
        """The pin is not at the tip once the command is done (``--check``)."""
        return self.status != UP_TO_DATE and not (self.applied and self.target == self.tip)

    def to_json(self) -> UpdateComponentJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "status": self.status,
            "pin": self.pin,
            "target": self.target,
            "tip": self.tip,
            "behind": self.behind,
            "dropped": [d.to_json() for d in self.dropped],
            "blocked_by": self.blocked_by.to_json() if self.blocked_by else None,
            "changed": [c.to_json() for c in self.changed],
            "rev": self.rev,
            "steps": self.steps,
            "replays": self.replays,
            "applied": self.applied,
            "refused": self.refused,
            "check": self.check.to_json() if self.check else None,
            "partially_landed": {name: landing.to_json() for name, landing in self.partial.items()},
            "upstream_status": {name: status.to_json() for name, status in self.statuses.items()},
            "droppable": self.droppable,
            "reused_resolutions": self.reused,
            "unused_resolutions": [u.to_json() for u in self.unused],
        }


@dataclass
class CheckSearch:
    """What a check (``--test``/``--smoke``/``--bitwise``) found among the commits the series replays onto.

    *newest_good*: the newest commit found where the check passes (the pin
    when none after it does); *first_bad*: the first-parent successor where
    it fails (None when the newest commit the series replays onto passes,
    or the check fails at the pin); *skipped*: commits set aside between
    them (exit 125, or the series does not replay there): the first bad is
    one of those or *first_bad*. *tried*: every result, in the order asked
    (cached ones too); *tests*: the checks run now (not taken from the results).
    """

    check: Check
    newest_good: str
    first_bad: Tried | None = None
    skipped: list[str] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    tests: int = 0
    fails_at_pin: Tried | None = None

    @property
    def cached(self) -> int:
        return sum(1 for t in self.tried if t.cached)

    def to_json(self) -> CheckSearchJson:
        return {
            "check": self.check.to_json(),
            "newest_good": self.newest_good,
            "first_bad": self.first_bad.to_json() if self.first_bad else None,
            "skipped": self.skipped,
            "tried": [t.to_json() for t in self.tried],
            "tests": self.tests,
            "cached": self.cached,
            "fails_at_pin": self.fails_at_pin.to_json() if self.fails_at_pin else None,
        }


# -- one replay -----------------------------------------------------------------------------------


class SeriesAtPin:
    """The series of one component as commits on its pin (*old_chain*), with the upstream commits of pin..tip that
    have a patch's patch id: ready to be replayed onto any commit of pin..tip (``trial``)."""

    def __init__(self, repo: git.Repo, component: Component, patches: Sequence[Patch], tip: str, resolved: Recorded | None = None):
        self.repo = repo
        self.resolved = resolved  # recorded resolutions (zmr.model.resolutions), tried where a patch conflicts
        self.pin = component.commit
        self.patches = list(patches)
        files = patch_file_sets(repo, self.patches)
        self.old_chain = build_chain(repo, component, self.pin, self.patches, files)
        self.chain_files = file_sets(repo, self.old_chain)
        self.paths = sorted(set().union(*self.chain_files.values())) if self.old_chain else []
        # Patch ids of upstream commits in pin..tip; one found counts at c only when c contains it.
        upstream = upstream_patch_ids(repo, self.pin, tip, self.paths, set(self.chain_files.values())) if self.paths else {}
        pids = chain_patch_ids(repo, self.old_chain) if upstream else {}
        self.hits_at_tip = [upstream.get(pids.get(c, "")) for c in self.old_chain]
        self._contains = memoize(repo.is_ancestor)

    @functools.cached_property
    def key(self) -> str:
        """What a replay of the series onto a commit depends on besides the commit: the series' commits, the resolutions it may use, the rule."""
        digest = hashlib.sha256(f"{REPLAY_RULE} {self.pin} {self.old_chain[-1] if self.old_chain else ''}".encode())
        for patch in self.patches:
            resolved = self.resolved(patch) if self.resolved else None
            mark = resolved.data if isinstance(resolved, Patch) else resolved.reason.encode() if resolved else b"-"
            digest.update(b"\0" + hashlib.sha256(mark).digest())
        return digest.hexdigest()[:32]

    def hits(self, commit: str) -> list[str | None]:
        return [hit if hit and self._contains(hit, commit) else None for hit in self.hits_at_tip]

    def trial(self, commit: str, full: bool = False) -> Trial:
        """Does the series replay onto *commit* (see the module docstring)?

        *full*: replay it even when the series' files are unchanged since the
        pin, so that ``tip`` is the release (a check runs in its tree).
        """
        hits = self.hits(commit)  # hints naming the upstream commit of a dropped patch, never a reason to drop
        if not full and files_unchanged(self.repo, self.pin, commit, self.paths):
            return Trial(commit, True, [], commit)  # nothing the series touches changed: it applies as it did, none is upstream
        memory = replay_onto(self.repo, self.pin, commit, self.patches, self.old_chain, self.chain_files, hits, name_upstream=False, resolved=self.resolved)
        index_of = {p.name: i for i, p in enumerate(self.patches)}
        trial = Trial(commit, memory.conflict_at is None, memory.dropped, memory.tip, [(c, index_of[name]) for c, name, _ in memory.replayed])
        trial.reused, trial.unused = list(memory.reused), list(memory.unused)
        if memory.conflict_at is not None:
            # From the first patch that does not apply on, what ``zmr rebase``'s cherry-picks do (3-way).
            answers: dict[int, Answer] = {}

            def holds(j: int, tree: str) -> bool:
                answers[j] = self.answer(j, tree, commit)
                return answers[j].landed

            renames = partial(renamed_since, self.repo, self.pin, commit)
            picks = trial_pick(self.repo, memory.tip, self.patches, self.old_chain, memory.conflict_at, self.resolved, holds, renames)
            trial.reused += picks.reused
            went_in = {self.patches[j].name for j in [*(j for _, j in picks.made), *picks.empty, *picks.upstream]} | {u.patch for u in picks.unused}
            trial.unused = [u for u in trial.unused if u.patch not in went_in] + picks.unused  # (a 3-way pick that went in needs none)
            # upstream's: the pick changed nothing (``empty``, or ``backport`` naming the commit it declares)
            empty = [picked_empty(self.repo, self.patches[j], self.change(j), commit) for j in picks.empty]
            trial.dropped += [dropped_for(self.repo, self.patches[j], answer, None) for j, answer in zip(picks.empty, empty)]
            trial.dropped += [dropped_for(self.repo, self.patches[j], answers[j], hits[j]) for j in picks.upstream]
            trial.tip = picks.tip
            trial.made += picks.made
            trial.merged.update(j for _, j in picks.made)
            trial.ok, trial.conflict = picks.conflict is None, picks.conflict
            if picks.conflict is not None:
                trial.files = picks.files or sorted(self.chain_files[self.old_chain[picks.conflict]])
        return trial

    def answer(self, index: int, tree: str, commit: str) -> Answer:
        """The one answer (``zmr.ops.landed.judge``) for patch *index*, whose 3-way pick does not go in on *tree* (upstream *commit* and the patches before)."""
        declared, named = declared_commit(self.repo, self.patches[index], commit)
        return judge("failed", lambda: False, self.change(index), following_renames(self.repo, self.pin, commit, blob_reader(self.repo, tree)), declared, named)

    def change(self, index: int) -> Change:
        return step_change(self.repo, self.pin, self.old_chain, self.chain_files, index)

    def name_upstream(self, trial: Trial) -> None:
        """Fill in the upstream commits where each dropped patch landed (only for the trial reported)."""
        at = {p.name: j for j, p in enumerate(self.patches)}
        for d in trial.dropped:
            if d.name in at:
                j = at[d.name]
                name_landing(self.repo, self.pin, trial.commit, d, self.change(j), sorted(self.chain_files[self.old_chain[j]]))

    def partial(self, index: int, target: str) -> Landing | None:
        """Patch *index* (kept at *target*: it conflicts there, or went in 3-way) when *target* already holds part of its change."""
        files = sorted(self.chain_files[self.old_chain[index]])
        answer = judge("failed", lambda: False, self.change(index), following_renames(self.repo, self.pin, target, blob_reader(self.repo, target)))
        if answer.state == NOT_LANDED:
            return None
        return partial_landing(answer, lambda: naming(self.repo, self.change(index), upstream_commits(self.repo, self.pin, target, files)))

    def changed(self, trial: Trial) -> list[ChangedPatch]:
        """Patches that went in by a 3-way merge as a different change (patch id), paired with their old selves (``pair_series``)."""
        merged = [(c, j) for c, j in trial.made if j in trial.merged]
        if not merged:
            return []
        old_ids = chain_patch_ids(self.repo, self.old_chain)
        new_ids = patch_ids(self.repo, [c for c, _ in merged])
        differ = [(c, j) for c, j in merged if new_ids.get(c) != old_ids.get(self.old_chain[j])]
        if not differ:
            return []
        new_chain = self.repo.commits_between(trial.commit, trial.tip)
        made = dict(trial.made)
        names = [self.patches[made[c]].name if c in made else c[:12] for c in new_chain]
        at = {c: k for k, c in enumerate(new_chain)}
        known = [(made[c], at[c]) for c in new_chain if c in made]  # each commit the trial made from a patch is that patch
        old_names = [p.name for p in self.patches]
        pairs = changed_patches(
            self.repo, self.pin, self.old_chain, old_names, trial.commit, new_chain, names, [at[c] for c, _ in differ if c in at], known=known
        )
        result = []
        for c, j in differ:
            pair = pairs.get(at.get(c, -1))
            block = (pair.interdiff or pair.line()) if pair is not None else ""
            result.append(ChangedPatch(self.patches[j].name, self.patches[j].subject, block, pair.kind if pair else None, pair.by if pair else None))
        return result


class CheckedLine:
    """A check of the release on each commit asked (``__call__``): the series replayed in full (``SeriesAtPin.trial``),
    its tree checked (``zmr.ops.checks.run_check``) unless the results hold it; every answer kept in order (*tried*)."""

    def __init__(self, project: Project, component: Component, check: Check, prepared: SeriesAtPin, progress: Progress | None = None):
        self.project, self.component, self.check, self.prepared = project, component, check, prepared
        self.results = Results(project, component, check)
        self.progress = progress
        self.tried: list[Tried] = []
        self.trials: dict[str, Trial] = {}
        self.tests = 0

    def __call__(self, commit: str) -> Tried:
        kept = self.results.replayed(commit, self.prepared.key) if commit not in self.trials else None
        if kept is not None and kept[0] is None:
            tried = Tried(commit, SKIP, kept[1], cached=True)  # the series does not replay onto it: known from an earlier run
        elif kept is not None and kept[0] is not None and (cached := self.results.get(commit, kept[0])) is not None:
            tried = cached
        else:
            tried = self._replayed(commit)
        self.tried.append(tried)
        return tried

    def _replayed(self, commit: str) -> Tried:
        trial = self.trials.get(commit) or self.prepared.trial(commit, full=True)
        self.trials[commit] = trial
        repo = self.prepared.repo
        if not trial.ok:
            name = self.prepared.patches[trial.conflict].name if trial.conflict is not None else "a patch"
            reason = f"the series does not replay onto it ({name} conflicts)"
            self.results.keep_replay(commit, self.prepared.key, None, reason)
            return Tried(commit, SKIP, reason)
        tree = repo.tree_of(trial.tip)
        self.results.keep_replay(commit, self.prepared.key, tree)
        cached = self.results.get(commit, tree)
        if cached is not None:
            return cached
        self.tests += 1
        if self.progress:
            self.progress(f"{self.component.label}: check {self.tests} ({self.check.label}) at {commit[:12]}")
        verdict, reason, output = run_check(self.project, self.component, self.check, repo, commit, trial.tip)
        tried = Tried(commit, verdict, reason, tree, output)
        self.results.put(tried)
        return tried

    def trial(self, commit: str) -> Trial:
        """The series replayed onto *commit* (asked again when an earlier run's results answered without it)."""
        if commit not in self.trials:
            self.trials[commit] = self.prepared.trial(commit, full=True)
        return self.trials[commit]


def search_checked(line: Sequence[str], pin: str, applies_to: int, checked: Callable[[str], Tried]) -> tuple[int, CheckSearch]:
    """The newest position of *line* (1-based; 0 is the pin) up to *applies_to* where the check passes.

    The newest commit the series replays onto first (one check when it
    passes); else the pin (a check that fails there says nothing about
    upstream: nothing moves), then ``bisect_line`` between them.
    """
    search = CheckSearch(Check("test", ()), pin)
    if applies_to == 0:
        return 0, search
    top = checked(line[applies_to - 1])
    if top.verdict == GOOD:
        search.newest_good = line[applies_to - 1]
        return applies_to, search
    at_pin = checked(pin)
    if at_pin.verdict != GOOD:
        search.fails_at_pin = at_pin
        return 0, search
    by_position: dict[int, Tried] = {applies_to: top}

    def verdict(position: int) -> str:
        by_position[position] = checked(line[position - 1])
        return by_position[position].verdict

    found: LineSearch = bisect_line(0, applies_to if top.verdict == BAD else applies_to + 1, verdict, [applies_to] if top.verdict == SKIP else [])
    search.newest_good = line[found.lo - 1] if found.lo else pin
    search.first_bad = by_position.get(found.hi) if found.hi <= applies_to else None
    search.skipped = [line[i - 1] for i in found.skipped]
    return found.lo, search


# -- the search -----------------------------------------------------------------------------------


def search(line: Sequence[str], good: Callable[[str], Trial]) -> tuple[int, Trial | None, Trial | None]:
    """Binary search of *line* (oldest first; position 0 is the pin, good by assumption, not in *line*).

    Returns (lo, the trial at lo, the trial at hi): lo is the position of
    the last good commit found (0: the pin), hi = lo + 1 that of the first
    bad one (None when the tip is good). Invariant: good(lo), not good(hi).
    """
    n = len(line)
    at_tip = good(line[-1])
    if at_tip.ok:
        return n, at_tip, None
    lo, hi = 0, n
    good_trial: Trial | None = None
    bad_trial = at_tip
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = good(line[mid - 1])
        if trial.ok:
            lo, good_trial = mid, trial
        else:
            hi, bad_trial = mid, trial
    return lo, good_trial, bad_trial


def expected_replays(n: int) -> int:
    """Replays of ``search`` over *n* commits when the tip is not good: the tip, then at most ceil(log2 n)."""
    return 1 + math.ceil(math.log2(n)) if n > 1 else 1


# -- a component ----------------------------------------------------------------------------------


def examine(
    project: Project, component: Component, to: str | None = None, cache: Cache | None = None, progress: Progress | None = None, check: Check | None = None
) -> Update:
    """How far the pin of *component* can move towards *to* (default: its ``track``); read-only but for *check*'s results.

    *check*: also the newest of those commits where it passes in the release's tree (``search_checked``).
    """
    rev = to or component.track
    if not rev:
        raise UpdateError(
            f"{component.label}: no upstream revision to update to",
            details=[f"pass --onto REV, or add `track: <branch>` to the component in manifests/{component.model}.yaml"],
        )
    cache = cache or Cache()
    upstream = cache.for_component(component, project.root)
    series = project.series(component)
    label = component.label
    if progress:
        progress(f"{label}: fetching {rev}")
    upstream.ensure([component.commit])
    repo, tip = resolve_rev(upstream, rev)
    pin = component.commit
    if repo.is_ancestor(tip, pin):
        done = Update(component, rev, UP_TO_DATE, pin, pin, tip, 0)
        check_statuses(repo, series.patches, done)
        return done
    line = first_parent_line(repo, pin, tip) if repo.is_ancestor(pin, tip) else []
    behind = len(line)
    if not line:
        line = [tip]  # not a descendant of the pin: nothing in between to move to
        behind = len(repo.rev_list(["--first-parent", tip, "--not", pin]))
    if progress:
        progress(f"{label}: {counted(behind, 'commit')} behind {rev}; preparing the series")
    replays = 0
    expected = expected_replays(len(line))
    prepared = SeriesAtPin(repo, component, series.patches, tip, partial(recorded, project.root))

    def good(commit: str) -> Trial:
        nonlocal replays
        replays += 1
        if progress:
            progress(f"{label}: replay {replays} of ~{expected} (onto {commit[:12]}, {line.index(commit) + 1} of {len(line)})")
        return prepared.trial(commit)

    lo, good_trial, bad_trial = search(line, good)
    result = Update(component, rev, CLEAN, pin, line[lo - 1] if lo else pin, tip, behind, steps=lo, replays=replays)
    if bad_trial is not None:
        result.status = PARTIAL if lo else BLOCKED
        assert bad_trial.conflict is not None
        patch = series.patches[bad_trial.conflict]
        files = bad_trial.files
        if not files:  # the in-memory replay names no file: those of the patch the breaking commit changes, else all of the patch's
            patch_files = prepared.chain_files[prepared.old_chain[bad_trial.conflict]]
            files = sorted(patch_files & file_sets(repo, [bad_trial.commit])[bad_trial.commit]) or sorted(patch_files)
        result.unused = bad_trial.unused  # where the move stops: a resolution recorded for the blocking patch, and why it did not go in
        name, email = series_author(project, patch)
        result.blocked_by = BlockedBy(bad_trial.commit, commit_subject(repo, bad_trial.commit), patch.name, patch.subject, files, name, email)
        result.blocked_by.renamed = {new: old for old, new in renamed_since(repo, pin, bad_trial.commit).items() if new in files}  # (as rebase's stop)
        # Where it blocks, not at the target: the part of its change already there is said with the block, never as "kept".
        result.blocked_by.landing = prepared.partial(bad_trial.conflict, bad_trial.commit)
    if check is not None:
        checked = CheckedLine(project, component, check, prepared, progress)
        good_pos, result.check = search_checked(line, pin, lo, checked)
        result.check.check, result.check.tried, result.check.tests = check, checked.tried, checked.tests
        if good_pos != lo:
            result.target, result.steps = (line[good_pos - 1] if good_pos else pin), good_pos
            result.status = PARTIAL if good_pos else BLOCKED
            good_trial = checked.trial(result.target) if good_pos else None
            result.changed = []
    if good_trial is not None:
        prepared.name_upstream(good_trial)
        result.dropped = good_trial.dropped
        result.reused = good_trial.reused
        result.changed = prepared.changed(good_trial)
        for j in sorted(good_trial.merged):
            landing = prepared.partial(j, good_trial.commit)
            if landing:
                result.partial[prepared.patches[j].name] = landing
    check_statuses(repo, series.patches, result)
    return result


def series_author(project: Project, patch: Patch) -> tuple[str, str]:
    """Who answers for *patch* in the series: its author, but for a backport (or an accepted patch), whose author is
    upstream's: then whoever added it to the series (the project's history; empty when it has none)."""
    status = status_of(patch)[0]
    if status is None or status.kind not in ("backport", "accepted"):
        return patch.author_name or "", patch.author_email or ""
    try:
        repo = project.repo
        top = repo.toplevel()
        found = repo.added_by(patch.path.resolve().relative_to(Path(top).resolve()).as_posix()) if top else None
    except (ZmrError, ValueError):
        found = None
    return found or ("", "")


def check_statuses(repo: git.Repo, patches: Sequence[Patch], found: Update) -> None:
    """Each patch's declared upstream status, checked against upstream: a named commit at or below the pin or the target is droppable."""
    dropped = {d.name for d in found.dropped}
    for patch in patches:
        status = status_of(patch)[0]
        if status is None:
            continue
        found.statuses[patch.name] = status
        named = repo.resolve(status.commit) if status.commit else None
        if named is None or patch.name in dropped:
            continue
        if repo.is_ancestor(named, found.pin):
            found.droppable[patch.name] = f"{status.kind} {named[:12]} is already below the pin"
        elif repo.is_ancestor(named, found.target):
            found.droppable[patch.name] = f"{status.kind} {named[:12]} is below the target"


# -- --apply --------------------------------------------------------------------------------------


def why_not_touch(project: Project, component: Component) -> str | None:
    """Why ``--apply`` must leave *component* alone: a rebase in progress, work in its checkout not in the series."""
    if checkout.rebase_in_progress(project, component):
        return "a rebase is in progress (zmr rebase --continue or --abort first)"
    try:
        co = checkout.open_checkout(checkout.checkout_path(project, component))
    except ZmrError as err:  # two checkouts, a symbolic link at work/...: which one to keep in step is not clear
        return err.message
    if co is None:
        return None
    problems = checkout.dirty(co) + checkout.sync_state(project, component, co)[1]
    if problems:
        return f"its checkout {checkout.show_path(project, co.path)} has work not in the series: " + "; ".join(problems)
    return None


def apply(project: Project, found: Update, cache: Cache | None = None, progress: Progress | None = None) -> None:
    """Move the pin to *found*'s target as ``zmr rebase --onto TARGET`` does (series written, manifest edited in place)."""
    with hold(project, [found.component]):
        if finishing_onto(project, found.component) is not None:
            # A move killed (SIGKILL) while writing its result: nothing is left to decide, finish it as --continue would.
            outcome: Outcome | Stopped | None = resume(project, found.component, cache, progress)
        elif found.can_move:
            outcome = _move(project, found, cache, progress)
        else:
            return
    _record(project, found, outcome)


def _move(project: Project, found: Update, cache: Cache | None, progress: Progress | None) -> Outcome | Stopped | None:
    component = found.component
    found.refused = why_not_touch(project, component)
    if found.refused:
        return None
    try:
        return start(project, component, found.target, cache=cache, progress=progress)
    except ZmrError as err:
        found.refused = err.message  # start refuses before it changes anything
        return None
    except KeyboardInterrupt:
        # All or nothing: a move cut short by Ctrl-C or SIGTERM is undone (after a SIGKILL the next --apply finishes it).
        if checkout.rebase_in_progress(project, component):
            with transaction.signals_deferred():
                abort(project, component)
        raise


def _record(project: Project, found: Update, outcome: Outcome | Stopped | None) -> None:
    component = found.component
    if outcome is None:
        return
    if isinstance(outcome, Stopped):
        # The trial picks said the cherry-picks go through; git cherry-pick did not agree: put everything back.
        abort(project, component)
        found.refused = f"zmr rebase stopped on {outcome.name} (conflicts in {', '.join(outcome.file_names)}); nothing changed"
        return
    found.applied, found.outcome = True, outcome
    found.dropped = outcome.dropped
    found.reused, found.unused = outcome.reused, outcome.unused
    if outcome.changed:
        found.changed = list(outcome.changed)


@dataclass(frozen=True)
class UpdateReport(Report):
    """What ``zmr update --json`` prints: one ``Update`` per component, in the order examined.

    ``failed()`` is the exit rule (§6.1): with ``--apply``, a component left
    unmoved (``refused``: unexported work, a rebase in progress, ...); with
    ``--check``, a component left behind its track (or ``--onto``).
    """

    components: list[Update]
    applied: bool = False  # --apply
    checked: bool = False  # --check
    target: str | None = None  # --onto REV; None: each component's track

    @property
    def refused(self) -> list[Update]:
        return [u for u in self.components if u.refused]

    @property
    def behind(self) -> list[Update]:
        return [u for u in self.components if u.left_behind]

    def failed(self) -> bool:
        return bool(self.applied and self.refused) or bool(self.checked and self.behind)

    def reason(self) -> str:
        """The first line of the failure; empty when none."""
        count = len(self.components)
        if self.applied and self.refused:
            names = ", ".join(u.component.label for u in self.refused)
            return f"{len(self.refused)} of {count} component{'s' if count != 1 else ''} not moved: {names}"
        if self.checked and self.behind:
            names = ", ".join(u.component.label for u in self.behind)
            behind = len(self.behind)
            return f"{behind} component{'s' if behind != 1 else ''} behind {'their track' if self.target is None else self.target}: {names}"
        return ""

    def details(self) -> list[str]:
        """What to do about the failure ``reason`` names."""
        if self.applied and self.refused:
            return [
                *(f"{u.component.label}: {u.refused}" for u in self.refused),
                "the others moved; deal with what is named above, then run the same `zmr update ... --apply` again",
            ]
        return []

    def to_json(self) -> UpdateJson:
        return {"components": [u.to_json() for u in self.components]}


def update(
    project: Project,
    components: Sequence[Component],
    to: str | None = None,
    apply_moves: bool = False,
    cache: Cache | None = None,
    progress: Progress | None = None,
    check_for: Callable[[Component], Check | None] | None = None,
) -> list[Update]:
    """``zmr update``: each component examined (with the check *check_for* gives it), then (*apply_moves*) moved as far as it can go."""
    cache = cache or Cache()
    checks: dict[str, Check | None] = (
        {c.label: check_for(c) for c in components} if check_for else {}
    )  # every check set up before any work: bad input fails first
    results = []
    for component in components:
        found = examine(project, component, to, cache, progress, checks.get(component.label))
        if apply_moves:
            apply(project, found, cache, progress)
        results.append(found)
    return results
