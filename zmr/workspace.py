"""Checkouts: a git working tree per component where engineers change a series, and export.

``zmr checkout`` turns a series into commits and ``zmr export`` turns commits
back into a series::

    series ──(temp index in the mirror holding only the series' files: git apply per patch,
              or per run of patches on disjoint files; one fast-import for all commits)──▶ chain of commits
           ──(local fetch: objects copied, never borrowed)──▶ checkout: branch <model>/<component>
    checkout ──(rev-list zmr/base..HEAD, match each commit to a patch)──▶ export plan ──▶ series

Where state is kept, inside the checkout's ``.git``:

- config ``zmr.model``, ``zmr.component``, ``zmr.pin``, ``zmr.branch``,
  ``zmr.project``, ``zmr.upstream``: what the checkout is of;
- ``refs/zmr/base``: the pinned upstream commit (``git log zmr/base..``
  shows exactly the series);
- ``refs/zmr/exported``: the last tip known to equal the series (set by
  checkout and export); a HEAD elsewhere may hold unexported work;
- ``refs/zmr/backup/<time>[-worktree]``: what ``--force`` discarded;
- ``zmr-refresh``: present only while a refresh runs, so an interrupted one
  is finished by the next ``zmr checkout`` instead of being taken for work.

A checkout made with ``--dir`` is remembered in ``.zmr/checkouts/<model>/<component>``
of the zmr repository.

Export invariants (DESIGN.md §3, byte-stable):

- a commit that is exactly an existing patch (same author, date and message;
  the patch applies to the commit's parent with no offset and gives the
  commit's tree) keeps that file's bytes, whatever wrote it (quilt too);
- every other commit is written canonically (``zmr.patchfile``); a file whose
  canonical bytes are already on disk is not rewritten;
- names are kept for patches that keep their subject; new and reworded
  patches are named ``NNNN-<subject-slug>.patch`` by position;
- files are removed only when they were listed in the series; ``series``
  keeps its comments, blank lines and options where the entries survive;
- every file is written to a temporary file and renamed; patch files first,
  then ``series``, then removals (recorded first in
  ``.zmr/pending-removals/`` so an interrupted export finishes them next time).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

from zmr import git
from zmr.cache import Cache, Mirror, resolve_upstream
from zmr.errors import ZmrError
from zmr.manifest import Component
from zmr.files import atomic_write, current_umask
from zmr.patchfile import CommitMeta, commit_diffs, format_mail, normalize_subject, patch_file_sets, patch_name
from zmr.project import Project
from zmr.series import Patch, SeriesEntry, parse_series_file, read_series

BASE_REF = "refs/zmr/base"
EXPORTED_REF = "refs/zmr/exported"
BACKUP_PREFIX = "refs/zmr/backup/"
REFRESH_MARKER = "zmr-refresh"
_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or git am",
    "BISECT_LOG": "a bisect",
}

Progress = Callable[[str], None]


class WorkspaceError(ZmrError):
    """A checkout or export cannot proceed."""


# -- applying patches without a working tree ------------------------------------------------


class TempIndex:
    """A throwaway index file in *repo*: read a tree, apply patches, write a tree."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._oid_bytes = 20  # SHA-1; learnt from the first tree read
        self.env: dict[str, str] = {}

    def __enter__(self) -> "TempIndex":
        self._tmp = tempfile.TemporaryDirectory(prefix="zmr-index-")
        self.env = {"GIT_INDEX_FILE": os.path.join(self._tmp.name, "index")}
        return self

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def read_tree(self, tree: str) -> None:
        self.repo.run(["read-tree", tree], env=self.env)
        self._oid_bytes = len(tree) // 2

    def read_paths(self, tree: str, paths: Sequence[str]) -> None:
        """Hold only *paths* of *tree* (a few entries instead of the whole tree: every git call is faster)."""
        self._oid_bytes = len(tree) // 2
        listing = self.repo.run(["--literal-pathspecs", "ls-tree", "-r", "-z", "--full-tree", tree, "--", *paths]).stdout if paths else b""
        self.repo.run(["read-tree", "--empty"], env=self.env)
        if listing:
            self.repo.run(["update-index", "-z", "--index-info"], input=listing, env=self.env)

    def write_tree(self) -> str:
        return self.repo.out(["write-tree"], env=self.env)

    def entries(self) -> dict[bytes, tuple[str, str]]:
        """path → (mode, object id) of every entry; read from the file, or from git when zmr cannot read it."""
        path = self.env["GIT_INDEX_FILE"]
        if not os.path.exists(path):
            return {}
        try:
            return git.index_entries(path, self._oid_bytes)
        except ValueError:
            listing = self.repo.run(["ls-files", "-s", "-z"], env=self.env).stdout
            result = {}
            for item in listing.split(b"\0"):
                if item:
                    meta, _, name = item.partition(b"\t")
                    mode, oid, _ = meta.decode().split(" ")
                    result[name] = (mode, oid)
            return result

    def apply_all(self, patches: Sequence[Patch]) -> subprocess.CompletedProcess[bytes]:
        """``git apply --cached --verbose`` of several patch files (one -p level) in order, in one process; all or none."""
        from zmr.release import apply_args

        return self.repo.run([*apply_args(patches[0].strip), "--verbose", *(str(p.path) for p in patches)], env=self.env, check=False)

    def apply(self, patch: Patch, *, reverse: bool = False, check: bool = False, verbose: bool = False) -> subprocess.CompletedProcess[bytes]:
        """``git apply --cached`` (no fuzz, whitespace as written); all or nothing."""
        from zmr.release import apply_args

        args = apply_args(patch.strip)
        if reverse:
            args.append("--reverse")
        if check:
            args.append("--check")
        if verbose:
            args.append("--verbose")
        return self.repo.run(args, input=patch.data, env=self.env, check=False)


