"""The export planner: a checkout's commits → the patch files and `series` that hold them, byte-stable.

``zmr export`` (``zmr.ops.export``), ``zmr rebase`` and the checks
that a checkout still equals its series all plan with this module::

    commits base..tip ──list_commits (linear, no merges)──▶ commits
        ──plan_export: match each commit to a patch of the series──▶ ExportPlan
        ──stage_plan──▶ a zmr.infra.transaction: patch files, ``series`` and removals, all at once

Nothing is written while planning: an ``ExportPlan`` holds every byte an
export would write, so ``--dry-run``, ``zmr checkout`` (is there unexported
work?) and ``zmr rebase`` (what changed?) read the same answer.

Invariants (byte-stable; docs/reference.md §3.4):

- a commit that is exactly an existing patch (same author, date and message;
  the patch applies to the commit's parent with no offset and gives the
  commit's tree) keeps that file's bytes, whatever wrote it (quilt too);
- every other commit is written canonically (``zmr.model.patchfile``); a file whose
  canonical bytes are already on disk is not rewritten;
- names are kept for patches that keep their subject; new and reworded
  patches are named ``NNNN-<subject-slug>.patch`` by position;
- files are removed only when they were listed in the series; ``series``
  keeps its comments, blank lines and options where the entries survive;
- writes are all or nothing: ``stage_plan`` hands them to a
  ``zmr.infra.transaction`` (``zmr export`` and ``zmr rebase`` commit it), so a
  series is never half-written: a kill before the transaction's commit point
  leaves the old series, after it the next zmr command finishes the renames.
- the names an older zmr's interrupted export owned (its export journal,
  read by ``zmr.ops.legacy`` alone and passed in as *owned*) are honoured: a
  file it names is never "taken" by someone else (so no ``…-2.patch``) and
  is removed when the new series does not list it; the export that
  finishes it removes the journal (``zmr.ops.legacy.forget_export_journal``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from zmr.infra import git
from zmr.infra.errors import ZmrError
from zmr.model.patchfile import (
    CommitMeta,
    commit_diffs,
    format_mail,
    message_cut,
    normalize_subject,
    patch_name,
)
from zmr.model.series import Patch, Series, SeriesEntry, read_series
from zmr.ops.replay import TempIndex, _moved_by_patch, patch_file_sets

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.transaction import Transaction


class ExportError(ZmrError):
    """Commits that cannot be written as a series (a merge, an empty commit, no subject)."""


class PlannedPatchJson(TypedDict):
    """A patch of the exported series: its file, what export does with it (unchanged, refreshed, modified, reworded,
    added), whether the file is written, the name it had (null: the same, or a new patch), its subject."""

    name: str
    status: str
    written: bool
    old_name: str | None
    subject: str


@dataclass
class PlannedPatch:
    """One patch of the exported series and what export does with its file.

    Invariant: *data* is None exactly when the file on disk already holds
    the right bytes (an unchanged patch, or canonical bytes already there);
    *commit* is the commit it is made from.
    """

    name: str
    strip: int
    status: str  # unchanged | refreshed | modified | reworded | added
    commit: str
    subject: str
    old_name: str | None = None
    data: bytes | None = None  # bytes to write; None keeps the file as it is

    def to_json(self) -> PlannedPatchJson:
        return {"name": self.name, "status": self.status, "written": self.data is not None, "old_name": self.old_name, "subject": self.subject}


@dataclass
class ExportPlan:
    """Everything an export writes, computed before any file is touched.

    Invariant: *patches* is the new series in order, one per commit;
    *removed* names only files the old series listed and the new one does
    not; *pending* only files an interrupted export wrote or meant to remove
    that the new series does not list; *interrupted* says a journal was found.
    """

    folder: Path
    display: str
    patches: list[PlannedPatch] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    series_text: bytes | None = None  # None keeps the series file as it is
    pending: list[str] = field(default_factory=list)  # leftovers of an interrupted export
    interrupted: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.writes or self.removed or self.series_text is not None)

    @property
    def needs_writing(self) -> bool:
        """Something to write: a change, or what an older zmr's interrupted export left to finish."""
        return self.changed or bool(self.pending) or self.interrupted

    @property
    def writes(self) -> list[PlannedPatch]:
        return [p for p in self.patches if p.data is not None]

    def summary(self) -> list[str]:
        lines = []
        for item in self.patches:
            if item.status == "unchanged" and item.data is None:
                continue
            if item.status == "reworded":
                lines.append(f"reworded  {item.old_name} -> {item.name}")
            elif item.status == "added":
                lines.append(f"added     {item.name}")
            elif item.data is not None:
                lines.append(f"{item.status:9} {item.name}")
        lines += [f"removed   {name}" for name in self.removed]
        if self.series_text is not None and not any(line.startswith(("added", "removed", "reworded")) for line in lines):
            lines.append("series: order or -p options changed")
        return lines


