"""Read-only questions about upstream history against a series: what a revision names, which upstream
commits touch the series' files, which patches upstream already holds, whether the series replays onto a commit.

``zmr rebase`` (the stateful move), ``zmr upstreamed`` and ``zmr update`` (the search for how far a pin can move)
stand on it; ``zmr diff`` takes ``range_diff``. Nothing here touches a checkout, the manifest, the series folder
or zmr's state: it writes only to the mirror (fetched history, a series' commits on its pin, kept patch ids) and
to throwaway indexes. The questions::

    REV ──resolve_rev (Cache.fetch_ref, history)──▶ commit
    upstream old..new touching the series' files ──upstream_patch_ids──▶ patch id → upstream commit (a hint: it names the commit)
    series on new ──replay_onto (zmr.ops.replay, in memory)──▶ InMemory: commits made, patches upstream holds dropped, first conflict
    a patch at the target ──zmr.ops.landed (the one answer: landed / partially landed / not landed; naming: via)──▶
        name_landing (a dropped patch's commits), landing_of (a removed patch, for zmr diff)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from zmr.infra import git
from zmr.infra.cache import COMPLETE_REFS, Cache, Upstream
from zmr.infra.errors import ZmrError
from zmr.infra.git import Progress
from zmr.model.manifest import Component
from zmr.model.patchfile import CommitMeta
from zmr.model.project import Project
from zmr.model.resolutions import NotReplayed, Recorded, try_recorded
from zmr.model.series import Patch, Series
from zmr.ops.landed import LANDED, PARTIAL, Answer, Change, Dropped, Landing, LandingJson, already_there, at_replay, change_of, naming, partial_landing
from zmr.ops.replay import (
    Replayer,
    build_chain,
    chain_patch_ids,
    file_sets,
    files_unchanged,
    kept_chain,
    patch_ids,
    series_applies,
)
from zmr.infra.reports import Report


class UpstreamError(ZmrError):
    """A revision names no upstream commit, or there is nothing to compare the series with."""


# -- revisions and history ------------------------------------------------------------------------


# Patterns compiled (and kept) by re when first used, as zmr.infra.git's (here too below): `zmr status` imports this module.
_REV = r"(?P<name>.+?)(?P<walk>(?:[~^][0-9]*)*)"
_ABBREV = r"[0-9a-f]{4,39}"


def resolve_rev(upstream: Upstream, rev: str) -> tuple[git.Repo, str]:
    """The mirror and the commit id of *rev*, with history: what git takes, resolved against the upstream.

    A full or abbreviated id, a tag or a branch, each optionally followed by
    ``~N`` / ``^N`` (``main~5``, ``v1.2^``). An abbreviated id must name an
    upstream commit (the mirror also holds the commits zmr makes from series).
    """
    match = re.fullmatch(_REV, rev)
    name, walk = (match.group("name"), match.group("walk")) if match else (rev, "")
    oid = None
    if re.fullmatch(_ABBREV, name):
        repo = upstream.ensure_history().repo
        oid = repo.resolve(name)
        if oid is not None and not repo.first_ref_containing(oid, COMPLETE_REFS):
            oid = None  # a commit zmr made, not upstream's
        if oid is None:
            raise UpstreamError(f"{upstream.display}: no upstream commit {name!r}", details=["give a full commit id, a tag or a branch of the upstream"])
    else:
        try:
            mirror, oid = upstream.fetch_ref(name)
        except ZmrError as err:
            # git's text names zmr's own refspec (refs/zmr/track/...): not something the engineer wrote.
            raise UpstreamError(err.message, details=[d for d in err.details if "refs/zmr/" not in d]) from None
        repo = mirror.repo
    if walk:
        walked = repo.resolve(oid + walk)
        if walked is None:
            raise UpstreamError(f"{upstream.display}: {rev!r} names no commit (the history of {name} is shorter)", details=[f"{name} is {oid}"])
        oid = walked
    return repo, oid


def first_parent_line(repo: git.Repo, pin: str, tip: str) -> list[str]:
    """The commits from the pin (excluded) to *tip* along first parents, oldest first, that descend from the pin."""
    line = repo.rev_list(["--first-parent", "--reverse", tip, "--not", pin])
    if not line or repo.parent(line[0]) == pin:
        return line  # the line starts at the pin: every commit on it descends from it
    # The pin came in through a merge: first-parent commits older than that merge do not descend from it.
    descendants = set(repo.rev_list(["--ancestry-path", tip, "--not", pin]))
    return [c for c in line if c in descendants]


def commit_subject(repo: git.Repo, commit: str | None) -> str:
    """The subject line of *commit*; "" for None or a commit the mirror lacks."""
    if not commit or not repo.has_object(commit, "commit"):
        return ""
    return CommitMeta.for_commit(repo.commit_info(commit)).subject


# -- upstream commits against the series' patches ----------------------------------------------------


def upstream_commits(repo: git.Repo, old: str, new: str, paths: Sequence[str]) -> list[str]:
    """Non-merge commits of old..new that touch *paths*, oldest first."""
    if not paths:
        return []
    # The paths on stdin (one a line; there can be more than the arguments of a process hold), those with a newline as arguments.
    lines = [p for p in paths if "\n" not in p]
    odd = [p for p in paths if "\n" in p]
    args = ["--no-merges", "--full-history", "--reverse", "--topo-order", new, "--not", old, *(["--", *odd] if odd else [])]
    return repo.rev_list(args, stdin=["--", *lines])


def upstream_patch_ids(repo: git.Repo, old: str, new: str, paths: Sequence[str], shapes: set[frozenset[str]] | None = None) -> dict[str, str]:
    """patch id → the oldest upstream commit of old..new with that patch id.

    A patch id covers the names of the files a diff touches, so only an
    upstream commit that changes exactly the files of one of *shapes* (the
    series' patches) can match: only those are diffed (git's own patch-id
    comparison skips by file names first for the same reason).
    """
    commits = upstream_commits(repo, old, new, paths)
    if shapes is not None and commits:
        changed = file_sets(repo, commits)
        commits = [c for c in commits if changed[c] in shapes]
    ids = patch_ids(repo, commits)
    result: dict[str, str] = {}
    for commit in commits:
        if commit in ids:
            result.setdefault(ids[commit], commit)
    return result


def name_landing(repo: git.Repo, old: str, new: str, dropped: Dropped, change: Change, paths: Sequence[str]) -> None:
    """Fill in *dropped*'s *via* (and *upstream*, when not known yet: the newest of them): ``zmr.ops.landed.naming``."""
    if dropped.method in ("patch-id", "backport") and dropped.upstream:
        dropped.via = [dropped.upstream]
        return
    dropped.via = naming(repo, change, upstream_commits(repo, old, new, paths))
    if dropped.upstream is None and dropped.via:
        dropped.upstream = dropped.via[-1]
        dropped.upstream_subject = commit_subject(repo, dropped.upstream)