def paths_fit(repo: git.Repo, commit: str, paths: Sequence[str]) -> bool:
    """True when every folder above each of *paths* is a folder, or absent, in *commit*.

    Then an index holding only *paths* of *commit* takes the same patches a
    full one does: no file of *commit* stands where a patch puts a folder.
    Paths with a newline cannot be asked about (cat-file reads lines): False.
    A commit never changes, so the answer is kept for the process.
    """
    return _paths_fit(repo, commit, tuple(paths))


@functools.lru_cache(maxsize=64)
def _paths_fit(repo: git.Repo, commit: str, paths: tuple[str, ...]) -> bool:
    if any("\n" in p for p in paths):
        return False
    folders = sorted({parent.as_posix() for p in paths for parent in PurePosixPath(p).parents if parent.parts})
    if not folders:
        return True
    query = "".join(f"{commit}:{folder}\n" for folder in folders).encode()
    kinds = repo.run(["cat-file", "--batch-check=%(objecttype)"], input=query).stdout.decode("utf-8", "surrogateescape").splitlines()
    return len(kinds) == len(folders) and all(kind == "tree" or kind.endswith(" missing") for kind in kinds)


def series_applies(repo: git.Repo, base: str, patches: Sequence[Patch], paths: Sequence[str] | None, in_place: bool = False) -> bool:
    """Every patch, in order, applies to *base* (*in_place*: with no hunk moved); one ``git apply`` of them all.

    Not ``--check``: with several patches, ``git apply --check`` checks each
    against *base* alone, not on top of the ones before it. A throwaway
    index takes the changes instead (only *paths* of *base*, when they fit:
    a patch failing there makes the answer False, never a wrong True).
    """
    if not patches:
        return True
    if len({p.strip for p in patches}) > 1:
        return False
    with TempIndex(repo) as index:
        if paths is not None and paths_fit(repo, base, paths):
            index.read_paths(base, paths)
        else:
            index.read_tree(base)
        proc = index.apply_all(patches)
    return proc.returncode == 0 and not (in_place and b"(offset " in proc.stderr)


def _crud(c: str) -> bool:
    return c <= " " or c in ".,:;<>\"\\'"


def _plain_ident(text: str) -> bool:
    """git commit-tree keeps *text* as it is (no crud to strip at its ends, no delimiter inside)."""
    return bool(text) and not _crud(text[0]) and not _crud(text[-1]) and not any(c in "<>\n" for c in text)


_OFFSET_RE = re.compile(r"[+-]\d{4}")


def _keys(files: frozenset[str]) -> set[bytes]:
    return {f.encode("utf-8", "surrogateescape") for f in files}


_CHECKING_RE = re.compile(rb"Checking patch (.*)\.\.\.")


def _moved_by_patch(stderr: bytes, files: Sequence[frozenset[str]]) -> list[bool | None]:
    """From ``git apply --verbose``: which patch had a hunk applied at an offset (files name the patches)."""
    owner = {name: k for k, names in enumerate(files) for name in names}
    moved: list[bool | None] = [False] * len(files)
    current: int | None = None
    for line in stderr.split(b"\n"):
        match = _CHECKING_RE.fullmatch(line)
        if match:
            # A quoted or renamed name ("a => b") is not looked up: its offsets then cannot be placed.
            current = owner.get(match.group(1).decode("utf-8", "surrogateescape"))
        elif b"(offset " in line:
            if current is None:
                return [None] * len(files)
            moved[current] = True
    return moved


def _fast_import_path(path: bytes) -> bytes:
    if b"\n" not in path and not path.startswith(b'"'):
        return path
    escaped = path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
    return b'"' + escaped + b'"'