def list_commits(repo: git.Repo, base: str, tip: str, where: str) -> list[str]:
    """The commits base..tip, oldest first; merges and empty commits are refused."""
    merges = repo.rev_list(["--merges", tip, "--not", base])
    if merges:
        subject = CommitMeta.for_commit(repo.commit_info(merges[0])).subject
        raise ExportError(
            f"{where}: commit {merges[0][:12]} ({subject}) is a merge; a series is linear",
            details=["linearize the branch (git rebase zmr/base), then export again"],
        )
    return repo.commits_between(base, tip)


def plan_export(
    repo: git.Repo,
    base: str,
    commits: Sequence[str],
    folder: Path,
    display: str,
    owned: set[str] | None = None,
    replayed: dict[str, tuple[str, bool]] | None = None,
    *,
    series: Series | None = None,
) -> ExportPlan:
    """What exporting *commits* (on *base*, in *repo*) into the series in *folder* would write.

    *replayed* names, for commits a replay made, the patch each was made from
    and whether it applied with an offset: the same answer a second replay
    would give, without it. *owned*: the names an older zmr's interrupted
    export owned (``zmr.ops.legacy.export_journal_names``; None: no such
    journal). *series*: the one in *folder*, when the caller has
    read it (``Project.series``, whose errors name the manifest line); its
    ``text`` and ``entries`` are the file's, read once.
    """
    if series is None or series.text is None:  # none, or one not read from a folder: the one in *folder*
        series = read_series(folder, display)
    old = list(series.patches)
    plan = ExportPlan(folder, display)
    infos = commit_infos(repo, commits)
    metas = [CommitMeta.for_commit(i) for i in infos]
    parent_trees = _checked_parent_trees(repo, display, commits, infos, metas)
    with TempIndex(repo) as index:
        matcher = _Matcher(index, old, infos, metas, parent_trees)
        in_bulk = _replays_in_bulk(repo, commits, infos, parent_trees, old, matcher.same_position()) if replayed is None and commits else {}
        matcher.match_same(commits, replayed or {}, in_bulk)
        matcher.match_subject()
        matcher.match_change()
    plan.interrupted = owned is not None
    _plan_patches(plan, repo, commits, metas, matcher.assigned, old, owned or set())
    _plan_series(plan, series)
    return plan


def _checked_parent_trees(repo: git.Repo, display: str, commits: Sequence[str], infos: list[git.CommitInfo], metas: list[CommitMeta]) -> list[str]:
    """Each commit's parent tree, once every commit is one a patch can hold (one parent, a change, a subject, a message that survives)."""
    parent_trees: list[str] = []
    for n, (commit, info, meta) in enumerate(zip(commits, infos, metas)):
        if len(info.parents) != 1:
            raise ExportError(f"{display}: commit {commit[:12]} ({meta.subject}) has {len(info.parents)} parents; a series is linear")
        parent_trees.append(infos[n - 1].tree if n and info.parents[0] == commits[n - 1] else repo.tree_of(info.parents[0]))
        if parent_trees[-1] == info.tree:
            raise ExportError(
                f"{display}: commit {commit[:12]} ({meta.subject}) changes nothing",
                details=["drop it (git rebase -i zmr/base) or give it changes, then export again"],
            )
        if not meta.subject:
            raise ExportError(f"{display}: commit {commit[:12]} has an empty subject", details=["reword it (git rebase -i zmr/base)"])
        _refuse_message_cut(display, commit, meta.subject, info.message)
    return parent_trees