def dropped_for(repo: git.Repo, patch: Patch, answer: Answer, hit: str | None) -> Dropped:
    """The entry of a patch *answer* says landed; *hit*: the upstream commit with its patch id (it names the commit)."""
    method, found = ("backport", answer.backport) if answer.how == "backport" else ("patch-id", hit) if hit else (answer.how, None)
    return Dropped(patch.name, patch.subject, method, found, commit_subject(repo, found))


def step_change(repo: git.Repo, pin: str, old_chain: Sequence[str], chain_files: dict[str, frozenset[str]], index: int) -> Change:
    """The change of the patch at *index* of a series made on *pin* (its commits *old_chain*)."""
    return change_of(repo, old_chain[index - 1] if index else pin, old_chain[index], tuple(sorted(chain_files[old_chain[index]])))


def landing_of(repo: git.Repo, old: str, new: str, patch: Patch, before: str, old_commit: str, paths: Sequence[str]) -> Landing | None:
    """How much of *patch* (made on *before*; its commit on the old pin *old_commit*) is at *new*: the one answer, for a patch a series dropped.

    Upstream history may be missing (a mirror fetched at depth 1): then *via*
    is empty and a patch-id match is not looked for.
    """
    change = change_of(repo, before, old_commit, tuple(sorted(paths)))
    try:
        with Replayer(repo, new, paths) as replay:
            [step] = list(replay.replay([patch], [frozenset(paths)], there=lambda _: already_there(replay, change, new, old)))
            answer = at_replay(replay, step, change, new, old)
    except git.GitError:
        return None
    if answer.state not in (LANDED, PARTIAL):
        return None
    if answer.how == "backport" and answer.backport:
        return Landing("backport", [answer.backport])  # the commit it declares names it, as update and rebase say
    try:
        via = naming(repo, change, upstream_commits(repo, old, new, paths))
        pid = chain_patch_ids(repo, [old_commit]).get(old_commit)
        same = bool(pid) and pid in upstream_patch_ids(repo, old, new, paths)
    except git.GitError:
        via, same = [], False
    if answer.state == LANDED:
        return Landing("same-patch" if same else "modified", via)
    return partial_landing(answer, lambda: via)