class Replayer:
    """Commits patches one by one on top of *base* (a commit), in a temporary index.

    Each commit takes author, date and message from its patch (``CommitMeta``)
    and the same identity as committer, so a chain is a pure function of the
    base and the patch bytes.

    Given *paths* (every path the patches touch), the index holds only those
    paths, so each ``git apply`` reads and writes a few entries, not the
    whole tree, and zmr reads the index itself instead of writing a tree
    per patch. Commits wait until ``tip`` or ``commits`` is read; then one
    ``git fast-import`` writes them all onto the full tree, with the bytes
    ``commit-tree`` would give. A patch that does not apply to the partial
    index is tried again on a full one before it counts as not applying.
    """

    _BRANCH = b"refs/zmr/replay"  # fast-import's scratch branch; reset at the end of every stream

    def __init__(self, repo: git.Repo, base: str, paths: Sequence[str] | None = None):
        self.repo = repo
        self.base = base
        self.moved = False  # the last patch applied with an offset
        self._tip = base
        self._commits: list[str] = []
        self._paths = list(paths) if paths is not None else None
        self._sparse = False
        self._committed: object = None  # the index's state at the last commit: entries (sparse) or tree (full)
        self._current: object = None  # the index's state now, once asked for
        self._pending: list[tuple[CommitMeta, list[tuple[str, str, str, bytes]]]] = []  # sparse: commits to write
        self._index = TempIndex(repo)

    def __enter__(self) -> "Replayer":
        self._index.__enter__()
        if self._paths is not None and paths_fit(self.repo, self.base, self._paths):
            self._index.read_paths(self.base, self._paths)
            self._sparse = True
            self._committed = self._state()
        else:
            self._go_full()
        return self

    def __exit__(self, *exc) -> None:
        self._index.__exit__(*exc)

    @property
    def sparse(self) -> bool:
        """The index holds only the given paths (so far: a patch that failed there turns it full)."""
        return self._sparse

    @property
    def tip(self) -> str:
        self._flush()
        return self._tip

    @property
    def commits(self) -> list[str]:
        self._flush()
        return self._commits

    def try_apply(self, patch: Patch, verbose: bool = False) -> tuple[bool, str]:
        proc = self._index.apply(patch, verbose=verbose)
        if proc.returncode != 0 and self._sparse:
            # Only the whole tree can say that a patch does not apply.
            self._go_full()
            proc = self._index.apply(patch, verbose=verbose)
        self._current = None
        self.moved = proc.returncode == 0 and b"(offset " in proc.stderr
        return proc.returncode == 0, proc.stderr.decode("utf-8", "replace")

    def apply_together(self, patches: Sequence[Patch], files: Sequence[frozenset[str]]) -> list[bool | None] | None:
        """Apply patches that change pairwise disjoint *files* with one ``git apply`` (partial index only).

        Then ``commit(patch, files)`` each, in order: with no file in common,
        each one's commit holds exactly its files' new entries, as if applied
        alone. Returns per patch whether a hunk moved (None where git's report
        cannot be tied to one patch), or None when they do not all apply, and
        then nothing changed (git apply takes all of them or none).
        """
        if not self._sparse or len(patches) < 2 or len({p.strip for p in patches}) > 1:
            return None
        proc = self._index.apply_all(patches)
        if proc.returncode != 0:
            return None
        self._current = None
        return _moved_by_patch(proc.stderr, files)

    def reverse_applies(self, patch: Patch) -> bool:
        return self._index.apply(patch, reverse=True, check=True).returncode == 0

    def changed(self, files: frozenset[str] | None = None) -> bool:
        """The index differs from the last commit (in *files*); a patch that applied but changed nothing does not."""
        state = self._state()
        if files is None or not self._sparse:
            return state != self._committed
        assert isinstance(state, dict) and isinstance(self._committed, dict)
        return any(state.get(key) != self._committed.get(key) for key in _keys(files))

    def commit(self, patch: Patch, files: frozenset[str] | None = None) -> None:
        """Commit what the last successful apply left in the index (of it, only *files*, after ``apply_together``)."""
        meta = CommitMeta.for_patch(patch)
        state = self._state()
        if self._sparse:
            assert isinstance(state, dict) and isinstance(self._committed, dict)
            before = self._committed
            after = state
            if files is not None:
                after = dict(before)
                for key in _keys(files):
                    if key in state:
                        after[key] = state[key]
                    else:
                        after.pop(key, None)
            changes = [("D", "", "", path) for path in before if path not in after]
            changes += [("M", mode, oid, path) for path, (mode, oid) in after.items() if before.get(path) != (mode, oid)]
            self._pending.append((meta, changes))
            self._committed = after
        else:
            assert isinstance(state, str)
            self._tip = self.repo.commit_tree(state, [self._tip], meta.message, meta.identity, meta.identity)
            self._commits.append(self._tip)
            self._committed = state

    def _state(self) -> object:
        if self._current is None:
            self._current = self._index.entries() if self._sparse else self._index.write_tree()
        return self._current

    def _go_full(self) -> None:
        self._flush()
        self._sparse = False
        self._index.read_tree(self.repo.tree_of(self._tip))
        self._current = None
        self._committed = self._state()

    def _flush(self) -> None:
        """Write the pending commits: their changes onto the full tree of the tip, in one fast-import."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        exact = all(_plain_ident(meta.name) and _plain_ident(meta.email) and meta.timestamp >= 0 and _OFFSET_RE.fullmatch(meta.offset) for meta, _ in pending)
        stream = bytearray()
        for n, (meta, changes) in enumerate(pending, 1):
            # With an identity commit-tree would tidy, fast-import only builds the trees; commit-tree writes the commits.
            who = f"{meta.name} <{meta.email}> {meta.timestamp} {meta.offset}" if exact else "zmr <zmr@localhost> 0 +0000"
            message = meta.message.encode("utf-8") if exact else b""
            stream += b"commit %s\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n" % (self._BRANCH, n, who.encode("utf-8"), who.encode("utf-8"), len(message), message)
            stream += f"from {self._tip}\n".encode() if n == 1 else b"from :%d\n" % (n - 1)
            for status, mode, oid, path in changes:
                if status == "D":
                    stream += b"D " + _fast_import_path(path) + b"\n"
                else:
                    stream += f"M {mode} {oid} ".encode() + _fast_import_path(path) + b"\n"
            stream += b"\n"
        stream += b"reset " + self._BRANCH + b"\n\ndone\n"
        marks = self.repo.fast_import(bytes(stream))
        made = [marks[f":{n}"] for n in range(1, len(pending) + 1)]
        if not exact:
            trees = self.repo.out(["rev-parse", *(f"{c}^{{tree}}" for c in made)]).split()
            made = []
            for (meta, _), tree in zip(pending, trees):
                self._tip = self.repo.commit_tree(tree, [self._tip], meta.message, meta.identity, meta.identity)
                made.append(self._tip)
        self._commits.extend(made)
        self._tip = made[-1]


def disjoint_run(files: Sequence[frozenset[str]], start: int, usable: Callable[[int], bool] = lambda j: True) -> list[int]:
    """Indexes from *start* on, while each one's files are shared with no other of them (and *usable*)."""
    run: list[int] = []
    seen: set[str] = set()
    for j in range(start, len(files)):
        if not usable(j) or not files[j] or files[j] & seen:
            break
        run.append(j)
        seen |= files[j]
    return run