class _Matcher:
    """Which old patch each commit is, in three passes (reference §3.4): the same patch, the same subject, the same change."""

    def __init__(self, index: TempIndex, old: list[Patch], infos: list[git.CommitInfo], metas: list[CommitMeta], parent_trees: list[str]) -> None:
        self.index, self.old, self.infos, self.metas, self.parent_trees = index, old, infos, metas, parent_trees
        self.assigned: list[tuple[Patch, str] | None] = [None] * len(metas)
        self.used: set[int] = set()
        self.loaded: str | None = None  # the tree the index holds, when known

    def replays(self, patch: Patch, position: int) -> str | None:
        """'exact' or 'offset' when *patch* turns the commit's parent into the commit's tree."""
        if self.loaded != self.parent_trees[position]:
            self.index.read_tree(self.parent_trees[position])
            self.loaded = self.parent_trees[position]
        proc = self.index.apply(patch, verbose=True)
        if proc.returncode != 0:
            return None  # git apply is all or nothing: the index is unchanged
        tree = self.index.write_tree()
        self.loaded = tree
        if tree != self.infos[position].tree:
            return None
        return "offset" if b"(offset " in proc.stderr else "exact"

    def same_position(self) -> list[int]:
        """The commits whose metadata equals the old patch at their own position: candidates for the bulk replay."""
        return [i for i, meta in enumerate(self.metas) if i < len(self.old) and meta.same_as_patch(self.old[i])]

    def _take(self, i: int, j: int, status: str) -> None:
        self.assigned[i] = (self.old[j], status)
        self.used.add(j)

    def _order(self, i: int) -> list[int]:
        """Old patches to try for commit *i*: the same position first."""
        return ([i] if i < len(self.old) else []) + [j for j in range(len(self.old)) if j != i]

    def match_same(self, commits: Sequence[str], replayed: dict[str, tuple[str, bool]], in_bulk: dict[int, str]) -> None:
        """1. The same patch: metadata equal and the patch replays to the commit."""
        by_name = {patch.name: j for j, patch in enumerate(self.old)}
        for i, meta in enumerate(self.metas):
            name, moved = replayed.get(commits[i], ("", False))
            j = by_name.get(name)
            if j is not None and j not in self.used and meta.same_as_patch(self.old[j]):
                self._take(i, j, "refreshed" if moved else "unchanged")
                continue
            if i in in_bulk and i not in self.used:
                self._take(i, i, "unchanged" if in_bulk[i] == "exact" else "refreshed")
                continue
            for j in self._order(i):
                if j in self.used or not meta.same_as_patch(self.old[j]):
                    continue
                how = self.replays(self.old[j], i)
                if how:
                    self._take(i, j, "unchanged" if how == "exact" else "refreshed")
                    break

    def match_subject(self) -> None:
        """2. The same subject: the patch was edited (content, body, author or date)."""
        for i, meta in enumerate(self.metas):
            if self.assigned[i] is not None:
                continue
            for j, patch in enumerate(self.old):
                if j not in self.used and normalize_subject(patch.subject) == normalize_subject(meta.subject):
                    self._take(i, j, "modified")
                    break

    def match_change(self) -> None:
        """3. The same change under a new subject: reworded."""
        for i in range(len(self.metas)):
            if self.assigned[i] is not None:
                continue
            for j in self._order(i):
                if j not in self.used and self.replays(self.old[j], i):
                    self._take(i, j, "reworded")
                    break