# -- the in-memory replay --------------------------------------------------------------------------


@dataclass
class InMemory:
    """The series replayed on a new upstream commit in memory, by rebase's policy (``replay_onto``).

    *replayed*: (commit, patch name, a hunk applied at an offset: None when
    unknown) per commit made, in order, the first on the new commit and
    *tip* the last (the new commit when none was made). *conflict_at*: the
    index of the first patch that neither applies nor is upstream; the
    replay stopped there.
    """

    tip: str
    replayed: list[tuple[str, str, bool | None]]
    dropped: list[Dropped]
    conflict_at: int | None = None
    reused: list[str] = field(default_factory=list)  # patches that went in by their recorded resolution (zmr.model.resolutions)
    unused: list[NotReplayed] = field(default_factory=list)  # recorded resolutions tried where their patch conflicted, not replayed

    def to_json(self) -> dict[str, Any]:
        return {
            "tip": self.tip,
            "replayed": [list(r) for r in self.replayed],
            "dropped": [d.to_json() for d in self.dropped],
            "conflict_at": self.conflict_at,
            "reused": self.reused,
            "unused": [u.to_json() for u in self.unused],
        }


def replay_onto(
    repo: git.Repo,
    old: str,
    new: str,
    patches: Sequence[Patch],
    old_chain: Sequence[str],
    chain_files: dict[str, frozenset[str]],
    hits: Sequence[str | None],
    name_upstream: bool = True,
    resolved: Recorded | None = None,
) -> InMemory:
    """Replay *patches* (their commits on *old*: *old_chain*) on *new* in a throwaway index.

    The policy on top of the replay: what upstream holds is dropped
    (``zmr.ops.landed``'s answer: landed); any other
    patch that does not apply is a conflict: stop there. *hits* (the
    upstream commit with each patch's patch id, or None) only name the
    upstream commit of a dropped patch; *name_upstream*: else look for it.
    *resolved*: a patch's recorded resolution (``zmr.model.resolutions.recorded``),
    tried in its place where it does not apply and is not upstream.
    """
    paths = sorted(set().union(*chain_files.values()))
    dropped: list[Dropped] = []
    made: list[tuple[str, bool | None]] = []  # per commit of the replay: its patch; applied at an offset (None: unknown)
    conflict_at = None
    reused: list[str] = []
    unused: list[NotReplayed] = []
    with Replayer(repo, new, paths) as replay:
        there = lambda step: already_there(replay, step_change(repo, old, old_chain, chain_files, step.index), new, old)  # noqa: E731
        for step in replay.replay(patches, [chain_files[c] for c in old_chain], offsets=True, there=there):
            i, patch = step.index, step.patch
            if step.status == "applied":
                made.append((patch.name, step.moved))
                continue
            change = step_change(repo, old, old_chain, chain_files, i)
            answer = at_replay(replay, step, change, new, old)
            if answer.landed:
                drop = dropped_for(repo, patch, answer, hits[i])
                if name_upstream:
                    name_landing(repo, old, new, drop, change, sorted(chain_files[old_chain[i]]))
                dropped.append(drop)
            elif step.status == "failed" and try_recorded(resolved, patch, functools.partial(_replay_resolution, replay), reused, unused):
                made.append((patch.name, None))
            else:
                conflict_at = i
                break
        replayed = [(commit, name, moved) for commit, (name, moved) in zip(replay.commits, made)]
        return InMemory(replay.tip, replayed, dropped, conflict_at, reused, unused)


