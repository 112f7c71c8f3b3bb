"""Release branches: build them reproducibly, and verify published ones (docs/reference.md §4).

Pipeline for one component, entirely in git plumbing inside the cache's
mirror (no working tree is ever checked out)::

    pin ──zmr.ops.replay.apply_series (temporary index, git apply --cached)──▶ tree
        ──commit-tree──▶ snapshot (root, upstream tree) ──commit-tree──▶ changes

Commit ids are a pure function of (upstream tree, series bytes, manifest,
release identity): author and committer are the release identity, the
snapshot's date is the upstream commit's committer date, the changes'
date the newest of that and the patches' author dates. Nothing comes from
the clock, the machine or the user's git config.

``build`` then copies the new objects into the zmr repository (a plain
local fetch: the repository never borrows objects from the cache) and moves
every branch of the run in one ``update-ref --stdin`` transaction. A branch
whose tip zmr did not build (``zmr.model.provenance``: a hand-made branch, a commit
added by hand) is replaced all the same, but its old tip is kept as
``refs/zmr/replaced/<branch>/<old-id>`` in that same transaction, and said.
``verify`` runs the same computation and only compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from zmr.infra.reports import Report

from zmr.infra import git
from zmr.infra.cache import Cache, Mirror
from zmr.infra.errors import ZmrError
from zmr.infra.git import Progress
from zmr.infra.lock import hold
from zmr.infra.wording import counted
from zmr.model.manifest import Component
from zmr.model.project import Project

# The trailer names live beside the check that reads them (zmr.model.provenance); zmr.ops.build.TRAILER_* stay importable.
from zmr.model.provenance import TRAILER_COMPONENT, TRAILER_MODEL, TRAILER_SERIES, TRAILER_UPSTREAM, TRAILER_UPSTREAM_COMMIT, not_built_by_zmr, replaced_ref
from zmr.model.series import Series, is_dotgit
from zmr.ops.replay import apply_series, patch_file_sets


@dataclass(frozen=True)
class Release:
    """The release commits computed for one component."""

    component: Component
    mirror: Mirror
    upstream_tree: str
    tree: str  # tree of the tip: upstream + series
    commits: tuple[str, ...]  # oldest first: (snapshot, changes) or (snapshot,)
    series: Series

    @property
    def tip(self) -> str:
        return self.commits[-1]

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.component.branch}"


class BranchUpdateJson(TypedDict):
    """A release branch: its tip before (null: it was created) and after, and the ref that keeps an old tip zmr did not build."""

    branch: str
    old: str | None
    new: str
    status: Literal["created", "unchanged", "updated"]
    old_tip_kept_as: str | None


class BuildJson(TypedDict):
    """What ``zmr build`` moved: one entry per release branch."""

    branches: list[BranchUpdateJson]


@dataclass(frozen=True)
class BranchUpdate:
    branch: str
    old: str | None
    new: str
    kept: str | None = None  # the ref keeping an old tip zmr did not build

    @property
    def status(self) -> Literal["created", "unchanged", "updated"]:
        if self.old is None:
            return "created"
        return "unchanged" if self.old == self.new else "updated"

    def to_json(self) -> BranchUpdateJson:
        return {"branch": self.branch, "old": self.old, "new": self.new, "status": self.status, "old_tip_kept_as": self.kept}


@dataclass(frozen=True)
class BuildReport(Report):
    """What ``zmr build`` moved: one update per release branch."""

    updates: list[BranchUpdate]

    def to_json(self) -> BuildJson:
        return {"branches": [u.to_json() for u in self.updates]}


# -- computing release commits -------------------------------------------------------


def compute(
    project: Project, component: Component, cache: Cache, progress: Progress | None = None, *, partial: bool = False, series: Series | None = None
) -> Release:
    """The release commits of *component*, written into its mirror (not into the repository).

    *series*: the component's series when the caller has read it already (``build``, ``verify``, ``zmr diff``).

    *partial*: the ids are all that is wanted (verify), so the mirror needs
    the pin's trees and only the blobs the series touches; the commits are
    then not copyable until the cache fetches the rest (``build`` asks for it).
    A mirror that git finds damaged on the way is quarantined and fetched
    again, once (``Cache.recover``).
    """
    try:
        return _compute(project, component, cache, progress, partial=partial, series=series)
    except git.DamagedRepoError as err:
        if not cache.for_component(component, project.root).recover(err):
            raise
        return _compute(project, component, cache, progress, partial=partial, series=series)


def _compute(project: Project, component: Component, cache: Cache, progress: Progress | None, *, partial: bool, series: Series | None) -> Release:
    if series is None:
        series = project.series(component)
    if progress:
        progress(f"{component.label}: fetching {component.commit[:12]} from {component.upstream}")
    paths = _series_paths(project, series) if partial else None
    mirror = cache.for_component(component, project.root).ensure([component.commit], paths=paths)
    repo = mirror.repo
    upstream = repo.commit_info(component.commit)
    upstream_tree = upstream.tree
    check_tree(repo, upstream_tree, f"{component.label}: upstream {component.commit[:12]}")
    if progress:
        progress(f"{component.label}: applying {counted(len(series.patches), 'patch')}")
    tree = apply_series(repo, component, upstream_tree, series.patches, missing_ok=partial) if series.patches else upstream_tree
    identity = _identity(project, _commit_timestamp(upstream.committer))
    if component.release == "snapshot":
        message = _snapshot_only_message(component, series)
        commits: tuple[str, ...] = (repo.commit_tree(tree, [], message, _dated(identity, series), _dated(identity, series)),)
    else:
        snapshot = repo.commit_tree(upstream_tree, [], _snapshot_message(component), identity, identity)
        changes_identity = _dated(identity, series)
        changes = repo.commit_tree(tree, [snapshot], _changes_message(component, series), changes_identity, changes_identity)
        commits = (snapshot, changes)
    return Release(component, mirror, upstream_tree, tree, commits, series)


# Trees found checkout-safe in this process: ids name contents, so one look per tree (six components on one pin) is enough.
_SAFE_TREES: set[str] = set()


def check_tree(repo: git.Repo, tree: str, what: str) -> None:
    """Refuse *tree* when it holds an entry git would not check out, as ``git fsck`` names it (exit 2, the entry's path named)."""
    if tree in _SAFE_TREES:
        return
    found = unsafe_tree_entry(repo, tree)
    if found:
        path, reason = found
        raise ZmrError(
            f"{what} has a tree entry {path!r} that git would not check out ({reason})",
            details=["`git fsck` reports it too; pin a commit whose tree git can check out, or ask upstream to fix the tree"],
        )
    _SAFE_TREES.add(tree)


def unsafe_tree_entry(repo: git.Repo, tree: str) -> tuple[str, str] | None:
    """The first entry of *tree* (recursively) that git would refuse to check out, as (path, fsck's name and why); None."""
    oid_bytes = len(tree) // 2
    for folder, raw in repo.subtrees(tree):
        try:
            entries = git.tree_entries(raw, oid_bytes)
        except ValueError as err:
            return folder or ".", f"badTree: {err}"
        for _, name_bytes in entries:
            name = name_bytes.decode("utf-8", "surrogateescape")
            path = f"{folder}/{name}" if folder else name
            reason = _entry_name_problem(name)
            if reason:
                return path, reason
    return None


def _entry_name_problem(name: str) -> str:
    """fsck's name for a tree entry name git refuses, and why; ''."""
    if not name:
        return "emptyName: an empty name"
    if name == ".":
        return "hasDot: '.'"
    if name == "..":
        return "hasDotdot: '..'"
    if "/" in name:
        return "fullPathname: a name holding '/'"
    if is_dotgit(name):
        return "hasDotgit: .git" + ("" if name == ".git" else " in disguise")
    return ""


def _series_paths(project: Project, series: Series) -> frozenset[str] | None:
    """Every path the series reads or writes, as ``git apply`` sees them; None (fetch everything) when that cannot be told."""
    sets = patch_file_sets(project.repo, series.patches) if series.patches else []
    return None if sets is None else frozenset[str]().union(*sets)


def _commit_timestamp(signature: str) -> int:
    # "Name <email> 1700000000 +0100"
    parts = signature.rsplit(" ", 2)
    return int(parts[1])


def _identity(project: Project, timestamp: int) -> git.Identity:
    return git.Identity(project.settings.release_name, project.settings.release_email, timestamp)


def _dated(identity: git.Identity, series: Series) -> git.Identity:
    stamps = [p.timestamp for p in series.patches if p.timestamp is not None]
    newest = max([identity.timestamp, *stamps])
    return git.Identity(identity.name, identity.email, newest)


def _snapshot_message(component: Component) -> str:
    return (
        f"{component.model}/{component.key}: upstream snapshot {component.commit[:12]}\n\n"
        f"The tree of {component.upstream} at {component.commit},\n"
        "unmodified. The next commit holds the zero-mismatch changes.\n\n"
        f"{TRAILER_UPSTREAM}: {component.upstream}\n"
        f"{TRAILER_UPSTREAM_COMMIT}: {component.commit}\n"
    )


def _patch_list(series: Series) -> str:
    if not series.patches:
        return "No patches.\n"
    lines = [f"Patches ({len(series.patches)}):", ""]
    lines += [f"- {p.subject}" for p in series.patches]
    return "\n".join(lines) + "\n"


def _series_trailers(component: Component, series: Series, *, with_upstream: bool) -> str:
    lines = [f"{TRAILER_MODEL}: {component.model}", f"{TRAILER_COMPONENT}: {component.key}"]
    if with_upstream:
        lines.append(f"{TRAILER_UPSTREAM}: {component.upstream}")
    lines += [f"{TRAILER_UPSTREAM_COMMIT}: {component.commit}", f"{TRAILER_SERIES}: {series.digest()}"]
    return "\n".join(lines) + "\n"


def _changes_message(component: Component, series: Series) -> str:
    return f"{component.model}/{component.key}: zero-mismatch changes\n\n{_patch_list(series)}\n" + _series_trailers(component, series, with_upstream=False)


def _snapshot_only_message(component: Component, series: Series) -> str:
    return (
        f"{component.model}/{component.key}: upstream {component.commit[:12]} with zero-mismatch changes\n\n"
        f"The tree of {component.upstream} at {component.commit}\n"
        f"with the series applied.\n\n{_patch_list(series)}\n" + _series_trailers(component, series, with_upstream=True)
    )


# -- build ---------------------------------------------------------------------------


def build(project: Project, components: Sequence[Component], cache: Cache | None = None, progress: Progress | None = None) -> list[BranchUpdate]:
    """Compute every release, copy the objects in, then move all branches at once."""
    cache = cache or Cache()
    repo = project.repo
    series = project.series_of(components)  # every broken series named at once, before any fetch
    releases = [compute(project, comp, cache, progress, series=series[comp]) for comp in components]
    before = repo.refs("refs/heads/")
    by_mirror: dict[Path, list[Release]] = {}
    for rel in releases:
        if not repo.has_object(rel.tip, "commit"):
            by_mirror.setdefault(rel.mirror.path, []).append(rel)
    for rels in by_mirror.values():
        if progress:
            progress(f"copying objects of {', '.join(r.component.branch for r in rels)}")
        try:
            copy_objects(repo, rels[0].mirror, [r.tip for r in rels], [c for r in rels for c in r.commits[:1] if repo.has_object(c, "commit")])
        except git.DamagedRepoError as err:
            if not cache.recover(rels[0].mirror, err, rels[0].component.label):
                raise
            # Commit ids are a function of the inputs: computing again refetches and gives the same commits.
            rels = [compute(project, r.component, cache, progress) for r in rels]
            copy_objects(repo, rels[0].mirror, [r.tip for r in rels], [c for r in rels for c in r.commits[:1] if repo.has_object(c, "commit")])
    updates = [BranchUpdate(rel.component.branch, before.get(rel.ref), rel.tip, _keep_ref(repo, rel, before.get(rel.ref))) for rel in releases]
    moving = [git.RefUpdate(f"refs/heads/{u.branch}", u.new, u.old) for u in updates if u.status != "unchanged"]
    if not moving and not any(u.kept for u in updates):
        return updates  # nothing to move: no lock needed
    # Only the ref update is locked (every component's lock, in a fixed order): computing releases writes nothing of theirs.
    with hold(project, components):
        _refuse_checked_out(repo, [m.ref for m in moving])
        kept = [git.RefUpdate(u.kept, u.old, None) for u in updates if u.kept and repo.ref_value(u.kept) is None]
        repo.update_refs(moving + kept, "zmr build")
    return updates


def _keep_ref(repo: git.Repo, rel: Release, old: str | None) -> str | None:
    """Where build keeps *old* before replacing it: only a tip zmr did not build (its own are rebuilt at will)."""
    if old is None or old == rel.tip or not not_built_by_zmr(repo, old, rel.component.model, rel.component.key):
        return None
    return replaced_ref(rel.component.branch, old)


def _refuse_checked_out(repo: git.Repo, refs: Sequence[str]) -> None:
    """Moving a branch under a worktree that has it checked out would make its files look changed."""
    checked_out = {tree["branch"]: tree["worktree"] for tree in repo.worktrees(nul=False) if "branch" in tree}
    busy = [(ref, checked_out[ref]) for ref in refs if ref in checked_out]
    if busy:
        ref, where = busy[0]
        raise ZmrError(
            f"{ref.removeprefix('refs/heads/')} is checked out in {where}; zmr build will not move it under that working tree",
            details=["switch that worktree to another branch (git switch main), then build again; no ref was moved"],
        )


def copy_objects(repo: git.Repo, mirror: Mirror, tips: Sequence[str], haves: Sequence[str]) -> None:
    """Give *repo* its own copy of every object of *tips* (minus what *haves* reach).

    One ``pack-objects`` run in the repository, reading the mirror's objects
    through an alternate set for this process only, writes a finished pack
    (with its index) straight into the repository: packed data is reused,
    nothing is inflated and re-hashed as a fetch would. The repository's
    config never points at the cache. A pack appears by rename, whole or
    not at all.
    """
    objects = repo.git_dir / "objects"
    revs = "".join(f"{t}\n" for t in tips) + "".join(f"^{h}\n" for h in haves)
    env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(mirror.path / "objects")}
    repo.pack_objects(objects / "pack" / "pack", revs.encode(), env=env)
    missing = [t for t in tips if not repo.has_object(t, "commit")]
    if missing:
        raise ZmrError(f"copying objects from the cache into {repo.git_dir} failed: {missing[0]} is missing", details=["run the command again"])


# -- verify --------------------------------------------------------------------------
