"""``zmr import --find-base``: the upstream commit a single snapshot commit was most likely made from.

A hand-made branch of one commit (upstream tree plus changes, no upstream
commit named) hides its base. Every commit on the first-parent lines of the
upstream's branches and tags is a candidate, however old; its distance is
the number of paths whose entries differ from the snapshot's tree. The
closest commit is the base only when no other commit is as close: on a tie
zmr names the candidates and asks for ``--base``.

Trees, never checkouts, and a bounded number of git processes whatever the
history's length (docs/reference.md §7.10, benchmarks/findbase.md): one
commit of each connected part of the first-parent graph (usually one) is
compared with the snapshot directly; every other commit's distance follows
along first-parent edges, corrected at the paths the commit of each edge
changes (one ``diff-tree --stdin`` over all edges, compared with the
snapshot's entries from one ``ls-tree``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from zmr.infra import git
from zmr.infra.cache import HISTORY_REFS

# Where a history mirror keeps the upstream's branches and tags (zmr.infra.cache, docs/reference.md §8.4), as git log takes them.
HISTORY_GLOBS = tuple(f"--glob={prefix}*" for prefix in HISTORY_REFS)
SHOWN = 5

Entry = tuple[str, str]  # (mode, object id) of a path in a tree


@dataclass(frozen=True)
class Candidate:
    commit: str
    distance: int  # paths that differ from the snapshot tree
    timestamp: int  # committer date


@dataclass(frozen=True)
class BaseSearch:
    candidates: tuple[Candidate, ...]  # closest first (ties: newest first)

    @property
    def best(self) -> Candidate | None:
        """The closest commit, when it is the only one at that distance."""
        if not self.candidates:
            return None
        first = self.candidates[0]
        if len(self.candidates) > 1 and self.candidates[1].distance == first.distance:
            return None
        return first

    def lines(self) -> list[str]:
        return [f"{c.commit[:12]}  {c.distance} path{'s' if c.distance != 1 else ''} differ{'s' if c.distance == 1 else ''}" for c in self.candidates[:SHOWN]]


def find_base(repo: git.Repo, tree: str, refs: Sequence[str] = HISTORY_GLOBS) -> BaseSearch:
    """Every commit on the first-parent lines of *refs* in *repo*, by its distance to *tree*."""
    listing = repo.first_parent_log(refs, "%H %T %ct %P")
    order: list[str] = []
    tree_of: dict[str, str] = {}
    stamps: dict[str, int] = {}
    parent_of: dict[str, str] = {}
    for line in listing.splitlines():
        commit, commit_tree, stamp, *parents = line.split()
        order.append(commit)
        tree_of[commit], stamps[commit] = commit_tree, int(stamp)
        if parents:
            parent_of[commit] = parents[0]
    if not order:
        return BaseSearch(())
    children: dict[str, list[str]] = {}
    for commit, parent in parent_of.items():
        if parent in tree_of:
            children.setdefault(parent, []).append(commit)
    # One commit of each connected part of the first-parent graph is compared with the snapshot directly ...
    part_of: dict[str, str] = {}
    for start in order:
        if start in part_of:
            continue
        part_of[start] = start
        stack = [start]
        while stack:
            for other in (parent_of.get(stack[-1]), *children.get(stack.pop(), ())):
                if other is not None and other in tree_of and other not in part_of:
                    part_of[other] = start
                    stack.append(other)
    starts = list(dict.fromkeys(part_of.values()))
    distance = dict(zip(starts, tree_distances(repo, [tree_of[c] for c in starts], tree)))
    # ... and every other one follows along an edge, corrected at the paths that edge's commit changes.
    target = _entries(repo, tree)
    changes = _pair_changes(repo, [(tree_of[parent_of[c]], tree_of[c]) for c in order if parent_of.get(c) in tree_of])

    def delta(commit: str) -> int:
        """distance(first parent) - distance(commit)."""
        total = 0
        for path, (before, after) in changes.get((tree_of[parent_of[commit]], tree_of[commit]), {}).items():
            want = target.get(path)
            total += (before != want) - (after != want)
        return total

    stack = list(starts)
    while stack:
        commit = stack.pop()
        first = parent_of.get(commit)
        if first is not None and first in tree_of and first not in distance:
            distance[first] = distance[commit] + delta(commit)
            stack.append(first)
        for child in children.get(commit, ()):
            if child not in distance:
                distance[child] = distance[commit] - delta(child)
                stack.append(child)
    found = [Candidate(c, distance[c], stamps[c]) for c in order]
    found.sort(key=lambda c: (c.distance, -c.timestamp, c.commit))
    return BaseSearch(tuple(found))


def _entries(repo: git.Repo, tree: str) -> dict[bytes, Entry]:
    """Path → (mode, id) of every blob and gitlink of *tree*."""
    return {entry.path_bytes: (entry.mode, entry.oid) for entry in repo.ls_tree(tree)}


def _pair_changes(repo: git.Repo, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[bytes, tuple[Entry | None, Entry | None]]]:
    """For each (parent tree, tree): the paths that differ, with the parent's and the tree's entries (None: absent); one diff-tree."""
    unique = list(dict.fromkeys(pairs))
    if not unique:
        return {}
    result: dict[tuple[str, str], dict[bytes, tuple[Entry | None, Entry | None]]] = {}
    for line, changes in repo.diff_tree_raw([f"{old} {new}" for old, new in unique]).items():
        old, new = line.split()
        result[(old, new)] = {change.path_bytes: (change.old_entry, change.new_entry) for change in changes}
    return result


def tree_distances(repo: git.Repo, trees: Sequence[str], target: str) -> list[int]:
    """For each of *trees*, how many paths differ from *target* (one diff-tree for all)."""
    if not trees:
        return []
    if not repo.has_object(target, "tree"):
        raise ValueError(f"tree {target} is not in {repo.git_dir}")  # diff-tree --stdin would say nothing
    unique = list(dict.fromkeys(trees))
    stdin = "".join(f"{t} {target}\n" for t in unique).encode()
    out = repo.diff_tree(["--stdin", "-r", "--name-only", "-z", "--no-renames"], input=stdin).stdout
    counts: dict[str, int] = {}
    pos = 0
    for index, tree in enumerate(unique):
        header = f"{tree} {target}\n".encode()
        start = out.find(header, pos)
        if start < 0:  # git prints nothing for equal trees
            counts[tree] = 0
            continue
        start += len(header)
        end = len(out)
        for later in unique[index + 1 :]:
            found = out.find(f"{later} {target}\n".encode(), start)
            if found >= 0:
                end = found
                break
        counts[tree] = out[start:end].count(b"\0")
        pos = end
    return [counts[t] for t in trees]