def build_chain(repo: git.Repo, component: Component, base: str, patches: Sequence[Patch], files: list[frozenset[str]] | None = None) -> list[str]:
    """One commit per patch on *base*; a patch that does not apply exactly is an error naming it.

    A chain is a pure function of the base and the patch bytes, so the mirror
    keeps it under a ref named by their digest: checkout, upstreamed and
    rebase of an unchanged series reuse it instead of replaying every patch.
    *files*: ``patch_file_sets`` of the patches, when the caller has them.
    """
    from zmr.release import apply_error

    if not patches:
        return []
    chain = kept_chain(repo, base, patches)
    if chain is not None:
        return chain
    files = files or patch_file_sets(repo, patches)
    with Replayer(repo, base, None if files is None else sorted(set().union(*files))) as replay:
        batched: set[int] = set()  # applied along with an earlier patch
        for i, patch in enumerate(patches):
            if i not in batched:
                run = disjoint_run(files, i, lambda j: patches[j].strip == patch.strip) if files else []
                if len(run) > 1 and replay.apply_together([patches[j] for j in run], [files[j] for j in run]) is not None:
                    batched = set(run[1:])
                else:
                    batched = set()
                    ok, stderr = replay.try_apply(patch)
                    if not ok:
                        raise apply_error(dataclasses.replace(component, commit=base), patch, stderr)
                    replay.commit(patch)
                    continue
            assert files is not None
            replay.commit(patch, files[i])
        repo.run(["update-ref", _chain_ref(base, patches), replay.tip])
        return list(replay.commits)


def _chain_ref(base: str, patches: Sequence[Patch]) -> str:
    digest = hashlib.sha256(base.encode())
    for patch in patches:
        digest.update(f"\n{patch.strip} {patch.sha256} {patch.name}".encode())  # the name can be the subject
    return f"refs/zmr/chains/{digest.hexdigest()}"


def kept_chain(repo: git.Repo, base: str, patches: Sequence[Patch]) -> list[str] | None:
    """The chain ``build_chain`` made earlier for exactly these patches on *base*, if the mirror still has it."""
    cached = repo.ref_value(_chain_ref(base, patches))
    if cached is None:
        return None
    # Counted back from the tip, not "tip --not base": the chain's commits carry the patches' (older) dates,
    # and a walk that excludes base by date would read much of base's history first.
    line = repo.rev_list(["--first-parent", f"--max-count={len(patches) + 1}", cached])
    if len(line) != len(patches) + 1 or line[-1] != base:
        return None
    return line[-2::-1]


# -- export plan ----------------------------------------------------------------------------


@dataclass
class PlannedPatch:
    """One patch of the exported series and what export does with its file."""

    name: str
    strip: int
    status: str  # unchanged | refreshed | modified | reworded | added
    commit: str
    subject: str
    old_name: str | None = None
    data: bytes | None = None  # bytes to write; None keeps the file as it is


@dataclass
class ExportPlan:
    """Everything an export writes, computed before any file is touched."""

    folder: Path
    display: str
    patches: list[PlannedPatch] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    series_text: bytes | None = None  # None keeps the series file as it is
    pending: list[str] = field(default_factory=list)  # leftovers of an interrupted export

    @property
    def changed(self) -> bool:
        return bool(self.writes or self.removed or self.series_text is not None)

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
        if self.series_text is not None and not any(l.startswith(("added", "removed", "reworded")) for l in lines):
            lines.append("series: order or -p options changed")
        return lines


def list_commits(repo: git.Repo, base: str, tip: str, where: str) -> list[str]:
    """The commits base..tip, oldest first; merges and empty commits are refused."""
    merges = repo.rev_list(["--merges", tip, "--not", base])
    if merges:
        subject = CommitMeta.for_commit(repo.commit_info(merges[0])).subject
        raise WorkspaceError(
            f"{where}: commit {merges[0][:12]} ({subject}) is a merge; a series is linear",
            details=["linearize the branch (git rebase zmr/base), then export again"],
        )
    return repo.commits_between(base, tip)


