"""``zmr diff``: what a change to this repository does to every release branch (docs/reference.md §7.20).

Two sides, BASE and HEAD, each a revision of the zmr repository or (HEAD's
default) its working tree::

    revision ──ls-tree + cat-file (zmr.yaml, manifests/, the folders they name)──▶ revisions/v1-<commit>/ in the cache
             ──load_manifests, Project.series (the working tree's validation, same limits)──▶ components
    component on both sides, same pin, series and identity ──▶ unchanged (no fetch)
    otherwise ──zmr.ops.build.compute, partial like verify──▶ tree and branch id of each side
              ──zmr.ops.replay.build_chain + zmr.ops.upstream.pair_series──▶ patches added, removed, changed, reordered
              ──Cache.commit_history (commits only)──▶ how far the pin moved

A revision is never checked out: its files are read from git objects and
written into a folder of the cache only zmr writes, as regular files (a
link stays a link, and the loaders refuse one that leaves the folder, as
in a working tree; a blob over the largest limit is written as a sparse
file of its size, which the loaders refuse unread). Nothing is written into
the repository and no branch moves.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypedDict

from zmr.infra import git
from zmr.infra.cache import Cache, CacheError, Upstream
from zmr.infra.errors import ZmrError
from zmr.infra.faults import fault_point
from zmr.infra.files import FileRefused, read_repo_file
from zmr.infra.git import Progress
from zmr.model.manifest import Component
from zmr.model.project import Project, load_settings
from zmr.model.series import MAX_PATCH_BYTES, Series
from zmr.model.yamlnodes import MAX_FILE_BYTES
from zmr.ops.upstream import Pair, PairJson
from zmr.infra.reports import Report

REVISION_FORMAT = "v1"  # bump when what a revision's folder holds changes
_LINK_LIMIT = 4096
_ALWAYS = ("zmr.yaml", "manifests", "patches")
# `patches:` and `upstream:` values: folders and bundles a manifest names, read from the revision too.
_NAMED_PATH_RE = re.compile(r"^\s*(?:patches|upstream)\s*:\s*[\"']?([^\"'#\s]+)", re.M)
_NOT_A_PATH_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[^/:]+:(?!//)")
_FILE_CHUNK_RE = re.compile(r"(?m)^(?=diff --git )")  # where each file's part of a unified diff starts
_DEFAULT_BRANCHES = ("refs/remotes/origin/HEAD", "refs/heads/main", "refs/remotes/origin/main", "refs/heads/master", "refs/remotes/origin/master")


# -- the report ------------------------------------------------------------------------------------


class PinMoveJson(TypedDict):
    """How the pin moved: *commits* first-parent commits (null: not known) in *direction* same, forward, backward or
    unrelated (null when a side is missing)."""

    old: str | None
    new: str | None
    commits: int | None
    direction: str | None


class ChangedPairJson(TypedDict):
    old: str | None
    new: str | None
    kind: str | None
    paired_by: str | None
    interdiff: str


class PatchChangesJson(TypedDict):
    """The series compared like ``git range-diff``: every line, the patches added, removed and changed, how removed ones
    landed at HEAD's pin, whether the order changed, how many are unchanged, and how the pairs were matched (range-diff,
    patch-id)."""

    range_diff: list[PairJson]
    added: list[str]
    removed: list[str]
    changed: list[ChangedPairJson]
    landed: dict[str, str]
    reordered: bool
    unchanged: int
    matched_by: str


class FileChangeJson(TypedDict):
    """A file changed: lines inserted and deleted (null: a binary file)."""

    path: str
    insertions: int | None
    deletions: int | None


class SeriesFilesJson(TypedDict):
    old: list[str]
    new: list[str]


class ObjectsJson(TypedDict):
    """Where the two release commits are kept, and the ``git diff`` that shows *patch* from them (null: not kept)."""

    git_dir: str | None
    alternates: list[str]
    old: str | None
    new: str | None
    command: str | None


class TreeDiffJson(TypedDict):
    """The release trees of both sides (null: a side has none) and what changed between them; *same_as*: an earlier
    component with the same two trees, whose *patch* this one's is (null here then)."""

    old: str | None
    new: str | None
    files_changed: int
    insertions: int
    deletions: int
    files: list[FileChangeJson]
    patch: str | None
    same_as: str | None
    series_files: SeriesFilesJson
    objects: ObjectsJson


class BranchTipsJson(TypedDict):
    name: str
    old: str | None
    new: str | None


class _ComponentDiffJson(TypedDict):
    model: str
    component: str
    status: str
    pin: PinMoveJson
    patches: PatchChangesJson | None
    tree: TreeDiffJson | None
    branch: BranchTipsJson


class ComponentDiffJson(_ComponentDiffJson, total=False):
    """One component: *status* unchanged, changed, added, removed or broken (and then why, *reason*), the pin's move,
    the series' change and the release trees' (null: not compared), the release branch's tips at both sides."""

    reason: str


class DiffJson(TypedDict):
    """The base commit, the head commit (null: the working tree), every component."""

    base: str
    head: str | None
    components: list[ComponentDiffJson]


@dataclass(frozen=True)
class PinMove:
    """How a pin moved: *commits* first-parent commits from old to new (backward: from new to old)."""

    old: str | None
    new: str | None
    commits: int | None  # None: not known (a side is missing, or the histories could not be fetched)
    direction: str | None  # same | forward | backward | unrelated; None when a side is missing

    def to_json(self) -> PinMoveJson:
        return {"old": self.old, "new": self.new, "commits": self.commits, "direction": self.direction}


