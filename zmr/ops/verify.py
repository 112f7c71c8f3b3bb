"""`zmr verify`: rebuild each release branch in memory and compare its commit ids with the branch (docs/reference.md §7.5).

Verification builds exactly what `zmr build` would write (`zmr.ops.build.compute`,
on the same temporary index and `commit-tree` path) and compares commit ids;
where they differ, `explain_drift` names what differs: the snapshot tree, the
changes tree, or only the metadata. It writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from zmr.infra import git
from zmr.infra.cache import Cache
from zmr.infra.git import Progress
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.model.project import Project
from zmr.ops.build import Release, compute
from zmr.infra.reports import Report

# The trailer names live beside the check that reads them (zmr.model.provenance); zmr.ops.build.TRAILER_* stay importable.
from zmr.model.provenance import TRAILER_SERIES, TRAILER_UPSTREAM_COMMIT


class VerifyResultJson(TypedDict):
    """A release branch: ok, missing or differs; the commit zmr builds (*expected*) and where the branch is (null: absent)."""

    model: str
    component: str
    branch: str
    status: str
    expected: str
    actual: str | None
    reasons: list[str]


class VerifyJson(TypedDict):
    """``ok``: no branch drifted; *remote*: the remote compared with (null: the local branches)."""

    ok: bool
    remote: str | None
    branches: list[VerifyResultJson]


@dataclass
class VerifyResult:
    component: Component
    branch: str
    status: str  # ok | missing | differs
    expected: str
    actual: str | None
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> VerifyResultJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "branch": self.branch,
            "status": self.status,
            "expected": self.expected,
            "actual": self.actual,
            "reasons": self.reasons,
        }


@dataclass(frozen=True)
class VerifyReport(Report):
    """What ``zmr verify`` found: one result per release branch, compared with local branches or *remote*'s."""

    results: list[VerifyResult]
    remote: str | None

    @property
    def drifted(self) -> list[VerifyResult]:
        return [r for r in self.results if r.status != "ok"]

    def failed(self) -> bool:
        """The check failed: a branch drifted (`zmr verify` exits 1)."""
        return bool(self.drifted)

    def reason(self) -> str:
        """Why it failed, in one line ('' when it did not)."""
        bad, count = self.drifted, len(self.results)
        return f"{len(bad)} of {count} branch{'es' if count != 1 else ''} drifted: " + ", ".join(r.branch for r in bad) if bad else ""

    def to_json(self) -> VerifyJson:
        return {"ok": not self.drifted, "remote": self.remote, "branches": [r.to_json() for r in self.results]}


def verify(
    project: Project, components: Sequence[Component], remote: str | None = None, cache: Cache | None = None, progress: Progress | None = None
) -> list[VerifyResult]:
    """Rebuild in memory and compare with the local branches, or with *remote*'s."""
    cache = cache or Cache()
    repo = project.repo
    if remote is None:
        actual_refs = repo.refs("refs/heads/")
    else:
        repo.check_remote(remote)
        actual_refs = repo.ls_remote(remote, [f"refs/heads/{c.branch}" for c in components])
    series = project.series_of(components)  # every broken series named at once, before any fetch
    results = []
    for comp in components:
        rel = compute(project, comp, cache, progress, partial=True, series=series[comp])
        actual = actual_refs.get(rel.ref)
        result = VerifyResult(comp, comp.branch, "ok", rel.tip, actual)
        if actual is None:
            result.status = "missing"
            result.reasons.append("branch not found" + (f" on {remote}" if remote else "; run `zmr build`"))
        elif actual != rel.tip:
            result.status = "differs"
            if not repo.has_object(actual, "commit") and remote is not None:
                repo.fetch(remote, [rel.ref], extra=["--refmap="])  # what it compares with; remote-tracking refs stay
            result.reasons = explain_drift(rel, repo, actual)
        results.append(result)
    return results