def plan_export(
    repo: git.Repo, base: str, commits: Sequence[str], folder: Path, display: str, journal: Path | None = None, replayed: dict[str, tuple[str, bool]] | None = None
) -> ExportPlan:
    """What exporting *commits* (on *base*, in *repo*) into the series in *folder* would write.

    *replayed* names, for commits a replay made, the patch each was made from
    and whether it applied with an offset: the same answer a second replay
    would give, without it.
    """
    series = read_series(folder, display)
    old = list(series.patches)
    series_file = folder / "series"
    old_text = series_file.read_bytes() if series_file.is_file() else None
    plan = ExportPlan(folder, display)
    infos = commit_infos(repo, commits)
    metas = [CommitMeta.for_commit(i) for i in infos]
    parent_trees: list[str] = []
    for n, (commit, info, meta) in enumerate(zip(commits, infos, metas)):
        if len(info.parents) != 1:
            raise WorkspaceError(f"{display}: commit {commit[:12]} ({meta.subject}) has {len(info.parents)} parents; a series is linear")
        parent_trees.append(infos[n - 1].tree if n and info.parents[0] == commits[n - 1] else repo.tree_of(info.parents[0]))
        if parent_trees[-1] == info.tree:
            raise WorkspaceError(
                f"{display}: commit {commit[:12]} ({meta.subject}) changes nothing",
                details=["drop it (git rebase -i zmr/base) or give it changes, then export again"],
            )
        if not meta.subject:
            raise WorkspaceError(f"{display}: commit {commit[:12]} has an empty subject", details=["reword it (git rebase -i zmr/base)"])
    assigned: list[tuple[Patch, str] | None] = [None] * len(commits)
    used: set[int] = set()

    with TempIndex(repo) as index:
        loaded: list[str | None] = [None]  # the tree the index holds, when known

        def replays(patch: Patch, position: int) -> str | None:
            """'exact' or 'offset' when *patch* turns the commit's parent into the commit's tree."""
            if loaded[0] != parent_trees[position]:
                index.read_tree(parent_trees[position])
                loaded[0] = parent_trees[position]
            proc = index.apply(patch, verbose=True)
            if proc.returncode != 0:
                return None  # git apply is all or nothing: the index is unchanged
            tree = index.write_tree()
            loaded[0] = tree
            if tree != infos[position].tree:
                return None
            return "offset" if b"(offset " in proc.stderr else "exact"

        # 1. The same patch: metadata equal and the patch replays to the commit (same position first).
        by_name = {patch.name: j for j, patch in enumerate(old)}
        for i, meta in enumerate(metas):
            name, moved = (replayed or {}).get(commits[i], ("", False))
            j = by_name.get(name)
            if j is not None and j not in used and meta.same_as_patch(old[j]):
                assigned[i] = (old[j], "refreshed" if moved else "unchanged")
                used.add(j)
                continue
            order = ([i] if i < len(old) else []) + [j for j in range(len(old)) if j != i]
            for j in order:
                if j in used or not meta.same_as_patch(old[j]):
                    continue
                how = replays(old[j], i)
                if how:
                    assigned[i] = (old[j], "unchanged" if how == "exact" else "refreshed")
                    used.add(j)
                    break
        # 2. The same subject: the patch was edited (content, body, author or date).
        for i, meta in enumerate(metas):
            if assigned[i] is not None:
                continue
            for j, patch in enumerate(old):
                if j not in used and normalize_subject(patch.subject) == normalize_subject(meta.subject):
                    assigned[i] = (patch, "modified")
                    used.add(j)
                    break
        # 3. The same change under a new subject: reworded (the same position first).
        for i in range(len(metas)):
            if assigned[i] is not None:
                continue
            order = ([i] if i < len(old) else []) + [j for j in range(len(old)) if j != i]
            for j in order:
                if j not in used and replays(old[j], i):
                    assigned[i] = (old[j], "reworded")
                    used.add(j)
                    break

    old_names = {p.name for p in old}
    kept_names = {match[0].name for match in assigned if match is not None and match[1] != "reworded"}
    taken = set(kept_names)
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
            name = _free_name(i + 1, meta.subject, folder, taken, old_names)
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
    if journal is not None and journal.is_file():
        try:
            leftovers = json.loads(journal.read_text())
        except ValueError:
            leftovers = []
        plan.pending = [n for n in leftovers if isinstance(n, str) and n not in new_names and n not in old_names and (folder / n).is_file()]
    entries, _ = parse_series_file(old_text.decode("utf-8"), display) if old_text is not None else ([], [])
    new_entries = [(p.name, p.strip, p.old_name if p.status != "added" else None) for p in plan.patches]
    if [(e.name, e.strip) for e in entries] != [(n, s) for n, s, _ in new_entries]:
        plan.series_text = render_series(old_text.decode("utf-8") if old_text is not None else "", entries, new_entries).encode("utf-8")
    return plan


def commit_infos(repo: git.Repo, commits: Sequence[str]) -> list[git.CommitInfo]:
    """Parsed commit objects, read with one ``git cat-file --batch``."""
    if not commits:
        return []
    out = repo.run(["cat-file", "--batch"], input=("\n".join(commits) + "\n").encode()).stdout
    infos = []
    pos = 0
    for commit in commits:
        end = out.index(b"\n", pos)
        oid, kind, size = out[pos:end].decode().split()
        if kind != "commit":
            raise WorkspaceError(f"{commit} is a {kind}, not a commit")
        start = end + 1
        infos.append(git.CommitInfo.parse(oid, out[start : start + int(size)]))
        pos = start + int(size) + 1
    return infos


def _free_name(position: int, subject: str, folder: Path, taken: set[str], old_names: set[str]) -> str:
    base = patch_name(position, subject)
    candidate, n = base, 1
    while candidate in taken or ((folder / candidate).exists() and candidate not in old_names):
        n += 1
        candidate = base.removesuffix(".patch") + f"-{n}.patch"
    return candidate


_ENTRY_RE = re.compile(r"^(\s*)(\S+)((?:\s+-p\d+)*)(\s*#.*)?\s*$")


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
            entry, comments, raw = value  # type: ignore[misc]
            old_by_name[entry.name] = (entry, comments, raw)
    surviving = [n for n in new if n[2] is not None and n[2] in old_by_name]
    surviving_old = {n[2] for n in surviving}

    def render(item: tuple[str, int, str | None]) -> list[str]:
        name, strip, old_name = item
        if old_name is None or old_name not in old_by_name:
            return [name + (f" -p{strip}" if strip != 1 else "")]
        entry, comments, raw = old_by_name[old_name]
        if entry.name == name and entry.strip == strip:
            return [*comments, raw]
        match = _ENTRY_RE.match(raw)
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