def _plan_patches(
    plan: ExportPlan,
    repo: git.Repo,
    commits: Sequence[str],
    metas: list[CommitMeta],
    assigned: list[tuple[Patch, str] | None],
    old: list[Patch],
    owned: set[str],
) -> None:
    """The patch file of each commit: an old one kept (its name), or a new name and the canonical bytes; removals and leftovers."""
    folder = plan.folder
    old_names = {p.name for p in old}
    taken = {match[0].name for match in assigned if match is not None and match[1] != "reworded"}
    diffs = commit_diffs(repo, [c for c, match in zip(commits, assigned) if match is None or match[1] != "unchanged"])
    for i, (commit, meta) in enumerate(zip(commits, metas)):
        match = assigned[i]
        if match is not None and match[1] != "reworded":
            patch, status = match
            item = PlannedPatch(patch.name, patch.strip, status, commit, meta.subject, old_name=patch.name)
            if status != "unchanged":
                item.data = format_mail(meta, diffs[commit])
                item.strip = 1
        else:
            name = _free_name(_next_number(i, plan.patches), meta.subject, folder, taken, old_names | owned)
            status = "reworded" if match is not None else "added"
            item = PlannedPatch(name, 1, status, commit, meta.subject, old_name=match[0].name if match else None, data=format_mail(meta, diffs[commit]))
        taken.add(item.name)
        if item.data is not None:
            path = folder / item.name
            if path.is_file() and path.read_bytes() == item.data:
                item.data = None  # the canonical bytes are already there
        plan.patches.append(item)
    new_names = [p.name for p in plan.patches]
    plan.removed = sorted(old_names - set(new_names))
    plan.pending = sorted(n for n in owned if n not in new_names and n not in old_names and (folder / n).is_file())


def _plan_series(plan: ExportPlan, series: Series) -> None:
    """The new ``series`` text when the list of patches changed, keeping the old file's comments and layout (as *series* read it)."""
    entries = series.entries
    new_entries = [(p.name, p.strip, p.old_name if p.status != "added" else None) for p in plan.patches]
    if [(e.name, e.strip) for e in entries] != [(n, s) for n, s, _ in new_entries]:
        plan.series_text = render_series(series.text or "", entries, new_entries).encode("utf-8")


def _refuse_message_cut(display: str, commit: str, subject: str, message: str) -> None:
    """Exit 2 for a commit whose message a patch file cannot hold whole (``patchfile.message_cut``), naming the line."""
    cut = message_cut(message)
    if cut is None:
        return
    raise ExportError(
        f"{display}: commit {commit[:12]} ({subject}): line {cut[0]} of its message, `{cut[1]}`, would cut the message in a patch file",
        details=[
            "a patch file ends its message at a `---`, `--- ...` or `Index: ...` line, and git apply reads a diff at a `diff --git` line: "
            "the rest of the message would be lost when the series is checked out, or the patch would not apply",
            "reword the commit (git rebase -i zmr/base): indent that line or change its first characters; then export again",
        ],
    )