def explain_drift(rel: Release, repo: git.Repo, actual: str) -> list[str]:
    """How a branch differs from the expected release, in words.

    The expected commits live in the mirror, the branch in *repo*: each side
    is read from its own repository.
    """
    if not repo.has_object(actual, "commit"):
        return [f"commit {actual[:12]} is not available locally"]
    built = rel.mirror.repo
    reasons: list[str] = []
    history = repo.rev_list(["--max-count=16", "--topo-order", actual])
    roots = repo.rev_list(["--max-parents=0", actual])
    expected_count = len(rel.commits)
    if len(history) != expected_count or len(roots) != 1:
        count = f"{len(history)}+ commits" if len(history) == 16 else counted(len(history), "commit")
        reasons.append(f"has {count}, expected {expected_count} with a single root")
    root = roots[0] if roots else history[-1]
    root_info = repo.commit_info(root)
    tip_info = repo.commit_info(actual)
    # A commit without zmr's trailers was made by hand: its metadata differs by nature; what matters is its tree.
    hand_made = [not any(k.startswith("Zmr-") for k in info.trailers()) for info in (root_info, tip_info)]
    if rel.component.release == "two-commit":
        if root_info.tree != rel.upstream_tree:
            reasons.append(f"snapshot tree differs from upstream {rel.component.commit[:12]} ({changed_paths(built, rel.upstream_tree, repo, root_info.tree)})")
        elif root != rel.commits[0]:
            reasons.append(_same_tree("snapshot", built.commit_info(rel.commits[0]), root_info, hand_made[0]))
        upstream_commit = root_info.trailers().get(TRAILER_UPSTREAM_COMMIT)
        if upstream_commit is None and not hand_made[0]:
            reasons.append(f"snapshot has no {TRAILER_UPSTREAM_COMMIT} trailer (expected {rel.component.commit})")
        elif upstream_commit is not None and upstream_commit != rel.component.commit:
            reasons.append(f"snapshot trailer {TRAILER_UPSTREAM_COMMIT} is {upstream_commit}, expected {rel.component.commit}")
    if tip_info.tree != rel.tree:
        reasons.append(f"changes tree differs ({changed_paths(built, rel.tree, repo, tip_info.tree)})")
    elif actual != rel.tip and (not reasons or all("trees identical" in r for r in reasons)):
        reasons.append(_same_tree("changes", built.commit_info(rel.tip), tip_info, hand_made[1]))
    series_trailer = tip_info.trailers().get(TRAILER_SERIES)
    if series_trailer is None and not hand_made[1]:
        reasons.append(f"tip has no {TRAILER_SERIES} trailer")
    elif series_trailer is not None and series_trailer != rel.series.digest():
        reasons.append(f"series digest differs: branch {series_trailer}, series {rel.series.digest()}")
    return reasons


def _same_tree(label: str, expected: git.CommitInfo, actual: git.CommitInfo, hand_made: bool) -> str:
    """A commit whose tree is right and whose metadata is not, in words."""
    return f"{label} metadata differs ({_meta_diff(expected, actual)}), trees identical" + ("; not built by zmr" if hand_made else "")


def _meta_diff(expected: git.CommitInfo, actual: git.CommitInfo) -> str:
    fields = (
        ("message", expected.message, actual.message),
        ("author", expected.author, actual.author),
        ("committer", expected.committer, actual.committer),
        ("parents", len(expected.parents), len(actual.parents)),
    )
    return ", ".join(name for name, a, b in fields if a != b) or "metadata"


def changed_paths(expected_repo: git.Repo, expected_tree: str, actual_repo: git.Repo, actual_tree: str) -> str:
    """The paths whose entries differ between two trees held in two repositories."""
    expected = _tree_entries(expected_repo, expected_tree)
    actual = _tree_entries(actual_repo, actual_tree)
    names = sorted(p for p in expected.keys() | actual.keys() if expected.get(p) != actual.get(p))
    shown = ", ".join(names[:5]) + (f", ... ({counted(len(names), 'file')})" if len(names) > 5 else "")
    return shown or "trees differ"


def _tree_entries(repo: git.Repo, tree: str) -> dict[str, git.TreeEntry]:
    if not repo.has_object(tree, "tree"):
        return {}
    return {entry.path: entry for entry in repo.ls_tree(tree)}
