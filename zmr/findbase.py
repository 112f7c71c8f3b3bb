"""``zmr import --find-base``: the upstream commit a single snapshot commit was most likely made from.

A hand-made branch of one commit (upstream tree plus changes, no upstream
commit named) hides its base. The commits of the upstream's history around
the snapshot's date are compared with the snapshot's tree; the distance of a
candidate is the number of paths whose entries differ (one ``git diff-tree
--stdin`` for all of them). The closest commit is the base only when no other
commit is as close: on a tie zmr names the candidates and asks for ``--base``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from zmr import git

DAY = 24 * 3600
WINDOW_BEFORE = 120 * DAY  # snapshots are made from a recent upstream commit
WINDOW_AFTER = 2 * DAY  # clocks and time zones
MAX_CANDIDATES = 500
SHOWN = 5


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


def find_base(repo: git.Repo, tree: str, when: int) -> BaseSearch:
    """Commits of every ref of *repo* around *when* (Unix time), by their distance to *tree*."""
    fields = repo.out(
        ["log", "--all", "--format=%H %T %ct", f"--since={when - WINDOW_BEFORE}", f"--until={when + WINDOW_AFTER}", f"--max-count={MAX_CANDIDATES}"]
    )
    if not fields.strip():
        # Nothing in the window (an old snapshot of a quiet upstream): the newest commits before it.
        fields = repo.out(["log", "--all", "--format=%H %T %ct", f"--until={when + WINDOW_AFTER}", "--max-count=50"])
    rows = [line.split() for line in fields.splitlines() if line.strip()]
    distances = tree_distances(repo, [tree_id for _, tree_id, _ in rows], tree)
    found = [Candidate(commit, distances[i], int(stamp)) for i, (commit, _, stamp) in enumerate(rows)]
    found.sort(key=lambda c: (c.distance, -c.timestamp, c.commit))
    return BaseSearch(tuple(found))


def tree_distances(repo: git.Repo, trees: Sequence[str], target: str) -> list[int]:
    """For each of *trees*, how many paths differ from *target* (one diff-tree for all)."""
    if not trees:
        return []
    if not repo.has_object(target, "tree"):
        raise ValueError(f"tree {target} is not in {repo.git_dir}")  # diff-tree --stdin would say nothing
    unique = list(dict.fromkeys(trees))
    stdin = "".join(f"{t} {target}\n" for t in unique).encode()
    out = repo.run(["diff-tree", "--stdin", "-r", "--name-only", "-z", "--no-renames"], input=stdin).stdout
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