@dataclass
class PatchChanges:
    """The series compared like ``git range-diff``: by content, then by name and position (``zmr.ops.upstream.pair_series``)."""

    pairs: list[Pair] = field(default_factory=list)  # in the new series' order, removed patches where they stood
    reordered: bool = False
    matched_by: str = "range-diff"  # or "patch-id" (the two sides' upstreams are different mirrors: no interdiff)
    landed: dict[str, str] = field(default_factory=dict)  # removed patch → how it landed at HEAD's pin (§7.9.1), when it did

    @property
    def added(self) -> list[str]:
        return [p.new_name for p in self.pairs if p.sign == ">" and p.new_name is not None]

    @property
    def removed(self) -> list[str]:
        return [p.old_name for p in self.pairs if p.sign == "<" and p.old_name is not None]

    @property
    def changed(self) -> list[Pair]:
        return [p for p in self.pairs if p.sign == "!"]

    @property
    def unchanged(self) -> int:
        return sum(1 for p in self.pairs if p.sign == "=")

    def to_json(self) -> PatchChangesJson:
        return {
            "range_diff": [p.to_json() for p in self.pairs],
            "added": self.added,
            "removed": self.removed,
            "changed": [{"old": c.old_name, "new": c.new_name, "kind": c.kind, "paired_by": c.by, "interdiff": c.interdiff} for c in self.changed],
            "landed": self.landed,
            "reordered": self.reordered,
            "unchanged": self.unchanged,
            "matched_by": self.matched_by,
        }


@dataclass(frozen=True)
class FileChange:
    path: str
    insertions: int | None  # None: a binary file
    deletions: int | None


@dataclass(frozen=True)
class TreeDiff:
    """The release trees of both sides: what changed between them, and the files each side's series touches.

    *git_dir*: the cache mirror where the trees and the release commits are
    kept (refs ``refs/zmr/diff/<commit>``) for ``git diff`` to show, an
    absolute path; *alternate*: the old side's mirror when the two sides
    come from two upstream URLs (the old commit is kept there, and git reads
    it through ``GIT_ALTERNATE_OBJECT_DIRECTORIES``); *patch*: the unified
    diff, None when not asked for (``--stat``, ``--name-only``).

    Not in the project's own repository: only the files that differ are in
    the mirror, so copying a release tree there would mean every blob of the
    upstream's tree, or a repository git's own checks call corrupt (a tree
    whose blobs are missing); and an alternate pointing into the cache would
    break the repository when the cache is pruned.
    """

    old: str | None
    new: str | None
    files: tuple[FileChange, ...] = ()
    patch: str | None = None
    series_files_old: tuple[str, ...] = ()
    series_files_new: tuple[str, ...] = ()
    git_dir: str | None = None
    commits: tuple[str | None, str | None] = (None, None)
    alternate: str | None = None
    same_as: str | None = None  # an earlier component of the report with the same two trees: its patch is that one's

    @property
    def files_changed(self) -> int:
        return len(self.files)

    @property
    def insertions(self) -> int:
        return sum(f.insertions or 0 for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions or 0 for f in self.files)

    @property
    def series_files(self) -> frozenset[str]:
        """The files either side's series touches: their lines in the release tree's diff are upstream's and the series' at once."""
        return frozenset(self.series_files_old) | frozenset(self.series_files_new)

    def split_files(self) -> tuple[list[FileChange], list[FileChange]]:
        """The changed files: (those a series touches, the rest: upstream's own change alone)."""
        touched = self.series_files
        return [f for f in self.files if f.path in touched], [f for f in self.files if f.path not in touched]

    def split_patch(self) -> tuple[str, str]:
        """*patch* cut by file: (the files a series touches, the rest: upstream's own change); a file whose header names no
        listed path (quoted by git) goes with the rest."""
        if not self.patch:
            return "", ""
        touched = self.series_files
        ours: list[str] = []
        theirs: list[str] = []
        for chunk in _FILE_CHUNK_RE.split(self.patch):
            if not chunk:
                continue
            mine = any(chunk.startswith(f"diff --git a/{path} b/{path}\n") for path in touched)
            (ours if mine else theirs).append(chunk)
        return "".join(ours), "".join(theirs)

    @property
    def alternates(self) -> list[str]:
        """The object directories git must also read (``GIT_ALTERNATE_OBJECT_DIRECTORIES``) to find the old side."""
        return [os.path.join(self.alternate, "objects")] if self.alternate else []

    @property
    def kept(self) -> list[tuple[str, str]]:
        """(git dir, commit): where each side's release commit is kept."""
        old, new = self.commits
        if self.git_dir is None:
            return []
        return [(where, c) for where, c in ((self.alternate or self.git_dir, old), (self.git_dir, new)) if c is not None]

    @property
    def command(self) -> str | None:
        """The ``git diff`` that shows the same diff as *patch* from the kept objects, in a shell in any folder (full ids: never ambiguous)."""
        old, new = self.commits
        if self.git_dir is None or old is None or new is None:
            return None
        env = "".join(f"GIT_ALTERNATE_OBJECT_DIRECTORIES={shlex.quote(d)} " for d in self.alternates)
        return f"{env}git --git-dir={shlex.quote(self.git_dir)} diff --no-renames --full-index {old} {new}"

    def to_json(self) -> TreeDiffJson:
        return {
            "old": self.old,
            "new": self.new,
            "files_changed": self.files_changed,
            "insertions": self.insertions,
            "deletions": self.deletions,
            "files": [{"path": f.path, "insertions": f.insertions, "deletions": f.deletions} for f in self.files],
            "patch": self.patch,
            "same_as": self.same_as,
            "series_files": {"old": list(self.series_files_old), "new": list(self.series_files_new)},
            "objects": {"git_dir": self.git_dir, "alternates": self.alternates, "old": self.commits[0], "new": self.commits[1], "command": self.command},
        }


@dataclass
class ComponentDiff:
    model: str
    component: str
    status: str  # unchanged | changed | added | removed | broken
    pin: PinMove
    branch_name: str
    patches: PatchChanges | None = None
    tree: TreeDiff | None = None
    branch: tuple[str | None, str | None] = (None, None)  # release branch tip ids: base, head
    reason: str | None = None  # why it is broken

    @property
    def label(self) -> str:
        return f"{self.model}/{self.component}"

    def to_json(self) -> ComponentDiffJson:
        patches = self.patches.to_json() if self.patches else None
        tree = self.tree.to_json() if self.tree else None
        branch: BranchTipsJson = {"name": self.branch_name, "old": self.branch[0], "new": self.branch[1]}
        if self.reason is not None:  # after status, where a reader looks first
            return {
                "model": self.model,
                "component": self.component,
                "status": self.status,
                "pin": self.pin.to_json(),
                "reason": self.reason,
                "patches": patches,
                "tree": tree,
                "branch": branch,
            }
        return {
            "model": self.model,
            "component": self.component,
            "status": self.status,
            "pin": self.pin.to_json(),
            "patches": patches,
            "tree": tree,
            "branch": branch,
        }