def _replay_resolution(replay: Replayer, alternative: Patch) -> str | None:
    """Commit a patch's recorded resolution (*alternative*) in its place when it applies and changes the tree; else why not."""
    if not replay.try_apply(alternative)[0]:
        return "does not apply where the patch conflicts (the new upstream with the patches before it)"
    if not replay.changed():
        return "changes nothing there"  # (the index is as it was: an apply that changes nothing leaves it so)
    replay.commit(alternative)
    return None


def files_stand(repo: git.Repo, series: Series, old: str, new: str, files: list[frozenset[str]] | None) -> bool:
    """The series' files (*files*: each patch's) are byte for byte as they were, and the series applies to the old pin:
    so it applies to the new one exactly as it did (checked without building its commits: a first rebase needs none)."""
    if files is None:
        return False
    paths = sorted(set().union(*files))
    if not files_unchanged(repo, old, new, paths):
        return False
    if kept_chain(repo, old, series.patches) is not None:
        return True  # it applied when its commits were made
    return series_applies(repo, old, series.patches, paths)


# -- upstreamed ----------------------------------------------------------------------------


class UpstreamedPatchJson(TypedDict):
    """A patch upstream holds: how that was found (*method*), the upstream commit and subject (null and '' when not
    identified), the commits where it landed (*via*) and, in words, how (*landed*)."""

    name: str
    subject: str
    upstream_commit: str | None
    upstream_subject: str
    method: str
    via: list[str]
    landed: str


class UpstreamedJson(TypedDict):
    """One component: its pin, the revision compared with (as named, and its commit), the series' patch count, the
    patches upstream holds there, those that would conflict there, and of those the ones upstream holds in part."""

    model: str
    component: str
    pin: str
    rev: str
    rev_commit: str
    patches: int
    upstreamed: list[UpstreamedPatchJson]
    conflicts: list[str]
    partially_landed: dict[str, LandingJson]


class NotComparedJson(TypedDict):
    model: str
    component: str
    reason: str


class UpstreamedReportsJson(TypedDict):
    """A report per component compared, and those left out (*reason*: no track)."""

    components: list[UpstreamedJson]
    skipped: list[NotComparedJson]


@dataclass
class UpstreamedReport:
    """What ``zmr upstreamed`` found for one component: the patches upstream holds at *rev_commit* (*upstreamed*),
    and those that would conflict there (*conflicts*); *patches*: how many the series has."""

    component: Component
    rev: str
    rev_commit: str
    patches: int
    upstreamed: list[Dropped] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    partial: dict[str, Landing] = field(default_factory=dict)  # of *conflicts*: those whose change upstream holds in part

    def to_json(self) -> UpstreamedJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "pin": self.component.commit,
            "rev": self.rev,
            "rev_commit": self.rev_commit,
            "patches": self.patches,
            "upstreamed": [
                {
                    "name": d.name,
                    "subject": d.subject,
                    "upstream_commit": d.upstream,
                    "upstream_subject": d.upstream_subject,
                    "method": d.method,
                    "via": d.via,
                    "landed": d.landed,
                }
                for d in self.upstreamed
            ],
            "conflicts": self.conflicts,
            "partially_landed": {name: landing.to_json() for name, landing in self.partial.items()},
        }