def write_plan(plan: ExportPlan, journal: Path | None = None) -> None:
    """Write patch files, then ``series``, then remove stale files; each write atomic."""
    for item in plan.writes:
        atomic_write(plan.folder / item.name, item.data or b"")
    removals = plan.removed + plan.pending
    if removals and journal is not None:
        atomic_write(journal, json.dumps(sorted(set(removals))).encode())
    if plan.series_text is not None:
        atomic_write(plan.folder / "series", plan.series_text)
    for name in removals:
        path = plan.folder / name
        if path.is_file():
            path.unlink()
        _prune_empty_dirs(path.parent, plan.folder)
    if journal is not None and journal.exists():
        journal.unlink()


def _prune_empty_dirs(folder: Path, root: Path) -> None:
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def journal_path(project: Project, component: Component) -> Path:
    return project.root / ".zmr" / "pending-removals" / f"{component.model}-{component.key}.json"


# -- checkouts ------------------------------------------------------------------------------


@dataclass
class Checkout:
    """A zmr checkout: a normal git working tree with zmr's notes in its config and refs."""

    path: Path
    repo: git.Repo
    config: dict[str, str]

    @property
    def git_dir(self) -> Path:
        return self.repo.git_dir

    @property
    def model(self) -> str:
        return self.config.get("zmr.model", "")

    @property
    def component(self) -> str:
        return self.config.get("zmr.component", "")

    @property
    def pin(self) -> str:
        return self.config.get("zmr.pin", "")

    @property
    def branch(self) -> str:
        return self.config.get("zmr.branch", "")

    def head(self) -> str | None:
        return self.repo.resolve("HEAD")

    def base(self) -> str | None:
        return self.repo.ref_value(BASE_REF)

    def exported(self) -> str | None:
        return self.repo.ref_value(EXPORTED_REF)

    def set_config(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            if self.config.get(key) != value:
                self.repo.run(["config", key, value])
                self.config[key] = value


def branch_name(component: Component) -> str:
    return f"{component.model}/{component.key}"


def checkout_path(project: Project, component: Component, explicit: Path | None = None) -> Path:
    """--dir, else the folder remembered from an earlier --dir, else work/<model>/<component>."""
    if explicit is not None:
        return Path(os.path.abspath(explicit))
    pointer = _pointer(project, component)
    if pointer.is_file():
        text = pointer.read_text().strip()
        if text:
            return Path(text)
    return project.root / "work" / component.model / component.key


def _pointer(project: Project, component: Component) -> Path:
    return project.root / ".zmr" / "checkouts" / component.model / component.key


def open_checkout(path: Path) -> Checkout | None:
    """The zmr checkout at *path*; None when nothing is there; an error for anything else."""
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    git_dir = path / ".git"
    if not git_dir.is_dir():
        raise WorkspaceError(f"{path}: exists and is not a zmr checkout", details=["remove it, or pass another --dir"])
    repo = git.Repo(git_dir, path)
    proc = repo.run(["config", "--local", "-z", "--get-regexp", r"^zmr\."], check=False)
    config = {}
    for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if item:
            key, _, value = item.partition("\n")
            config[key] = value
    if "zmr.model" not in config:
        raise WorkspaceError(f"{path}: is a git repository but not a zmr checkout", details=["remove it, or pass another --dir"])
    return Checkout(path, repo, config)


def require_checkout(project: Project, component: Component, explicit: Path | None = None) -> Checkout:
    path = checkout_path(project, component, explicit)
    co = open_checkout(path)
    if co is None:
        raise WorkspaceError(
            f"{component.label}: no checkout at {show_path(project, path)}",
            details=[f"run `zmr checkout {component.model} -c {component.key}` first"],
        )
    check_identity(co, component)
    check_not_half_refreshed(co, component)
    return co


def check_not_half_refreshed(co: Checkout, component: Component) -> None:
    if (co.git_dir / REFRESH_MARKER).exists():
        raise WorkspaceError(
            f"{co.path}: an interrupted `zmr checkout` left this checkout half-refreshed",
            details=[f"run `zmr checkout {component.model} -c {component.key}` again to finish it"],
        )


def check_identity(co: Checkout, component: Component) -> None:
    if (co.model, co.component) != (component.model, component.key):
        raise WorkspaceError(
            f"{co.path}: is the checkout of {co.model}/{co.component}, not {component.label}",
            details=["pass another --dir"],
        )


def dirty(co: Checkout, untracked_files: bool = True) -> list[str]:
    """Why the checkout holds uncommitted work: changed (or untracked) files, an operation in progress.

    Untracked files count before a checkout moves the tree (``reset --hard``
    would overwrite one that the new tree tracks); export reads commits only.
    """
    reasons = []
    for name, what in _IN_PROGRESS.items():
        if (co.git_dir / name).exists():
            reasons.append(f"{what} is in progress")
    out = co.repo.run(["status", "--porcelain=v1", "-z", "--untracked-files=normal", "--ignore-submodules=none"]).stdout
    entries = [e for e in out.decode("utf-8", "surrogateescape").split("\0") if e]
    changed = [e[3:] for e in entries if len(e) > 3 and e[:2] != "??"]
    untracked = [e[3:] for e in entries if e.startswith("??")]
    if changed:
        reasons.append("uncommitted changes in " + _few(changed))
    if untracked and untracked_files:
        reasons.append("untracked files " + _few(untracked))
    return reasons


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def sync_state(project: Project, component: Component, co: Checkout) -> tuple[bool, list[str]]:
    """(the checkout's commits equal the series, the work that exporting would save).

    Work is reported only when HEAD moved since the last checkout or export
    (``refs/zmr/exported``): a checkout left behind by a newer series is stale,
    not precious.
    """
    head = co.head()
    if head is None:
        return False, []
    fresh = head == co.exported()
    base = co.base()
    if base is None or not co.repo.ok(["merge-base", "--is-ancestor", base, head]):
        return False, [] if fresh else [f"HEAD {head[:12]} is not on top of the checkout's base"]
    if co.pin != component.commit:
        count = len(co.repo.commits_between(base, head))
        return False, [] if fresh else [f"{count} commit(s) on the old pin {co.pin[:12]} (the manifest now pins {component.commit[:12]})"]
    try:
        commits = list_commits(co.repo, base, head, component.label)
        plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches)
    except ZmrError as err:
        return False, [] if fresh else [err.message]
    if not plan.changed:
        return True, []
    return False, [] if fresh else ["commits not exported: " + "; ".join(plan.summary())]