@dataclass
class DiffReport(Report):
    base: str  # commit id
    base_rev: str  # as given (or the default's name)
    head: str | None  # commit id; None: the working tree
    head_rev: str | None
    components: list[ComponentDiff]

    @property
    def changed(self) -> list[ComponentDiff]:
        return [c for c in self.components if c.status != "unchanged"]

    @property
    def broken(self) -> list[ComponentDiff]:
        return [c for c in self.components if c.status == "broken"]

    def failed(self) -> bool:
        """What ``--check`` fails on (exit 1, as ``git diff --exit-code``): a component changed."""
        return bool(self.changed)

    def reason(self) -> str:
        return f"{len(self.changed)} of {len(self.components)} components change" if self.changed else ""

    def to_json(self) -> DiffJson:
        return {"base": self.base, "head": self.head, "components": [c.to_json() for c in self.components]}


# -- reading a side --------------------------------------------------------------------------------


@dataclass
class _RevisionProject(Project):
    """A revision's manifests and series (in a folder of the cache); git runs in the repository it came from."""

    source: git.Repo | None = None

    @property
    def repo(self) -> git.Repo:
        assert self.source is not None
        return self.source


@dataclass
class Side:
    name: str  # base | head
    rev: str | None  # as given; None: the working tree
    commit: str | None
    project: Project
    components: dict[tuple[str, str], Component]
    series_files: dict[str, tuple[str, ...]] = field(default_factory=dict)  # series digest -> the files it touches
    read: dict[Component, Series] = field(default_factory=dict)  # each component's series, read once a run

    @property
    def title(self) -> str:
        return f"{self.name} ({self.rev if self.rev is not None else 'working tree'})"

    def series(self, component: Component) -> Series:
        """*component*'s series on this side, read (and checked) once a run: the prefetch and the comparison share it."""
        if component not in self.read:
            self.read[component] = self.project.series(component)
        return self.read[component]


def default_base(repo: git.Repo) -> tuple[str, str]:
    """The merge-base of HEAD with the default branch (what ``git diff main...`` compares with): (commit, how it was found)."""
    head = repo.resolve("HEAD")
    if head is None:
        raise ZmrError("base: HEAD has no commit yet; there is nothing to compare with", details=["commit first, or name BASE: zmr diff BASE"])
    for ref in _DEFAULT_BRANCHES:
        tip = repo.resolve(ref)
        if tip is not None:
            base = repo.merge_base(head, tip)
            if base is not None:
                return base, f"merge-base of HEAD and {ref.removeprefix('refs/heads/').removeprefix('refs/remotes/')}"
    raise ZmrError("base: no default branch (main, master, origin/HEAD) to take the merge-base with", details=["name BASE: zmr diff BASE"])