@dataclass
class NotCompared:
    """A component ``zmr upstreamed`` leaves out of a run over several: it follows no upstream ref and no revision was named."""

    component: Component
    reason: str = "no track"

    def to_json(self) -> NotComparedJson:
        return {"model": self.component.model, "component": self.component.key, "reason": self.reason}


@dataclass(frozen=True)
class UpstreamedReports(Report):
    """What ``zmr upstreamed --json`` prints: a report per component compared, and those skipped (no ``track``)."""

    components: list[UpstreamedReport]
    skipped: list[NotCompared]

    def to_json(self) -> UpstreamedReportsJson:
        return {"components": [r.to_json() for r in self.components], "skipped": [s.to_json() for s in self.skipped]}


def component_inputs(project: Project, component: Component, cache: Cache | None) -> tuple[Upstream, Series]:
    """What upstreamed and rebase both start from: the upstream as the cache (a new one without *cache*) reaches it, and the series."""
    return (cache or Cache()).for_component(component, project.root), project.series(component)


def upstreamed(project: Project, component: Component, rev: str | None, cache: Cache | None = None, progress: Progress | None = None) -> UpstreamedReport:
    """Patches of the series already in upstream between the pin and *rev* (default: ``track``)."""
    rev = rev or component.track
    if not rev:
        raise UpstreamError(
            f"{component.label}: no upstream revision to compare with",
            details=[f"pass --onto REV, or add `track: <branch>` to the component in manifests/{component.model}.yaml"],
        )
    upstream, series = component_inputs(project, component, cache)
    if progress:
        progress(f"{component.label}: fetching {rev}")
    upstream.ensure([component.commit])
    repo, new = resolve_rev(upstream, rev)
    report = UpstreamedReport(component, rev, new, len(series.patches))
    if not series.patches:
        return report
    chain = build_chain(repo, component, component.commit, series.patches)
    chain_files = file_sets(repo, chain)
    paths = sorted(set().union(*chain_files.values()))
    pids = chain_patch_ids(repo, chain)
    upstream_ids = upstream_patch_ids(repo, component.commit, new, paths, set(chain_files.values()))
    hits = [upstream_ids.get(pids.get(commit, "")) for commit in chain]  # hints: they name the commit, never decide
    with Replayer(repo, new, paths) as replay:
        there = lambda step: already_there(replay, step_change(repo, component.commit, chain, chain_files, step.index), new, component.commit)  # noqa: E731
        for step in replay.replay(series.patches, [chain_files[c] for c in chain], there=there):
            patch, hit, i = step.patch, hits[step.index], step.index
            if step.status == "applied":
                continue
            files = sorted(chain_files[chain[i]])
            change = step_change(repo, component.commit, chain, chain_files, i)
            answer = at_replay(replay, step, change, new, component.commit)
            if answer.landed:
                drop = dropped_for(repo, patch, answer, hit)
                name_landing(repo, component.commit, new, drop, change, files)
                report.upstreamed.append(drop)
            elif step.status == "failed":
                report.conflicts.append(patch.name)
                partial = partial_landing(answer, lambda: naming(repo, change, upstream_commits(repo, component.commit, new, files)))  # noqa: B023 - called at once
                if partial:
                    report.partial[patch.name] = partial
    return report


# -- range-diff ------------------------------------------------------------------------------------


_RANGE_LINE = r"^\s*(-|\d+):\s+(?:-+|[0-9a-f]+) ([<>=!]) \s*(-|\d+):\s+(?:-+|[0-9a-f]+) (.*)$"
# Past any cost git's matching can give a pair of two patches: the pair is made (a pair asked for by name or position).
_FORCE_PAIR = 100_000


class _PairJson(TypedDict):
    old: str | None
    new: str | None
    sign: str
    subject: str