def rebase_in_progress(project: Project, component: Component) -> Path | None:
    path = project.root / ".zmr" / "rebase" / f"{component.model}-{component.key}"
    return path if (path / "state.json").is_file() else None


def _refuse_during_rebase(project: Project, component: Component, what: str) -> None:
    if rebase_in_progress(project, component):
        raise WorkspaceError(
            f"{component.label}: a rebase is in progress; {what} would interfere",
            details=[f"finish it with `zmr rebase {component.model} -c {component.key} --continue`, or undo it with `--abort`"],
        )


@dataclass
class CheckoutResult:
    component: Component
    path: Path
    branch: str
    base: str
    tip: str
    patches: int
    action: str  # created | refreshed | unchanged
    backups: list[str] = field(default_factory=list)


def checkout(project: Project, component: Component, cache: Cache | None = None, path: Path | None = None, force: bool = False, progress: Progress | None = None) -> CheckoutResult:
    """Make (or refresh) the working tree of *component*: the pin plus one commit per patch."""
    _refuse_during_rebase(project, component, "a checkout")
    cache = cache or Cache()
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    in_sync = False
    if co is not None:
        check_identity(co, component)
        if not (co.git_dir / REFRESH_MARKER).exists():
            problems = dirty(co)
            in_sync, work = sync_state(project, component, co)
            problems += work
            if problems and not force:
                raise WorkspaceError(
                    f"{show_path(project, target)}: the checkout of {component.label} has work that is not in the series",
                    details=[
                        *problems,
                        f"keep it: commit, then `zmr export {component.model} -c {component.key}`",
                        f"or discard it: `zmr checkout {component.model} -c {component.key} --force` (saves it under {BACKUP_PREFIX}... first)",
                    ],
                )
            if in_sync and not problems:
                # The branch already is the series (maybe as the engineer's own commits): leave it.
                head = co.head() or ""
                if co.exported() != head:
                    co.repo.update_refs([git.RefUpdate(EXPORTED_REF, head, co.exported())], "zmr checkout")
                if path is not None:
                    atomic_write(_pointer(project, component), (str(target) + "\n").encode())
                count = len(co.repo.commits_between(component.commit, head))
                return CheckoutResult(component, target, co.branch, component.commit, head, count, "unchanged")
    series = read_series(project.root / component.patches, component.patches)
    if progress:
        progress(f"{component.label}: fetching {component.commit[:12]}")
    mirror = cache.ensure(resolve_upstream(component.upstream, project.root), [component.commit], display=f"{component.label} ({component.upstream})")
    if progress:
        progress(f"{component.label}: committing {len(series.patches)} patches")
    chain = build_chain(mirror.repo, component, component.commit, series.patches)
    tip = chain[-1] if chain else component.commit
    branch = branch_name(component)
    config = config_values(project, component, branch)
    if co is None:
        create_checkout(target, mirror, branch, component.commit, tip, config)
        action, backups = "created", []
    else:
        backups = _backup(co) if force else []
        action = refresh(co, mirror.path, branch, component.commit, tip, config, clean=force, extra_updates=backups)
    if path is not None:
        atomic_write(_pointer(project, component), (str(target) + "\n").encode())
    return CheckoutResult(component, target, branch, component.commit, tip, len(series.patches), action, [u.ref for u in backups])


def config_values(project: Project, component: Component, branch: str) -> dict[str, str]:
    return {
        "zmr.model": component.model,
        "zmr.component": component.key,
        "zmr.pin": component.commit,
        "zmr.branch": branch,
        "zmr.project": str(project.root),
        "zmr.upstream": component.upstream,
    }


def create_checkout(target: Path, mirror: Mirror | Path, branch: str, base: str, tip: str, config: dict[str, str], extra: Sequence[str] = ()) -> None:
    """A new checkout, built in a temporary sibling folder and renamed into place."""
    source = mirror.path if isinstance(mirror, Mirror) else mirror
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.zmr-tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by an interrupted checkout
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.zmr-tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())
        git.run(["init", "--quiet", f"--initial-branch={branch}", str(tmp)])
        repo = git.Repo(tmp / ".git", tmp)
        for key, value in config.items():
            repo.run(["config", key, value])
        _fetch(repo, source, [tip, base, *extra], base)
        repo.update_refs(
            [git.RefUpdate(f"refs/heads/{branch}", tip, None), git.RefUpdate(BASE_REF, base, None), git.RefUpdate(EXPORTED_REF, tip, None)],
            "zmr checkout",
        )
        repo.run(["reset", "--quiet", "--hard", "HEAD"])
        if target.is_dir():
            target.rmdir()  # an empty folder: checked by open_checkout
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fetch(repo: git.Repo, source: Path, oids: Sequence[str], base: str) -> None:
    """Copy the objects of *oids* and their history down to *base* into *repo*.

    The checkout is shallow at *base*'s depth: engineers need the series and
    the pinned tree, not upstream's whole history (a mirror used for rebases
    has all of it, and copying that made a checkout of Megatron-LM take 11 s).
    """
    wanted = [o for o in dict.fromkeys(oids) if not repo.has_object(o, "commit")]
    if wanted:
        mirror = git.Repo(source)
        depth = 1 + max(int(mirror.out(["rev-list", "--count", o, "--not", base])) for o in wanted)
        # A local fetch copies objects (no alternates); --update-shallow accepts a shallow mirror's roots.
        repo.fetch(str(source), wanted, depth=depth, extra=["--update-shallow"])