def _replays_in_bulk(
    repo: git.Repo, commits: Sequence[str], infos: Sequence[git.CommitInfo], parent_trees: Sequence[str], old: Sequence[Patch], positions: Sequence[int]
) -> dict[int, str]:
    """For commits at *positions* (each with the metadata of the patch at its position): 'exact' or 'offset' where that patch replays to it.

    The answer ``replays`` gives one patch at a time (two git processes
    each: 10 ms a patch, 50 s for a no-op export of 5,000), for many at
    once. The commits are linear, so the entries of every commit's tree at
    the paths the series touches follow from the first parent's and each
    commit's changes (one ``diff-tree --stdin``). Patches are then put in
    layers of pairwise disjoint files; for a layer, an index holds, at each
    patch's files, the entries of its commit's parent, and one ``git apply``
    applies them all: a patch replays to its commit exactly when the index
    then holds its commit's entries there and the commit changes nothing
    else. A position this cannot decide (a layer that does not apply, an
    offset git's report cannot place) is left out; the caller replays it alone.
    """
    if len(positions) < 2 or any(infos[n].parents[0] != commits[n - 1] for n in range(1, len(commits))):
        return {}
    files = patch_file_sets(repo, old)
    if files is None:
        return {}
    keys = {n: {path.encode("utf-8", "surrogateescape") for path in files[n]} for n in positions}
    touched = set().union(*keys.values())
    state: dict[bytes, tuple[str, str]] = {}
    pathspecs = sorted(p.decode("utf-8", "surrogateescape") for p in touched)
    for listed in repo.ls_tree(parent_trees[0], pathspecs):
        if listed.path_bytes in touched:
            state[listed.path_bytes] = (listed.mode, listed.oid)
    changes = _commit_changes(repo, commits)
    before: dict[int, dict[bytes, tuple[str, str]]] = {}
    after: dict[int, dict[bytes, tuple[str, str] | None]] = {}
    wanted = set(positions)
    for n, commit in enumerate(commits):
        changed = changes.get(commit, {})
        if n in wanted and set(changed) <= keys[n]:
            before[n] = {path: state[path] for path in keys[n] if path in state}
        for path, entry in changed.items():
            if entry is None:
                state.pop(path, None)
            else:
                state[path] = entry
        if n in before:
            after[n] = {path: state.get(path) for path in keys[n]}
    # Layers: a patch goes one past the last layer that holds any of its files (per -p level).
    layers: dict[tuple[int, int], list[int]] = {}
    last: dict[tuple[int, bytes], int] = {}
    for n in sorted(before):
        strip = old[n].strip
        level = 1 + max((last.get((strip, path), -1) for path in keys[n]), default=-1)
        layers.setdefault((strip, level), []).append(n)
        for path in keys[n]:
            last[(strip, path)] = level
    result: dict[int, str] = {}
    with TempIndex(repo) as index:
        for layer in layers.values():
            index.hold({path: entry for n in layer for path, entry in before[n].items()}, len(parent_trees[0]) // 2)
            proc = index.apply_all([old[n] for n in layer])
            if proc.returncode != 0:
                continue
            moved = _moved_by_patch(proc.stderr, [files[n] for n in layer])
            held = index.entries()
            for k, n in enumerate(layer):
                if moved[k] is not None and all(held.get(path) == entry for path, entry in after[n].items()):
                    result[n] = "offset" if moved[k] else "exact"
    return result


def _commit_changes(repo: git.Repo, commits: Sequence[str]) -> dict[str, dict[bytes, tuple[str, str] | None]]:
    """Per commit, the entries it changes against its parent: path → (mode, id), None where it deletes; one ``diff-tree --stdin``."""
    changes = repo.diff_tree_raw(commits, always=True)
    return {commit: {change.path_bytes: change.new_entry for change in entries} for commit, entries in changes.items()}


def commit_infos(repo: git.Repo, commits: Sequence[str]) -> list[git.CommitInfo]:
    """Parsed commit objects, read with one ``git cat-file --batch``."""
    if not commits:
        return []
    infos = []
    for commit, obj in zip(commits, repo.cat_file_batch(commits)):
        if obj is None or obj.type != "commit":
            raise ExportError(f"{commit} is {'missing' if obj is None else 'a ' + obj.type}, not a commit")
        infos.append(git.CommitInfo.parse(obj.oid, obj.content))
    return infos


_NUMBER = r"(\d{4})-"  # compiled (and kept) by re when first used, as zmr.infra.git's patterns (here too _ENTRY)


def _next_number(index: int, before: Sequence[PlannedPatch]) -> int:
    """The NNNN of a new patch at *index*: its position, or after the patch before it (a kept ``0003-`` after a drop: ``0004-``)."""
    match = re.match(_NUMBER, before[-1].name.rsplit("/", 1)[-1]) if before else None
    return max(index + 1, int(match.group(1)) + 1 if match else 0)


def _free_name(position: int, subject: str, folder: Path, taken: set[str], ours: set[str]) -> str:
    """``NNNN-<slug>.patch``, or ``…-N.patch`` when another patch or a file that is not *ours* has that name."""
    base = patch_name(position, subject)
    candidate, n = base, 1
    while candidate in taken or ((folder / candidate).exists() and candidate not in ours):
        n += 1
        candidate = base.removesuffix(".patch") + f"-{n}.patch"
    return candidate


_ENTRY = r"^(\s*)(\S+)((?:\s+-p\d+)*)(\s*#.*)?\s*$"


def render_series(old_text: str, old_entries: list[SeriesEntry], new: list[tuple[str, int, str | None]]) -> str:
    """The series text for *new* (name, strip, old name or None), keeping *old_text*'s comments.

    A comment block directly above an entry moves and goes with it; blank
    lines and other comments stay where they are; new entries follow the
    entry they follow in the new order.
    """
    lines = old_text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    by_line = {e.line: e for e in old_entries}
    items: list[tuple[str, object]] = []  # ("free", line) | ("entry", (entry, comments, raw))
    pending: list[str] = []
    for number, raw in enumerate(lines, start=1):
        if number in by_line:
            items.append(("entry", (by_line[number], pending, raw)))
            pending = []
        elif raw.lstrip().startswith("#"):
            pending.append(raw)
        else:
            items += [("free", c) for c in pending]
            pending = []
            items.append(("free", raw))
    items += [("free", c) for c in pending]
    old_by_name: dict[str, tuple[SeriesEntry, list[str], str]] = {}
    for kind, value in items:
        if kind == "entry":
            entry_value = cast(tuple[SeriesEntry, list[str], str], value)
            old_by_name[entry_value[0].name] = entry_value
    surviving = [n for n in new if n[2] is not None and n[2] in old_by_name]
    surviving_old = {n[2] for n in surviving}

    def render(item: tuple[str, int, str | None]) -> list[str]:
        name, strip, old_name = item
        if old_name is None or old_name not in old_by_name:
            return [name + (f" -p{strip}" if strip != 1 else "")]
        entry, comments, raw = old_by_name[old_name]
        if entry.name == name and entry.strip == strip:
            return [*comments, raw]
        match = re.match(_ENTRY, raw)
        indent, options, comment = (match.group(1), match.group(3), match.group(4) or "") if match else ("", "", "")
        if entry.strip != strip:
            options = f" -p{strip}" if strip != 1 else ""
        return [*comments, f"{indent}{name}{options}{comment}"]

    # Group the new order into runs: a surviving entry followed by the new ones after it.
    leading: list[tuple[str, int, str | None]] = []
    runs: list[list[tuple[str, int, str | None]]] = []
    for item in new:
        if item in surviving:
            runs.append([item])
        elif runs:
            runs[-1].append(item)
        else:
            leading.append(item)
    out: list[str] = []
    slot = 0
    placed_leading = False
    for kind, value in items:
        if kind == "free":
            out.append(value)  # type: ignore[arg-type]
            continue
        entry = value[0]  # type: ignore[index]
        if entry.name not in surviving_old:
            if not surviving and not placed_leading:
                out += [line for item in leading for line in render(item)]
                placed_leading = True
            continue
        if not placed_leading:
            out += [line for item in leading for line in render(item)]
            placed_leading = True
        for item in runs[slot]:
            out += render(item)
        slot += 1
    if not placed_leading:
        out += [line for item in leading for line in render(item)]
    return "\n".join(out) + "\n" if out else ""


def _refuse_links(folder: Path, name: str, display: str) -> None:
    """A name of the series must not reach through a symbolic link inside *folder*: writing or removing it would act elsewhere."""
    path = folder
    for part in Path(name).parent.parts:
        path = path / part
        if path.is_symlink():
            shown = f"{display}/{path.relative_to(folder).as_posix()}"
            raise ZmrError(
                f"{shown}: is a symbolic link; zmr writes and removes series files only in real folders",
                details=[f"replace {shown} with a real folder, then run again"],
            )


def stage_plan(plan: ExportPlan, txn: Transaction) -> None:
    """The writes and removals of *plan* added to *txn* (zmr.infra.transaction): written all together when it commits."""
    for name in [*(item.name for item in plan.writes), *plan.removed, *plan.pending]:
        _refuse_links(plan.folder, name, plan.display)  # all checked before the first write
    for item in plan.writes:
        txn.write(plan.folder / item.name, item.data or b"")
    if plan.series_text is not None:
        txn.write(plan.folder / "series", plan.series_text)
    for name in sorted(set(plan.removed + plan.pending)):
        txn.remove(plan.folder / name)