class PairJson(_PairJson, total=False):
    """One line of a series' range-diff: the old and new patch names (null: none), *sign* (``=`` the same, ``!``
    changed, ``<`` removed, ``>`` added) and subject; a changed pair's *kind*, how it was paired and its interdiff; an
    added or removed patch's *diff*."""

    kind: str | None
    paired_by: str | None
    interdiff: str
    diff: str


class ChangedPatchJson(TypedDict):
    """A patch a rebase or update changed: its range-diff block, what changed (*kind*: code, message, context) and how
    the two sides were paired (content, name, position)."""

    name: str
    subject: str
    range_diff: str
    kind: str | None
    paired_by: str | None


@dataclass(frozen=True)
class Pair:
    """One line of a series' range-diff: a patch of the old series, of the new one, or both.

    *sign* as ``git range-diff`` prints it: ``=`` the same change, ``!`` a changed
    pair, ``<`` only in the old series (removed), ``>`` only in the new one (added).
    *kind* of a changed pair: ``code`` (lines the patch adds or removes differ),
    ``message`` (only its message), ``context`` (only the lines around its
    changes or their offsets: what a pin move does to a patch that still
    applies). *by*: how the pair was found: ``content`` (git range-diff), ``name``
    or ``position`` (git range-diff saw two different patches, e.g. a conflict
    resolved by hand; the pair is made all the same, with its interdiff).
    """

    old: int | None  # index in the old series
    new: int | None  # index in the new series
    old_name: str | None
    new_name: str | None
    sign: str
    subject: str
    kind: str | None = None
    by: str | None = None
    interdiff: str = ""  # the range-diff block of a changed pair: header line, then the diff of the two patches
    diff: str = ""  # the patch itself, for an added one (``>``) and a removed one (``<``: what the series no longer does)

    def line(self, width: int = 1) -> str:
        """The range-diff line, numbered within each series from 1."""
        old = f"{self.old + 1:>{width}}" if self.old is not None else "-".rjust(width)
        new = f"{self.new + 1:>{width}}" if self.new is not None else "-".rjust(width)
        return f"{old}: {self.old_name or '-'} {self.sign} {new}: {self.new_name or '-'} {self.subject}".rstrip()

    def to_json(self) -> PairJson:
        data: PairJson = {"old": self.old_name, "new": self.new_name, "sign": self.sign, "subject": self.subject}
        if self.sign == "!":
            data["kind"], data["paired_by"], data["interdiff"] = self.kind, self.by, self.interdiff
        if self.sign in "<>":
            data["diff"] = self.diff
        return data


@dataclass(frozen=True)
class ChangedPatch:
    """A patch of the series that a rebase or an update changed: the rebase and update reports' entry."""

    name: str
    subject: str
    range_diff: str  # the pair's range-diff block: both sides, then the interdiff
    kind: str | None = None  # code | message | context (see Pair)
    paired_by: str | None = None  # content | name | position

    def to_json(self) -> ChangedPatchJson:
        return {"name": self.name, "subject": self.subject, "range_diff": self.range_diff, "kind": self.kind, "paired_by": self.paired_by}


def changed_patches(
    repo: git.Repo,
    old_base: str,
    old_chain: Sequence[str],
    old_names: Sequence[str],
    new_base: str,
    new_chain: Sequence[str],
    new_names: Sequence[str],
    wanted: Sequence[int],
    *,
    known: Sequence[tuple[int, int]] = (),
) -> dict[int, Pair]:
    """``pair_series`` of the two chains, for the new patches at *wanted* (their indices): each one's pair (old side None: new)."""
    if not wanted:
        return {}
    by_new = {p.new: p for p in pair_series(repo, old_base, old_chain, old_names, new_base, new_chain, new_names, known=known) if p.new is not None}
    return {j: by_new[j] for j in wanted if j in by_new}


@dataclass(frozen=True)
class _Entry:
    old: int | None
    new: int | None
    sign: str
    subject: str
    block: str