def split_arguments(project: Project, args: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """``[BASE [HEAD]] [MODEL...]``: leading arguments that are not model names are BASE and HEAD (at most two)."""
    from zmr.model.manifest import manifest_paths

    known = {p.name.rsplit(".", 1)[0] for p in manifest_paths(project.root)}
    revs: list[str] = []
    rest = list(args)
    while rest and len(revs) < 2 and rest[0] not in known:
        revs.append(rest.pop(0))
    return (revs[0] if revs else None), (revs[1] if len(revs) > 1 else None), rest


def resolve_side(repo: git.Repo, name: str, rev: str) -> str:
    commit = repo.resolve(rev) if rev and not rev.startswith("-") else None
    if commit is None:
        raise ZmrError(
            f"{name}: {rev!r} is not a revision of this repository (nor a model name)",
            details=["give a branch, tag or commit id (git rev-parse --verify REV^{commit} must find it), or a model from manifests/"],
        )
    return commit


def load_side(project: Project, cache: Cache, name: str, rev: str | None, commit: str | None) -> Side:
    """The components of one side; a side whose zmr.yaml or manifests do not validate is an error naming it."""
    side_project: Project = project
    if commit is not None:
        folder = revision_folder(project.repo, commit, cache, f"{name} ({rev})")
        try:
            settings = load_settings(folder)
        except ZmrError as err:
            raise _side_error(name, rev, err) from None
        side_project = _RevisionProject(folder, settings, project.policy, source=project.repo)
    try:
        manifests = side_project.manifests()
    except ZmrError as err:
        raise _side_error(name, rev, err) from None
    components = {(m.model, key): comp for m in manifests for key, comp in m.components.items()}
    return Side(name, rev, commit, side_project, components)


def _side_error(name: str, rev: str | None, err: ZmrError) -> ZmrError:
    where = f"{name} ({rev})" if rev is not None else f"{name} (working tree)"
    return ZmrError(f"{where}: {err.message}", details=[*err.details, f"fix the files of the {name} side; nothing was compared"])


# -- a revision's files, from git objects ----------------------------------------------------------


def revision_folder(repo: git.Repo, commit: str, cache: Cache, display: str) -> Path:
    """``revisions/v1-<commit>/`` of the cache: the files of *commit* that manifests and series are read from.

    A commit's content never changes, so a folder made once is kept; it
    appears by rename, whole or not at all.
    """
    target = cache.root / "revisions" / f"{REVISION_FORMAT}-{commit}"
    if target.is_dir() and not target.is_symlink():
        return target
    with cache.writing(target):  # a full disk or a cache not writable: exit 2 naming the path, nothing half-made left
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        try:
            _write_entries(repo, commit, tmp, _ALWAYS, display)
            _write_entries(repo, commit, tmp, _outermost(_named_paths(tmp)), display)
            fault_point("cache-write")
            try:
                os.rename(tmp, target)
            except OSError:
                if not target.is_dir():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another run made it first: same content
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def _outermost(paths: set[str]) -> list[str]:
    """*paths* not written yet and not under another of them: each file is written once."""
    done = [*_ALWAYS]
    result = []
    for path in sorted(paths, key=lambda p: (p.count("/"), p)):
        if not any(path == d or path.startswith(d + "/") for d in done):
            result.append(path)
            done.append(path)
    return sorted(result)


def _named_paths(folder: Path) -> set[str]:
    """Repository paths the revision's manifests name as ``patches:`` or ``upstream:`` (the loaders check them afterwards)."""
    named: set[str] = set()
    manifests = folder / "manifests"
    if not manifests.is_dir() or manifests.is_symlink():
        return named
    for path in sorted(manifests.iterdir()):
        try:
            text = read_repo_file(folder, path, limit=MAX_FILE_BYTES, what="manifest").decode("utf-8", "replace")
        except FileRefused:
            continue  # the loader says why
        for value in _NAMED_PATH_RE.findall(text):
            parts = value.strip("/").split("/")
            if not _NOT_A_PATH_RE.match(value) and not value.startswith("/") and all(p not in ("", ".", "..") for p in parts):
                named.add("/".join(parts))
    return named


def _write_entries(repo: git.Repo, commit: str, dest: Path, paths: Sequence[str], display: str) -> None:
    """The blobs and links of *commit* at or under *paths*, written under *dest*."""
    if not paths:
        return
    blobs: list[tuple[str, Path]] = []
    links: list[tuple[str, Path]] = []
    # Literal pathspecs (ls_tree's): a name with `*` in a manifest is a name, not a pattern.
    for entry in repo.ls_tree(commit, paths, long=True):
        target = _entry_path(dest, entry.path, display)
        if entry.type != "blob" or entry.size is None:
            continue  # a submodule: nothing zmr reads
        if entry.mode == "120000":
            if entry.size <= _LINK_LIMIT:
                links.append((entry.oid, target))
        elif entry.size > MAX_PATCH_BYTES:
            with open(target, "xb") as handle:  # the loaders refuse it by its size, as in a working tree
                handle.truncate(entry.size)
        else:
            blobs.append((entry.oid, target))
    contents = _blob_contents(repo, [oid for oid, _ in blobs + links])
    for oid, target in blobs:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(contents[oid])
    for oid, target in links:
        os.symlink(contents[oid].decode("utf-8", "surrogateescape"), target)


def _entry_path(dest: Path, name: str, display: str) -> Path:
    """Where a tree entry goes under *dest*; a name git itself would refuse to check out is refused."""
    parts = name.split("/")
    if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise ZmrError(f"{display}: the tree holds an unsafe path {name!r}", details=["git's own commands never make such a tree"])
    parent = dest.joinpath(*parts[:-1])
    parent.mkdir(parents=True, exist_ok=True)
    if os.path.realpath(parent) != os.path.join(os.path.realpath(dest), *parts[:-1]):
        raise ZmrError(f"{display}: the tree holds {name!r} below a symbolic link", details=["that revision was not made by git's own commands"])
    return parent / parts[-1]


def _blob_contents(repo: git.Repo, oids: Sequence[str]) -> dict[str, bytes]:
    """The bytes of each blob, in one ``cat-file --batch``."""
    if not oids:
        return {}
    contents: dict[str, bytes] = {}
    for oid, obj in zip(oids, repo.cat_file_batch(oids)):
        if obj is None:  # a partial clone of the zmr repository
            raise ZmrError(f"{oid}: object missing from {repo.git_dir}", details=["fetch it (git fetch --refetch), then run zmr diff again"])
        contents[obj.oid] = obj.content
    return contents


# -- comparing ------------------------------------------------------------------------------------


def diff(
    project: Project,
    base: str | None,
    head: str | None,
    models: Sequence[str] = (),
    components: Sequence[str] = (),
    cache: Cache | None = None,
    progress: Progress | None = None,
    *,
    patch: bool = True,
) -> DiffReport:
    """Compare the release branches of *base* and *head* (None: the working tree) for the chosen models and components.

    Lines are always counted (the blobs of the files that differ between the
    release trees are fetched); *patch*: also the unified diff of the trees.
    """
    cache = cache or Cache()
    _forget()
    repo = project.repo
    if base is None:
        base_commit, base_rev = default_base(repo)
    else:
        base_commit, base_rev = resolve_side(repo, "base", base), base
    head_commit = resolve_side(repo, "head", head) if head is not None else None
    old = load_side(project, cache, "base", base_rev, base_commit)
    new = load_side(project, cache, "head", head, head_commit)
    keys = _chosen(old, new, models, components)
    same_identity = old.project.settings == new.project.settings
    results = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        shared = _Shared(pool)
        _histories(old, new, keys, cache, shared)
        _prefetch(_moved_pins(old, new, keys), cache, shared)
        for key in keys:
            if progress:
                progress(f"{key[0]}/{key[1]}: comparing")
            results.append(compare_component(old, new, key, cache, same_identity, progress, patch=patch, shared=shared))
        results = [r.finish() if isinstance(r, _Compared) else r for r in results]
    _keep(results)
    _share_patches(results)
    return DiffReport(base_commit, base_rev, head_commit, head, results)


def _share_patches(results: Sequence[ComponentDiff]) -> None:
    """Components whose release trees are the same two trees (six on one pin with one series) say so: the first holds the patch."""
    first: dict[tuple[str, str], str] = {}
    for c in results:
        t = c.tree
        if t is None or t.old is None or t.new is None or not t.files:
            continue
        label = first.setdefault((t.old, t.new), c.label)
        if label != c.label:
            c.tree = dataclasses.replace(t, patch=None, same_as=label)


def _forget() -> None:
    """Empty the memos of a previous run in this process (they name mirrors, which a cache may have replaced since)."""
    _CHAINS.clear()
    for memo in (_pairs, _moved):
        memo.cache_clear()


def _chosen(old: Side, new: Side, models: Sequence[str], components: Sequence[str]) -> list[tuple[str, str]]:
    """The (model, component) keys of either side, head's order first; each named model and component must exist on one side."""
    keys = list(new.components) + [k for k in old.components if k not in new.components]
    known_models = {m for m, _ in keys}
    missing = [m for m in models if m not in known_models]
    if missing:
        raise ZmrError(f"no model {', '.join(map(repr, missing))} on either side", details=[f"known models: {', '.join(sorted(known_models)) or 'none'}"])
    if models:
        keys = [k for k in keys if k[0] in models]
    if components:
        keys = [k for k in keys if k[1] in components]
        if not keys:
            raise ZmrError(f"no component named {', '.join(components)} in the selected models on either side")
    return keys


@dataclass
class _Input:
    side: Side
    component: Component
    series: Series


class _Shared:
    """The comparing work of one run, each piece once (components on one pin with one series share it), in a pool of threads.

    Components are built one after the other in the calling thread; each
    built one's parts (pairing, tree diff, pin history) go to the pool at
    once, so that one component's blob fetch runs while the next are built.
    """

    def __init__(self, pool: ThreadPoolExecutor):
        self.pool = pool
        self.futures: dict[tuple[Any, ...], Future[Any]] = {}
        self.lock = threading.Lock()

    def once(self, key: tuple[Any, ...], fn: Callable[..., Any], *args: Any) -> Future[Any]:
        with self.lock:
            future = self.futures.get(key)
            if future is None:
                future = self.futures[key] = self.pool.submit(fn, *args)
            return future

    @staticmethod
    def done(value: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(value)
        return future


def _histories(old: Side, new: Side, keys: Sequence[tuple[str, str]], cache: Cache, shared: _Shared) -> None:
    """The history of each pin moved within one upstream, fetched in *shared*'s pool first: it needs the manifests
    alone, and runs while this thread reads the series, which leave the other CPU idle (on Megatron-LM, 9,632 commits
    without trees)."""
    for key in keys:
        a, b = old.components.get(key), new.components.get(key)
        if a is None or b is None:
            continue
        upstream = _moved_within(cache, old, a, new, b)
        if upstream is not None:
            _pin_history(shared, upstream, a.commit, b.commit)


def _moved_within(cache: Cache, old: Side, a: Component, new: Side, b: Component) -> Upstream | None:
    """The upstream of a pin that moved from *a* to *b* within it (both sides name one URL); None when the pin stayed or the URL changed."""
    if a.commit == b.commit:
        return None
    upstream = cache.for_component(b, new.project.root)
    return upstream if cache.for_component(a, old.project.root).url == upstream.url else None


def _pin_history(shared: _Shared, upstream: Upstream, old: str, new: str) -> Future[Any]:
    """How far the pin moved (``_moved``), once per upstream and pair of pins: keyed by the URL, not the component."""
    return shared.once(("pin", upstream.url, old, new), _moved, upstream, old, new)


def _moved_pins(old: Side, new: Side, keys: Sequence[tuple[str, str]]) -> list[tuple[_Input, _Input]]:
    """The components on both sides whose pin moved (those ``_prefetch`` fetches for); one whose series cannot be read is left out."""
    found = []
    for key in keys:
        a, b = old.components.get(key), new.components.get(key)
        if a is None or b is None or a.commit == b.commit:
            continue
        try:
            found.append((_Input(old, a, old.series(a)), _Input(new, b, new.series(b))))
        except ZmrError:
            continue  # compare_component says why
    return found


def _prefetch(items: Sequence[tuple[_Input, _Input]], cache: Cache, shared: _Shared) -> None:
    """Pins moved within one upstream: what the tree diffs will read, fetched while the components are built.

    Here, for each upstream and pair of pins, both pins blobless (one
    fetch) and the blobs every series on them touches (another): what the
    builds would fetch, so that no build then waits for the mirror's lock
    the next fetch holds. Then, in *shared*'s pool, the blobs of the files
    that differ between the two pins (``_pin_blobs``; the pin's history is
    on its way already: ``_histories``). The blobs are those the tree diffs read
    but for files a series touches (the mirror has them already); a file
    the series make equal again at both sides is the only one fetched for
    nothing. A fetch that fails here is left to the builds and tree diffs,
    which say what failed for which component.
    """
    from zmr.ops.replay import patch_file_sets

    groups: dict[tuple[str, str, str], tuple[Upstream, set[str] | None]] = {}
    touched: dict[tuple[str, str], list[frozenset[str]] | None] = {}  # (side, series digest): the files of each patch
    for before, after in items:
        a, b = before.component, after.component
        upstream = _moved_within(cache, before.side, a, after.side, b)
        if upstream is None:
            continue
        _, paths = groups.setdefault((upstream.url, a.commit, b.commit), (upstream, set()))
        for item in (before, after):
            digest = (item.side.name, item.series.digest())
            if digest not in touched:
                touched[digest] = patch_file_sets(item.side.project.repo, item.series.patches) if item.series.patches else []
            sets = touched[digest]
            if sets is None or paths is None:
                groups[(upstream.url, a.commit, b.commit)] = (upstream, None)  # which files cannot be told: the builds fetch whole pins
                paths = None
            else:
                paths.update(*sets)
    for (url, old, new), (upstream, paths) in groups.items():
        if paths is None:
            continue
        try:
            upstream.ensure([old, new], paths=frozenset(paths))
        except ZmrError:
            continue
        shared.once(("pin blobs", url, old, new), _pin_blobs, upstream, old, new, items[0][1].side.project.repo)


def _pin_blobs(upstream: Upstream, old: str, new: str, project: git.Repo) -> None:
    """The blobs of the files that differ between the trees of two pins (``_prefetch``): first the new pin's, by a depth-1
    fetch of it that offers the old pin as have (``Cache._fetch_move``), which nothing else need come before; then the
    old pin's that its thin pack did not bring, copied from the project (the base side's release branch); the rest by id."""
    try:
        olds, news, _ = upstream.mirror.repo.tree_blobs(old, new)
        upstream.ensure_blobs([old, new], [*olds, *news], local=project, move=(old, new))
    except ZmrError:
        pass  # the tree diff that needs them fetches them again, and says why it cannot


@dataclass
class _Compared(ComponentDiff):
    """A component whose parts are being computed (``_Shared``): ``finish`` waits for them."""

    parts: tuple[Future[Any], Callable[[], TreeDiff], Future[Any] | None] | None = None
    side: Side | None = None  # named when a part fails
    same_tip: bool = False

    def finish(self) -> ComponentDiff:
        assert self.parts is not None and self.side is not None
        patches, tree, pin = self.parts
        result = ComponentDiff(self.model, self.component, self.status, self.pin, self.branch_name, branch=self.branch)
        try:
            result.patches, result.tree = dataclasses.replace(patches.result()), tree()
            if pin is not None:
                result.pin = pin.result()
        except ZmrError as err:
            return _broken(result, self.side, err)
        if self.same_tip:
            result.status = "unchanged"  # different inputs, the same commits (e.g. only a manifest's formatting)
        return result


def compare_component(
    old: Side,
    new: Side,
    key: tuple[str, str],
    cache: Cache,
    same_identity: bool,
    progress: Progress | None = None,
    *,
    patch: bool = True,
    shared: _Shared | None = None,
) -> ComponentDiff:
    """One component on both sides: unchanged without a fetch when nothing that goes into its branch differs.

    With *shared*, a changed component's parts are computed in its pool and a
    ``_Compared`` is returned (its ``finish`` gives the result).
    """
    old_comp, new_comp = old.components.get(key), new.components.get(key)
    some = new_comp or old_comp
    assert some is not None
    pin = PinMove(old_comp.commit if old_comp else None, new_comp.commit if new_comp else None, None, None)
    result = ComponentDiff(key[0], key[1], "changed", pin, some.branch)
    inputs: dict[str, _Input | None] = {}
    for side, comp in ((old, old_comp), (new, new_comp)):
        if comp is None:
            inputs[side.name] = None
            continue
        try:
            inputs[side.name] = _Input(side, comp, side.series(comp))
        except ZmrError as err:
            return _broken(result, side, err)
    before, after = inputs["base"], inputs["head"]
    if before and after and same_identity and _same_build(before, after):
        result.status = "unchanged"
        result.pin = PinMove(pin.old, pin.new, 0, "same")
        result.patches = PatchChanges(_same_pairs(after.series))
        return result
    if before is None or after is None:
        result.status = "added" if before is None else "removed"
    if shared is not None:
        return _compared(result, before, after, cache, progress, patch, shared)
    with ThreadPoolExecutor(max_workers=3) as pool:
        compared = _compared(result, before, after, cache, progress, patch, _Shared(pool))
        return compared.finish() if isinstance(compared, _Compared) else compared


def _same_build(before: _Input, after: _Input) -> bool:
    """Everything a release commit depends on is equal (the folder's name is not: the series' bytes and names are)."""
    a, b = before.component, after.component
    same = (a.upstream, a.commit, a.branch, a.release) == (b.upstream, b.commit, b.branch, b.release)
    return same and before.series.digest() == after.series.digest()


def _broken(result: ComponentDiff, side: Side, err: ZmrError) -> ComponentDiff:
    result.status = "broken"
    result.reason = f"{side.title}: {err}"
    return result


def _compared(
    result: ComponentDiff, before: _Input | None, after: _Input | None, cache: Cache, progress: Progress | None, patch: bool, shared: _Shared
) -> ComponentDiff:
    """Both sides built (at once: mostly waiting on git), then their parts handed to *shared*'s pool."""
    from zmr.ops.build import Release, compute

    def build(item: _Input | None) -> Release | None:
        return None if item is None else compute(item.side.project, item.component, cache, progress, partial=True, series=item.series)

    # Safe: one mirror's fetches take its lock; each replay has its own index.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [(item, pool.submit(build, item)) for item in (before, after)]
    releases: list[Release | None] = []
    for item, future in futures:
        try:
            releases.append(future.result())
        except ZmrError as err:
            assert item is not None
            return _broken(result, item.side, err)
    old, new = releases
    branch = (old.tip if old else None, new.tip if new else None)
    # Three independent parts: the chains (objects written into the mirror, as any replay does), the tree diff's blobs
    # (a fetch under the mirror's lock) and the pin's history (another repository). Each once per run for its inputs.
    patches = shared.once(("patches", *_series_key(old), *_series_key(new)), _patch_changes, old, new)
    try:
        tree = _tree_diff(old, new, before, after, cache, patch, shared)
    except ZmrError as err:
        return _broken(result, (after or before).side, err)  # type: ignore[union-attr]
    pin = None
    if old and new and after is not None:
        if old.component.commit == new.component.commit:
            pin = shared.done(PinMove(old.component.commit, new.component.commit, 0, "same"))
        else:
            upstream = cache.for_upstream(new.component.upstream, after.side.project.root)
            pin = _pin_history(shared, upstream, old.component.commit, new.component.commit)
    some = after or before
    assert some is not None
    return _Compared(
        result.model,
        result.component,
        result.status,
        result.pin,
        result.branch_name,
        branch=branch,
        parts=(patches, tree, pin),
        side=some.side,
        same_tip=bool(old and new and old.tip == new.tip),
    )


def _series_key(rel: Any) -> tuple[Any, ...]:
    """What a side's pairing depends on: its mirror, pin and series (names and bytes)."""
    if rel is None:
        return (None, None, None)
    return (str(rel.mirror.path), rel.component.commit, tuple((p.strip, p.sha256, p.name, p.subject) for p in rel.series.patches))


# -- the parts of a changed component -------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _moved(upstream: Upstream, a: str, b: str) -> PinMove:
    """How far *a* is from *b* in *upstream*'s history; once per pair (components on one pin share it)."""
    try:
        history = upstream.commit_history([a, b])
    except CacheError:
        return PinMove(a, b, None, "unrelated")  # the new upstream does not have the old pin

    def first_parent(since: str, until: str) -> int:
        return history.count(until, exclude=[since], first_parent=True)

    if history.is_ancestor(a, b):
        return PinMove(a, b, first_parent(a, b), "forward")
    if history.is_ancestor(b, a):
        return PinMove(a, b, first_parent(b, a), "backward")
    return PinMove(a, b, first_parent(a, b), "unrelated")


_CHAINS: dict[tuple[str, str, tuple[tuple[int, str, str], ...]], list[str]] = {}


def _chain(rel: Any) -> list[str]:
    """``zmr.ops.replay.build_chain`` of a release's series on its pin; once per series and pin (a chain is content)."""
    from zmr.ops.replay import build_chain

    key = (str(rel.mirror.path), rel.component.commit, tuple((p.strip, p.sha256, p.name) for p in rel.series.patches))
    if key not in _CHAINS:
        _CHAINS[key] = build_chain(rel.mirror.repo, rel.component, rel.component.commit, rel.series.patches)
    return _CHAINS[key]


class _WithAlternate(git.Repo):
    """A mirror that also reads another mirror's objects (two upstream URLs: a chain in each), for this process only."""

    def __init__(self, git_dir: str, alternate: str):
        super().__init__(git_dir)
        self.alternate = alternate

    def run(self, args: Sequence[str], **kwargs: Any) -> Any:
        kwargs["env"] = {**(kwargs.get("env") or {}), "GIT_ALTERNATE_OBJECT_DIRECTORIES": self.alternate}
        return super().run(args, **kwargs)


@functools.lru_cache(maxsize=256)
def _pairs(
    git_dir: str,
    alternate: str,
    old_base: str,
    old_chain: tuple[str, ...],
    old_names: tuple[str, ...],
    new_base: str,
    new_chain: tuple[str, ...],
    new_names: tuple[str, ...],
) -> tuple[Pair, ...]:
    """``zmr.ops.upstream.pair_series``, once per pair of chains (commit ids are content: components sharing a series share it)."""
    from zmr.ops.upstream import pair_series

    repo = _WithAlternate(git_dir, alternate) if alternate else git.Repo(git_dir)
    return tuple(pair_series(repo, old_base, old_chain, old_names, new_base, new_chain, new_names))


def _same_pairs(series: Series) -> list[Pair]:
    """The same patch bytes in the same order: each patch paired with itself, without a replay (range-diff ignores line numbers)."""
    return [Pair(i, i, p.name, p.name, "=", p.subject) for i, p in enumerate(series.patches)]


def _patch_changes(old: Any, new: Any) -> PatchChanges:
    """The series of both sides paired: ``zmr.ops.upstream.pair_series`` of their chains (one commit per patch) in the mirror."""
    old_names = tuple(p.name for p in old.series.patches) if old else ()
    new_names = tuple(p.name for p in new.series.patches) if new else ()
    if not old_names or not new_names:
        only = [Pair(None, j, None, p.name, ">", p.subject) for j, p in enumerate(new.series.patches)] if new else []
        gone = [Pair(i, None, p.name, None, "<", p.subject) for i, p in enumerate(old.series.patches)] if old else []
        return PatchChanges(only + gone)
    if old.series.digest() == new.series.digest():
        return PatchChanges(_same_pairs(new.series))
    with ThreadPoolExecutor(max_workers=2) as pool:  # different chains (the series differ): different refs, own indexes
        old_chain, new_chain = pool.map(_chain, (old, new))
    alternate = "" if old.mirror.path == new.mirror.path else str(old.mirror.path / "objects")
    if (
        alternate
        and _WithAlternate(str(new.mirror.path), alternate).range_diff(f"{old.component.commit}..{old_chain[-1]}", f"{new.component.commit}..{new_chain[-1]}")
        is None
    ):
        return _by_patch_id(old, new, old_chain, new_chain)  # git could not walk one mirror's chain from the other
    pairs = list(_pairs(str(new.mirror.path), alternate, old.component.commit, tuple(old_chain), old_names, new.component.commit, tuple(new_chain), new_names))
    matched = [p.old for p in pairs if p.old is not None and p.new is not None]
    changes = PatchChanges(pairs, reordered=matched != sorted(matched))
    removed = [p.old for p in pairs if p.sign == "<" and p.old is not None]
    if removed and not alternate and old.component.commit != new.component.commit:
        changes.landed = _landed(old, new, old_chain, removed)
    return changes


def _landed(old: Any, new: Any, old_chain: list[str], removed: list[int]) -> dict[str, str]:
    """Of the patches HEAD removed, those whose change is at HEAD's pin (the one definition, §7.9.1): name → label."""
    from zmr.ops.replay import file_sets
    from zmr.ops.upstream import landing_of

    repo = new.mirror.repo
    files = file_sets(repo, [old_chain[i] for i in removed])
    found = {}
    for i in removed:
        patch = old.series.patches[i]
        before = old_chain[i - 1] if i else old.component.commit
        landing = landing_of(repo, old.component.commit, new.component.commit, patch, before, old_chain[i], sorted(files[old_chain[i]]))
        if landing is not None:
            found[patch.name] = landing.label
    return found


def _by_patch_id(old: Any, new: Any, old_chain: list[str], new_chain: list[str]) -> PatchChanges:
    """Across two mirrors (the upstream URL changed): equal patch ids are the same patch; the rest added and removed."""
    from zmr.ops.replay import patch_ids

    old_ids = patch_ids(old.mirror.repo, old_chain)
    new_ids = patch_ids(new.mirror.repo, new_chain)
    free = {old_ids.get(c): i for i, c in reversed(list(enumerate(old_chain))) if old_ids.get(c)}
    pairs: list[Pair] = []
    matched: list[int] = []
    for j, commit in enumerate(new_chain):
        patch = new.series.patches[j]
        i = free.pop(new_ids.get(commit, ""), None)
        if i is None:
            pairs.append(Pair(None, j, None, patch.name, ">", patch.subject))
        else:
            matched.append(i)
            pairs.append(Pair(i, j, old.series.patches[i].name, patch.name, "=", patch.subject))
    pairs += [Pair(i, None, p.name, None, "<", p.subject) for i, p in enumerate(old.series.patches) if i not in matched]
    return PatchChanges(pairs, reordered=matched != sorted(matched), matched_by="patch-id")


def _series_files(item: _Input | None) -> tuple[str, ...]:
    from zmr.ops.replay import patch_file_sets

    if item is None or not item.series.patches:
        return ()
    digest = item.series.digest()
    if digest not in item.side.series_files:  # components sharing a series (six on one pin) ask git once
        sets = patch_file_sets(item.side.project.repo, item.series.patches)
        item.side.series_files[digest] = tuple(sorted(frozenset[str]().union(*sets))) if sets is not None else ()
    return item.side.series_files[digest]


def _tree_diff(old: Any, new: Any, before: _Input | None, after: _Input | None, cache: Cache, patch: bool, shared: _Shared) -> Callable[[], TreeDiff]:
    """What changed between the two release trees (lines counted), and the files each side's series touches: a function that gives it.

    The comparison itself is ``_tree_parts`` in *shared*'s pool, once per
    pair of trees; the function waits for it.
    """
    files_old, files_new = _series_files(before), _series_files(after)
    kept = (old.tip if old else None, new.tip if new else None)
    where = os.path.abspath((new or old).mirror.path)
    if old is None or new is None:
        one = TreeDiff(old.tree if old else None, new.tree if new else None, (), None, files_old, files_new, where, kept)
        return lambda: one
    assert before is not None and after is not None
    sides = tuple((cache.for_upstream(rel.component.upstream, item.side.project.root), rel.component.commit) for rel, item in ((old, before), (new, after)))
    alternate = "" if old.mirror.path == new.mirror.path else str(old.mirror.path / "objects")
    trees = (old.tree, new.tree)
    project = after.side.project.repo
    parts = shared.once(("tree", where, alternate, trees, sides, patch), _tree_parts, where, alternate, trees, sides, patch, project)

    def made() -> TreeDiff:
        files, text = parts.result()
        return TreeDiff(old.tree, new.tree, files, text, files_old, files_new, where, kept, os.path.abspath(old.mirror.path) if alternate else None)

    return made


def _tree_parts(
    git_dir: str, alternate: str, trees: tuple[str, str], sides: tuple[tuple[Upstream, str], ...], patch: bool, project: git.Repo
) -> tuple[tuple[FileChange, ...], str | None]:
    """The files that differ between two release trees with their lines counted (and the unified diff with *patch*).

    First the blobs of those files on both sides, named by the trees (the
    series' own blobs are in the mirror already, so only the pins' are
    fetched), in one fetch per upstream: only what differs is fetched,
    never every file upstream changed, and what *project* has (the base
    side's release branch) is copied from it. Then one ``diff-tree`` for the counts and the diff.
    """
    repo = _WithAlternate(git_dir, alternate) if alternate else git.Repo(git_dir)
    *blobs, paths = repo.tree_blobs(*trees)
    by_url: dict[str, tuple[Upstream, list[str], set[str]]] = {}
    for (upstream, commit), side_blobs in zip(sides, blobs):
        entry = by_url.setdefault(upstream.url, (upstream, [], set()))
        entry[1].append(commit)
        entry[2].update(side_blobs)
    for upstream, commits, wanted in by_url.values():
        if wanted:
            upstream.ensure_blobs(commits, wanted, local=project)
    changes, text = _halves(repo, trees, patch, paths)
    return tuple(FileChange(path, ins, dels) for path, ins, dels in changes), text


SPLIT_FILES = 256  # a tree diff of this many files or more runs as two git processes at once


def _halves(repo: git.Repo, trees: tuple[str, str], patch: bool, paths: list[str]) -> tuple[list[tuple[str, int | None, int | None]], str | None]:
    """``Repo.tree_diff`` of two trees (*paths*: the files that differ, in git's order), the first and second half of the
    files in two processes at once when they are many (a pin move: 0.24 s of diff-tree on Megatron-LM's 1,423 files).

    The same result as one process: each half is a run of git's own order, and a pathspec-limited diff-tree keeps that
    order. Not split where a changed path is a folder of another (a file that became a folder): its pathspec would
    list both.
    """
    listed = set(paths)
    if len(paths) < SPLIT_FILES or any(str(folder) in listed for path in paths for folder in PurePosixPath(path).parents):
        return repo.tree_diff(*trees, patch=patch)
    half = len(paths) // 2
    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(lambda part: repo.tree_diff(*trees, patch=patch, paths=part), (paths[:half], paths[half:])))
    changes = [change for part in parts for change in part[0]]
    return changes, "".join(part[1] or "" for part in parts) if patch else None


# -- objects a reviewer can open -------------------------------------------------------------------

KEEP_PREFIX = "refs/zmr/diff/"
KEEP_DAYS = 14  # a kept commit's ref goes this long after the last zmr diff that showed it


def _keep(results: Sequence[ComponentDiff]) -> None:
    """Keep the release commits each changed component's report names under ``refs/zmr/diff/<commit>`` of its mirror.

    Each ref is made anew when a diff shows it, so the time of its reflog
    entry is when it was last used (nothing of the clock goes into an
    object); refs unused for ``KEEP_DAYS`` days are deleted then.
    """
    import time

    by_repo: dict[str, set[str]] = {}
    for c in results:
        for where, commit in c.tree.kept if c.tree is not None else []:
            by_repo.setdefault(where, set()).add(commit)
    for where, commits in by_repo.items():
        repo = git.Repo(where)
        repo.keep_commits(KEEP_PREFIX, sorted(commits), "zmr diff")
        limit = time.time() - KEEP_DAYS * 86400
        repo.delete_refs([ref for ref, when in repo.ref_times(KEEP_PREFIX).items() if when < limit])