def refresh(co: Checkout, source: Path, branch: str, base: str, tip: str, config: dict[str, str], *, clean: bool, extra_updates: Sequence[git.RefUpdate] = (), extra_objects: Sequence[str] = (), exported: str | None = None) -> str:
    """Point the checkout's branch at *tip* on *base* and reset its working tree.

    A marker file makes an interrupted refresh resumable: the next checkout
    sees it and finishes the job instead of taking the half-reset tree for work.
    """
    head_ref = co.repo.run(["symbolic-ref", "--quiet", "HEAD"], check=False).stdout.decode().strip()
    if (
        co.head() == tip
        and head_ref == f"refs/heads/{branch}"
        and co.base() == base
        and co.exported() == (exported or tip)
        and not extra_updates
        and not dirty(co)
        and all(co.config.get(k) == v for k, v in config.items())
        and not (co.git_dir / REFRESH_MARKER).exists()
    ):
        return "unchanged"
    marker = co.git_dir / REFRESH_MARKER
    atomic_write(marker, f"{tip}\n".encode())
    _fetch(co.repo, source, [tip, base, *extra_objects], base)
    current = co.repo.refs("refs/")
    wanted = {f"refs/heads/{branch}": tip, BASE_REF: base, EXPORTED_REF: exported or tip}
    updates = [git.RefUpdate(ref, new, current.get(ref)) for ref, new in wanted.items() if current.get(ref) != new]
    co.repo.update_refs([*updates, *extra_updates], "zmr checkout")
    for args in (["rebase", "--quit"], ["cherry-pick", "--quit"], ["am", "--quit"]):
        co.repo.run(args, check=False)
    co.repo.run(["symbolic-ref", "HEAD", f"refs/heads/{branch}"])
    co.set_config(config)
    co.repo.run(["reset", "--quiet", "--hard", "HEAD"])
    if clean:
        co.repo.run(["clean", "--quiet", "-d", "--force"])
    marker.unlink()
    return "refreshed"


def _backup(co: Checkout) -> list[git.RefUpdate]:
    """Refs that keep the checkout's commits and working tree before --force discards them."""
    head = co.head()
    if head is None:
        return []
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    existing = co.repo.refs(BACKUP_PREFIX)
    name = f"{BACKUP_PREFIX}{stamp}"
    n = 1
    while name in existing or f"{name}-worktree" in existing:
        n += 1
        name = f"{BACKUP_PREFIX}{stamp}-{n}"
    updates = []
    if head != co.exported():
        updates.append(git.RefUpdate(name, head, None))
    if dirty(co):
        with TempIndex(co.repo) as index:
            index.read_tree(head)
            co.repo.run(["add", "--all", "--", "."], env=index.env)
            tree = index.write_tree()
        if tree != co.repo.tree_of(head):
            ident = git.Identity("zmr", "zmr@localhost", int(datetime.datetime.now().timestamp()))
            snap = co.repo.commit_tree(tree, [head], "zmr: working tree saved by checkout --force\n", ident, ident)
            updates.append(git.RefUpdate(f"{name}-worktree", snap, None))
    return updates


# -- export ---------------------------------------------------------------------------------


@dataclass
class ExportResult:
    component: Component
    path: Path
    plan: ExportPlan


def export(project: Project, component: Component, path: Path | None = None, dry_run: bool = False) -> ExportResult:
    """Write the checkout's commits (zmr/base..HEAD) back into the series, byte-stable."""
    _refuse_during_rebase(project, component, "an export")
    co = require_checkout(project, component, path)
    where = show_path(project, co.path)
    base = co.base()
    head = co.head()
    if co.pin != component.commit or base != component.commit:
        raise WorkspaceError(
            f"{where}: the base moved: the checkout is on {(base or co.pin)[:12]}, the manifest pins {component.commit[:12]}",
            details=[
                "the series belongs to the new pin now; exporting would write patches made for the old one",
                f"save your commits (git branch keep), then `zmr checkout {component.model} -c {component.key} --force` and cherry-pick them",
            ],
        )
    if head is None or not co.repo.ok(["merge-base", "--is-ancestor", base, head]):
        raise WorkspaceError(
            f"{where}: HEAD is not on top of zmr/base ({base[:12]})",
            details=["rebase your branch onto zmr/base (git rebase zmr/base), then export again"],
        )
    problems = dirty(co, untracked_files=False)
    if problems:
        raise WorkspaceError(f"{where}: the working tree is not clean", details=[*problems, "commit or stash the changes, then export again"])
    commits = list_commits(co.repo, base, head, component.label)
    journal = journal_path(project, component)
    plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches, journal)
    if not dry_run:
        if plan.changed or plan.pending:
            write_plan(plan, journal)
        if co.exported() != head:
            co.repo.update_refs([git.RefUpdate(EXPORTED_REF, head, co.exported())], "zmr export")
    return ExportResult(component, co.path, plan)


def show_path(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)


def select_components(project: Project, model: str, keys: Sequence[str] | None) -> list[Component]:
    manifest = project.manifests([model])[0]
    if keys:
        return [manifest.component(k) for k in keys]
    return list(manifest.components.values())