def _parse_range_diff(text: str) -> list[_Entry]:
    entries: list[_Entry] = []
    lines: list[str] = []
    head: re.Match[str] | None = None

    def flush() -> None:
        if head is not None:
            old, sign, new, subject = head.groups()
            entries.append(_Entry(None if old == "-" else int(old) - 1, None if new == "-" else int(new) - 1, sign, subject, "".join(lines)))

    range_line = re.compile(_RANGE_LINE)  # once, not per line
    for line in text.splitlines(keepends=True):
        match = range_line.match(line.rstrip("\n"))
        if match:
            flush()
            head, lines = match, [line]
        elif head is not None:
            lines.append(line)
    flush()
    return entries


def pair_series(
    repo: git.Repo,
    old_base: str,
    old_chain: Sequence[str],
    old_names: Sequence[str],
    new_base: str,
    new_chain: Sequence[str],
    new_names: Sequence[str],
    *,
    known: Sequence[tuple[int, int]] = (),
) -> list[Pair]:
    """The two series (one commit per patch, on their pins) paired as a reviewer reads them, in the new series' order.

    First by content (``git range-diff``); then, of the patches left over,
    the pairs *known* to the caller (old index, new index: a patch that
    ``zmr update``'s trial merged), then equal file names, then equal
    positions. A patch edited past what range-diff still pairs (a conflict
    resolved by hand) is thus a changed pair with its interdiff, never a
    removed patch plus an added one. ``zmr diff``, the rebase report and the
    update report all pair with this.
    """
    assert len(old_chain) == len(old_names) and len(new_chain) == len(new_names)
    text = repo.range_diff(f"{old_base}..{old_chain[-1]}", f"{new_base}..{new_chain[-1]}") if old_chain and new_chain else None
    entries = _parse_range_diff(text) if text else []
    if any((e.old or 0) >= len(old_chain) or (e.new or 0) >= len(new_chain) for e in entries):
        entries = []  # numbers that do not fit the chains (git counted other commits): pair by name and position alone
    paired: dict[int, tuple[int, str, str]] = {}  # new index -> (old index, sign, block)
    subjects: dict[tuple[str, int], str] = {}
    for e in entries:
        if e.old is not None:
            subjects[("old", e.old)] = e.subject
        if e.new is not None:
            subjects[("new", e.new)] = e.subject
        if e.old is not None and e.new is not None:
            paired[e.new] = (e.old, e.sign, e.block)
    free_old = [i for i in range(len(old_chain)) if i not in {o for o, _, _ in paired.values()}]
    free_new = [j for j in range(len(new_chain)) if j not in paired]
    forced: dict[int, tuple[int, str]] = {}  # new index -> (old index, how)

    def take(i: int, j: int, how: str) -> None:
        forced[j] = (i, how)
        free_old.remove(i)
        free_new.remove(j)

    for i, j in known:
        if i in free_old and j in free_new:
            take(i, j, "name" if old_names[i] == new_names[j] else "position")
    for j in list(free_new):
        same = [i for i in free_old if old_names[i] == new_names[j]]
        if same:
            take(same[0], j, "name")
    # By position only where the two patches touch a file in common: never an unrelated patch that took a removed one's place.
    texts = repo.commit_patches([old_chain[i] for i in free_old] + [new_chain[j] for j in free_new]) if free_old and free_new else {}
    for j in list(free_new):
        if j in free_old and _files(texts[old_chain[j]]) & _files(texts[new_chain[j]]):
            take(j, j, "position")
    for j, (i, _how) in forced.items():
        block = repo.range_diff(f"{old_chain[i]}~..{old_chain[i]}", f"{new_chain[j]}~..{new_chain[j]}", creation_factor=_FORCE_PAIR) or ""
        forced_entries = _parse_range_diff(block)
        if forced_entries and forced_entries[0].old is not None and forced_entries[0].new is not None:
            e = forced_entries[0]
            paired[j] = (i, e.sign, e.block)
        else:
            paired[j] = (i, "!", "")
    # What each changed pair changed, and each added patch's diff: one diff-tree run for all of them.
    changed = [(i, j) for j, (i, sign, _) in paired.items() if sign == "!"]
    added = [j for j in range(len(new_chain)) if j not in paired]
    removed_ones = [i for i in range(len(old_chain)) if i not in {o for o, _, _ in paired.values()}]
    wanted = [old_chain[i] for i, _ in changed] + [new_chain[j] for _, j in changed] + [new_chain[j] for j in added]
    patches = repo.commit_patches(wanted + [old_chain[i] for i in removed_ones])
    messages = _messages(repo, wanted[: 2 * len(changed)] + [old_chain[i] for i in free_old if ("old", i) not in subjects])
    messages |= _messages(repo, [new_chain[j] for j in range(len(new_chain)) if ("new", j) not in subjects and new_chain[j] not in messages])
    pairs: list[Pair] = []
    removed = list(removed_ones)

    def subject(side: str, index: int) -> str:
        return subjects.get((side, index)) or messages[(old_chain if side == "old" else new_chain)[index]].split("\n", 1)[0]

    def removed_before(limit: int | None) -> None:
        while removed and (limit is None or removed[0] < limit):
            i = removed.pop(0)
            pairs.append(Pair(i, None, old_names[i], None, "<", subject("old", i), diff=patches.get(old_chain[i], "")))

    for j in range(len(new_chain)):
        if j in paired:
            i, sign, block = paired[j]
            removed_before(i)
            kind = by = None
            if sign == "!":
                a, b = old_chain[i], new_chain[j]
                kind = _kind(messages[a], messages[b], patches[a], patches[b])
                by = forced[j][1] if j in forced else "content"
                block = _renumbered(block, i, j)
            pairs.append(Pair(i, j, old_names[i], new_names[j], sign, subject("new", j), kind, by, block if sign == "!" else ""))
        else:
            pairs.append(Pair(None, j, None, new_names[j], ">", subject("new", j), diff=patches.get(new_chain[j], "")))
    removed_before(None)
    return pairs


def _messages(repo: git.Repo, commits: Sequence[str]) -> dict[str, str]:
    """Each commit's message, in one ``cat-file --batch``."""
    wanted = sorted(set(commits))
    found = repo.cat_file_batch(wanted) if wanted else []
    return {c: git.CommitInfo.parse(c, obj.content).message if obj is not None else "" for c, obj in zip(wanted, found)}


def _renumbered(block: str, i: int, j: int) -> str:
    """A forced pair's block numbers its two patches 1 and 1: give them their places in the series."""
    head, sep, rest = block.partition("\n")
    match = re.match(_RANGE_LINE, head)
    if not match or (match.group(1), match.group(3)) == (str(i + 1), str(j + 1)):
        return block
    start, end = match.span(1)
    head = f"{head[:start]}{' ' * max(0, end - start - len(str(i + 1)))}{i + 1}{head[end:]}"
    match = re.match(_RANGE_LINE, head)
    assert match is not None
    start, end = match.span(3)
    head = f"{head[:start]}{' ' * max(0, end - start - len(str(j + 1)))}{j + 1}{head[end:]}"
    return head + sep + rest


_DIFF_GIT = r"(?m)^diff --git a/(.*) b/(.*)$"


def _files(patch: str) -> set[str]:
    return {name for pair in re.findall(_DIFF_GIT, patch) for name in pair}


def _changes(patch: str) -> list[str]:
    """The lines a patch adds and removes, under their files' headers: not its context, hunk offsets or blob ids."""
    return [line for line in patch.splitlines() if line.startswith(("+", "-", "diff --git", "new file", "deleted file", "old mode", "new mode"))]


def _kind(old_message: str, new_message: str, old_patch: str, new_patch: str) -> str:
    """``code``, ``message`` or ``context``: what differs between two versions of one patch."""
    if _changes(old_patch) != _changes(new_patch):
        return "code"
    if old_message.strip() != new_message.strip():
        return "message"
    return "context"
