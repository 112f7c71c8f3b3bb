"""Replaying a series: patches → trees and commits in a throwaway index, never in a working tree.

Every command that turns patches into git objects stands on this module:
build and verify (a tree), checkout (one commit per patch), rebase and
upstreamed (which patches still apply on a new upstream commit), export
and import (does a patch give a commit's tree?). The pipeline::

    series ──patch_file_sets (git apply --numstat)──▶ the paths each patch touches
    base commit ──read-tree of just those paths (paths_fit: or the whole tree)──▶ TempIndex
    patches ──Replayer.replay: git apply --cached, one run of patches on pairwise
              disjoint files in one process, else one patch at a time──▶ Steps
              (applied / empty / failed / skipped), each applied patch a pending commit
    pending commits ──one git fast-import onto the full tree of the tip──▶ commits

The partial index is an optimisation that never changes an answer: a patch
that fails there is tried again on the full tree before it counts as
failed, and a batch that fails is replayed one patch at a time. Commit ids
depend only on the base and the patch bytes (author, date and message from
each patch, the same identity as committer), so a chain is kept in the
mirror under a ref named by their digest (``kept_chain``) and a later
replay of the same series reuses it.

The callers keep only their policy on top of ``Replayer.replay``:
``build_chain`` raises on the first patch that fails, ``zmr rebase`` drops
a patch that is already upstream (``zmr.ops.landed``, the one answer)
and stops at the first conflict, ``zmr upstreamed`` reports both. ``apply_series`` (build, verify) needs only
the final tree: one ``git apply`` of the whole series, then one by one to
name the patch that fails. ``trial_pick`` (``zmr update``) goes on where a
replay stopped the way rebase's cherry-picks would: each remaining commit
merged over its parent as cherry-pick merges it (``git.Repo.pick_tree``,
renames followed), in objects only.

The git-object helpers that compare a series with upstream (``patch_ids``,
``file_sets``, ``files_unchanged``) live here too. How patches are applied:
docs/reference.md §3.3; the refs kept in the mirror: §8.4.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from zmr.infra import git
from zmr.infra.errors import ZmrError
from zmr.model.manifest import Component
from zmr.model.patchfile import CommitMeta, diff_tree
from zmr.model.resolutions import NotReplayed, Recorded, try_recorded
from zmr.model.series import Patch


class ApplyError(ZmrError):
    """A patch of the series does not apply to the pinned upstream tree."""


def apply_options(strip: int) -> list[str]:
    # No fuzz (git apply never fuzzes), whitespace as written, no rename guessing.
    return ["--cached", f"-p{strip}", "--whitespace=nowarn"]


_FAILED_AT = r"patch failed: (.+):(\d+)$"  # compiled (and kept) by re when first used, as zmr.infra.git's patterns (here too below)


def apply_error(component: Component, patch: Patch, stderr: str, store: Path | None = None) -> ZmrError:
    """The error for *patch* not applying to *component*'s pin: the file and hunk git stopped at, and what to do.

    When git could not write its objects (into *store*: a read-only or full
    cache), the error says that, not that the patch does not apply.
    """
    reason = git.storage_problem(stderr)
    if reason:
        return git.StorageError(("apply", *apply_options(patch.strip)), 1, b"", stderr.encode(), store or "the repository's object store", reason)
    lines = [line.removeprefix("error: ").strip() for line in stderr.splitlines() if line.strip()]
    where = ""
    failed_at = re.compile(_FAILED_AT)  # once, not per line
    for line in lines:
        match = failed_at.search(line)
        if match:
            file, start = match.group(1), int(match.group(2))
            hunk = next((h for h in patch.hunks() if h.file == file and h.old_start == start), None)
            if hunk is None:
                hunk = next((h for h in patch.hunks() if h.file == file), None)
            where = f"{file}, hunk #{hunk.index} ({hunk.header.split(' @@')[0]} @@, line {hunk.line} of the patch)" if hunk else f"{file}:{start}"
            break
    if not where:
        for line in lines:
            if ":" in line:
                where = line
                break
    message = f"{component.patches}/{patch.name}: does not apply to {component.upstream} at {component.commit}"
    details = [f"failed at: {where}" if where else "git apply failed", *[f"git: {line}" for line in lines[-6:]]]
    if b"\r\n" in patch.data:
        details.append("the patch has CRLF line endings; if the tree's files use LF, convert the patch to LF")
    shown = f"{component.patches}/{patch.name}"
    details += [
        f"no checkout can be made while it does not apply: fix the file itself (edit {shown} at the hunk above),"
        f" or take it back from the last commit where it applied: `git log --oneline -- {shown}`, then `git checkout <commit> -- {shown}`",
    ]
    return ApplyError(message, details=details)


# -- the throwaway index ------------------------------------------------------------------------


class TempIndex:
    """A throwaway index file in *repo*: read a tree, apply patches, write a tree.

    Invariant: it never touches the repository's own index or any working
    tree; ``git apply --cached`` changes it all or not at all, so after a
    failed apply it holds what it held before.
    """

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._oid_bytes = 20  # SHA-1; learnt from the first tree read
        self.env: dict[str, str] = {}

    def __enter__(self) -> TempIndex:
        self._tmp = tempfile.TemporaryDirectory(prefix="zmr-index-")
        self.env = {"GIT_INDEX_FILE": os.path.join(self._tmp.name, "index")}
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def read_tree(self, tree: str) -> None:
        self.repo.read_tree(tree, env=self.env)
        self._oid_bytes = len(tree) // 2

    def read_paths(self, tree: str, paths: Sequence[str]) -> None:
        """Hold only *paths* of *tree* (a few entries instead of the whole tree: every git call is faster)."""
        self._oid_bytes = len(tree) // 2
        listing = self.repo.ls_tree_paths(tree, paths)
        self.repo.read_tree(None, env=self.env)
        if listing:
            self.repo.update_index(listing, env=self.env)

    def hold(self, entries: dict[bytes, tuple[str, str]], oid_bytes: int = 20) -> None:
        """Hold exactly *entries* (path → (mode, object id)): what ``read_paths`` reads, from entries the caller already knows."""
        self._oid_bytes = oid_bytes
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.env["GIT_INDEX_FILE"])  # no index file reads as an empty index
        if entries:
            listing = b"".join(f"{mode} {'commit' if mode == '160000' else 'blob'} {oid}\t".encode() + path + b"\0" for path, (mode, oid) in entries.items())
            self.repo.update_index(listing, env=self.env)

    def write_tree(self, missing_ok: bool = False) -> str:
        """*missing_ok*: blobs may be absent (a partial mirror); a tree id does not depend on them being present."""
        return self.repo.write_tree(missing_ok=missing_ok, env=self.env)

    def entries(self) -> dict[bytes, tuple[str, str]]:
        """path → (mode, object id) of every entry; read from the file, or from git when zmr cannot read it."""
        path = self.env["GIT_INDEX_FILE"]
        if not os.path.exists(path):
            return {}
        try:
            return git.index_entries(path, self._oid_bytes)
        except ValueError:
            listing = self.repo.ls_files(["-s", "-z"], env=self.env).stdout
            result = {}
            for item in listing.split(b"\0"):
                if item:
                    meta, _, name = item.partition(b"\t")
                    mode, oid, _ = meta.decode().split(" ")
                    result[name] = (mode, oid)
            return result

    def apply_all(self, patches: Sequence[Patch], verbose: bool = True) -> subprocess.CompletedProcess[bytes]:
        """``git apply --cached`` of several patch files (one -p level) in order; all or none.

        One process, or (for a long series) one per batch of files that fits in
        the arguments of a process, each on the index the one before left: the
        same as one process, as git applies the files one after the other. A
        batch that fails puts the index back as it was before the first.
        """
        args = apply_options(patches[0].strip)
        if verbose:
            args.append("--verbose")
        batches = git.argument_batches([str(p.path) for p in patches])
        if len(batches) == 1:
            return self.repo.apply(args, batches[0], env=self.env)
        index_file = self.env["GIT_INDEX_FILE"]
        saved = index_file + ".before"
        had_index = os.path.exists(index_file)
        if had_index:
            shutil.copyfile(index_file, saved)
        stdout, stderr = bytearray(), bytearray()
        try:
            for batch in batches:
                proc = self.repo.apply(args, batch, env=self.env)
                stdout += proc.stdout
                stderr += proc.stderr
                if proc.returncode != 0:
                    if had_index:
                        os.replace(saved, index_file)
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(index_file)
                    return subprocess.CompletedProcess(proc.args, proc.returncode, bytes(stdout), bytes(stderr))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(saved)
        return subprocess.CompletedProcess(proc.args, 0, bytes(stdout), bytes(stderr))

    def apply(self, patch: Patch, *, reverse: bool = False, check: bool = False, verbose: bool = False) -> subprocess.CompletedProcess[bytes]:
        """``git apply --cached`` (no fuzz, whitespace as written); all or nothing."""
        args = apply_options(patch.strip)
        if reverse:
            args.append("--reverse")
        if check:
            args.append("--check")
        if verbose:
            args.append("--verbose")
        return self.repo.apply(args, input=patch.data, env=self.env)


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
    return all(info is None or info.type == "tree" for info in repo.object_infos([f"{commit}:{folder}" for folder in folders]))


# -- trees: the whole series at once ---------------------------------------------------------------


def apply_series(repo: git.Repo, component: Component, base_tree: str, patches: Sequence[Patch], *, missing_ok: bool = False) -> str:
    """Tree of *base_tree* with *patches* applied in order; the first patch that does not apply is an ``ApplyError``.

    *missing_ok*: the repository is a partial mirror (verify), which lacks the blobs no patch touches;
    a tree id does not depend on them being present. Elsewhere a missing blob stays an error.
    """
    with TempIndex(repo) as index:
        index.read_tree(base_tree)
        # Fast path: one `git apply` for the whole series (it applies the
        # patches in order, each on the result of the previous ones).
        if len({p.strip for p in patches}) == 1:
            if index.apply_all(patches, verbose=False).returncode == 0:
                return index.write_tree(missing_ok=missing_ok)
            index.read_tree(base_tree)
        for patch in patches:
            proc = index.apply(patch)
            if proc.returncode != 0:
                raise apply_error(component, patch, proc.stderr.decode("utf-8", "replace"), repo.git_dir)
        return index.write_tree(missing_ok=missing_ok)


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


# -- commits: one per patch ---------------------------------------------------------------------------


def _crud(c: str) -> bool:
    return c <= " " or c in ".,:;<>\"\\'"


def _plain_ident(text: str) -> bool:
    """git commit-tree keeps *text* as it is (no crud to strip at its ends, no delimiter inside)."""
    return bool(text) and not _crud(text[0]) and not _crud(text[-1]) and not any(c in "<>\n" for c in text)


_OFFSET = r"[+-]\d{4}"


def _keys(files: frozenset[str]) -> set[bytes]:
    return {f.encode("utf-8", "surrogateescape") for f in files}


_CHECKING = rb"Checking patch (.*)\.\.\."


def _moved_by_patch(stderr: bytes, files: Sequence[frozenset[str]]) -> list[bool | None]:
    """From ``git apply --verbose``: which patch had a hunk applied at an offset (files name the patches)."""
    owner = {name: k for k, names in enumerate(files) for name in names}
    moved: list[bool | None] = [False] * len(files)
    current: int | None = None
    checking = re.compile(_CHECKING)  # once, not per line
    for line in stderr.split(b"\n"):
        match = checking.fullmatch(line)
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


@dataclass(frozen=True)
class Step:
    """What ``Replayer.replay`` did with one patch; *index* is its position in the patches given.

    *status* is one of:

    - ``applied``: the patch applied and is committed (a pending commit until
      ``tip`` or ``commits`` is read); *moved* says whether a hunk applied at
      an offset (None: not asked for, or git's report of a batch could not
      tie an offset to one patch);
    - ``empty``: it applied but changed nothing, and is not committed;
    - ``failed``: it does not apply, on the full tree either; the index is
      as it was before it, and *error* is git's report;
    - ``skipped``: the caller asked for it not to be applied.
    """

    index: int
    patch: Patch
    status: Literal["applied", "empty", "failed", "skipped"]
    moved: bool | None = None
    error: str = ""


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

    Invariant: ``commits`` (once read) are exactly the commits ``commit``
    was asked for, in order, each on the one before and the first on
    *base*; the index equals the last commit's tree (on the given paths,
    while sparse) plus whatever the last successful apply left uncommitted.

    ``replay`` is the driver the commands use; ``try_apply``,
    ``apply_together`` and ``commit`` are its steps.
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

    def __enter__(self) -> Replayer:
        self._index.__enter__()
        if self._paths is not None and paths_fit(self.repo, self.base, self._paths):
            self._index.read_paths(self.base, self._paths)
            self._sparse = True
            self._committed = self._state()
        else:
            self._go_full()
        return self

    def __exit__(self, *exc: object) -> None:
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

    def replay(
        self,
        patches: Sequence[Patch],
        files: Sequence[frozenset[str]] | None = None,
        *,
        skip: Collection[int] = (),
        offsets: bool = False,
        keep_empty: bool = False,
        there: Callable[[Step], bool] | None = None,
    ) -> Iterator[Step]:
        """Apply and commit *patches* in order, one ``Step`` per patch.

        *files* (the paths each patch changes, when known) lets a run of
        patches that share no file with each other go in one ``git apply``;
        when the run does not apply as a whole, its patches are applied one
        at a time, so the steps are the same either way. Patches at *skip*
        are not applied (and end a run). *offsets*: find out which patches
        applied at an offset (``git apply --verbose``; its report also goes
        into a failed step's error). *keep_empty*: commit a patch that
        changes nothing too (an empty commit) and call it applied. *there*:
        asked of a patch that applied only at an offset, on the index without
        it (as a ``failed`` step), whether its change is there already
        (``zmr.landed.already_there``): upstream's copy of a block can end
        with the lines the patch's context begins with, and git then finds
        that context again after it and would put the block in twice; such a
        patch is a ``failed`` step, for the caller's answer.

        A failed step leaves the index as it was: the caller may look at it
        (``reverse_applies``) before asking for the next step, or stop.
        """

        def run_from(i: int) -> list[int]:
            """The patches from *i* on that can go in one git apply: no file shared, one -p level, none skipped."""
            return disjoint_run(files, i, lambda j: j not in skip and patches[j].strip == patches[i].strip) if files else []

        batched: dict[int, bool | None] = {}  # patch index → moved, for patches applied along with an earlier one
        for i, patch in enumerate(patches):
            if i in skip:
                yield Step(i, patch, "skipped")
                continue
            names: frozenset[str] | None = None  # set: the patch went in with others; commit only its files
            if i in batched:
                assert files is not None
                names, moved = files[i], batched.pop(i)
            else:
                run = run_from(i)
                flags = self.apply_together([patches[j] for j in run], [files[j] for j in run]) if files and len(run) > 1 else None
                if flags is not None:
                    assert files is not None
                    batched = dict(zip(run[1:], flags[1:]))
                    names, moved = files[i], flags[0]
                else:
                    ok, error = self.try_apply(patch, verbose=offsets or there is not None)
                    if not ok:
                        yield Step(i, patch, "failed", error=error)
                        continue
                    moved = self.moved if offsets or there is not None else None
            if moved and there is not None:
                self._restore(names)
                if there(Step(i, patch, "failed")):
                    yield Step(i, patch, "failed", error="it applies only at an offset, where its change is there already")
                    continue
                ok, error = self.try_apply(patch, verbose=True)
                if not ok:  # (it applied a moment ago, on the same index)
                    yield Step(i, patch, "failed", error=error)
                    continue
            if not keep_empty and not self.changed(names):
                yield Step(i, patch, "empty")
                continue
            self.commit(patch, names)
            yield Step(i, patch, "applied", moved)

    def _restore(self, files: frozenset[str] | None) -> None:
        """The index back to the last commit (in *files*, after ``apply_together``): the last apply undone."""
        committed = self._committed
        if self._sparse:
            assert isinstance(committed, dict)
            state = self._state()
            assert isinstance(state, dict)
            held = dict(state)
            for key in _keys(files) if files is not None else set(state) | set(committed):
                if key in committed:
                    held[key] = committed[key]
                else:
                    held.pop(key, None)
            oid = next(iter(held.values()), ("", "0" * 40))[1]
            self._index.hold(held, len(oid) // 2)
        else:
            assert isinstance(committed, str)
            self._index.read_tree(committed)
        self._current = None

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

    def read_file(self, path: str) -> bytes | None:
        """The bytes of *path* in the index now (None: absent, or its blob is not in a partial mirror)."""
        entry = self._index.entries().get(path.encode("utf-8", "surrogateescape"))
        if entry is None:
            return None
        try:
            return self.repo.cat_file("blob", entry[1])
        except git.GitError:
            return None

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
        exact = all(_plain_ident(meta.name) and _plain_ident(meta.email) and meta.timestamp >= 0 and re.fullmatch(_OFFSET, meta.offset) for meta, _ in pending)
        stream = bytearray()
        for n, (meta, changes) in enumerate(pending, 1):
            # With an identity commit-tree would tidy, fast-import only builds the trees; commit-tree writes the commits.
            who = f"{meta.name} <{meta.email}> {meta.timestamp} {meta.offset}" if exact else "zmr <zmr@localhost> 0 +0000"
            message = meta.message.encode("utf-8") if exact else b""
            stream += b"commit %s\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n" % (
                self._BRANCH,
                n,
                who.encode("utf-8"),
                who.encode("utf-8"),
                len(message),
                message,
            )
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
            built, made = made, []
            for (meta, _), commit, tree in zip(pending, built, self.repo.object_infos([f"{c}^{{tree}}" for c in built])):
                if tree is None:
                    raise ValueError(f"{commit}: a commit fast-import made is not in {self.repo.git_dir}")
                self._tip = self.repo.commit_tree(tree.oid, [self._tip], meta.message, meta.identity, meta.identity)
                made.append(self._tip)
        self._commits.extend(made)
        self._tip = made[-1]


def patch_file_sets(repo: git.Repo, patches: Sequence[Patch]) -> list[frozenset[str]] | None:
    """The paths each patch touches, as ``git apply --numstat`` reads them; None when it cannot tell.

    One ``git apply --numstat`` per direction and -p level reads them all,
    with a marker patch (a file of a name no tree has) between two patches
    to tell where one ends. ``--numstat`` names a renamed or copied file by
    its new name only, so the patches are read a second time reversed for
    the old names.
    """
    marker = f".zmr-numstat-marker-{os.urandom(8).hex()}"
    found: list[set[str]] = [set() for _ in patches]
    with tempfile.TemporaryDirectory(prefix="zmr-numstat-") as tmp:
        for strip in sorted({p.strip for p in patches}):
            group = [k for k, p in enumerate(patches) if p.strip == strip]
            name = "z/" * (strip - 1) + marker  # what is left of a/<name> after -p<strip>
            marker_file = Path(tmp) / f"marker-{strip}.patch"
            marker_file.write_text(f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+x\n")
            marker_cost = git.argument_bytes(str(marker_file))
            for batch in git.argument_batches(group, cost=lambda k: git.argument_bytes(str(patches[k].path)) + marker_cost):  # noqa: B023 - used at once
                if not _numstat_batch(repo, batch, patches, strip, marker, str(marker_file), found):
                    return None
    return [frozenset(paths) for paths in found]


def _numstat_batch(repo: git.Repo, group: Sequence[int], patches: Sequence[Patch], strip: int, marker: str, marker_file: str, found: list[set[str]]) -> bool:
    """Add to *found* the paths of the patches at *group* (one -p level), each followed by the marker patch; False when git cannot tell."""
    args = [arg for k in group for arg in (str(patches[k].path), marker_file)]
    for direction in ([], ["--reverse"]):
        proc = repo.apply(["--numstat", "-z", *direction, f"-p{strip}", "--"], args)
        paths = _numstat_paths(proc.stdout) if proc.returncode == 0 else None
        if paths is None:
            return False
        position = 0
        for path in paths:
            if path == marker:
                position += 1
            elif position < len(group):
                found[group[position]].add(path)
            else:
                return False
        if position != len(group):
            return False
    return True


def _numstat_paths(out: bytes) -> list[str] | None:
    """The paths of ``git apply --numstat -z`` output, in order (a rename or copy: both)."""
    tokens = out.decode("utf-8", "surrogateescape").split("\0")
    paths: list[str] = []
    while tokens:
        token = tokens.pop(0)
        if not token:
            continue
        counts = token.split("\t", 2)
        if len(counts) != 3:
            return None
        if counts[2]:
            paths.append(counts[2])
        elif len(tokens) >= 2:  # "A\tD\t" then the two paths
            paths += [tokens.pop(0), tokens.pop(0)]
        else:
            return None
    return paths


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


def build_chain(
    repo: git.Repo,
    component: Component,
    base: str,
    patches: Sequence[Patch],
    files: list[frozenset[str]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """One commit per patch on *base*; a patch that does not apply exactly is an error naming it.

    A chain is a pure function of the base and the patch bytes, so the mirror
    keeps it under a ref named by their digest: checkout, upstreamed and
    rebase of an unchanged series reuse it instead of replaying every patch.
    *files*: ``patch_file_sets`` of the patches, when the caller has them.
    """
    if not patches:
        return []
    chain = kept_chain(repo, base, patches)
    if chain is not None:
        return chain
    files = files or patch_file_sets(repo, patches)
    with Replayer(repo, base, None if files is None else sorted(set().union(*files))) as replay:
        for step in replay.replay(patches, files, keep_empty=True):
            if step.status == "failed":
                raise apply_error(dataclasses.replace(component, commit=base), step.patch, step.error)
            if progress:
                progress(f"{component.label}: patch {step.index + 1} of {len(patches)} ({step.patch.name})")
        repo.update_ref(_chain_ref(base, patches), replay.tip)
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


# -- a 3-way trial: what cherry-picks would do -------------------------------------------------------


@dataclass
class TrialPicks:
    """What ``trial_pick`` made on *tip*'s tree.

    *made*: (commit, patch index) of each commit, in order, *tip* the last
    (the starting commit when none); *empty*: the indexes of the patches
    whose pick changed nothing; *upstream*: those whose pick conflicts but
    whose change the tree holds (the caller's *holds*, ``zmr.ops.landed``);
    *conflict*: the index of the patch that does not go in, with *files*
    the paths git left unmerged (empty when it names none); the trial
    stopped there.
    """

    tip: str
    made: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    empty: list[int] = dataclasses.field(default_factory=list)
    upstream: list[int] = dataclasses.field(default_factory=list)
    conflict: int | None = None
    files: list[str] = dataclasses.field(default_factory=list)
    reused: list[str] = dataclasses.field(default_factory=list)  # patches that went in by their recorded resolution
    unused: list[NotReplayed] = dataclasses.field(default_factory=list)  # recorded resolutions tried where their patch conflicted


def trial_pick(
    repo: git.Repo,
    tip: str,
    patches: Sequence[Patch],
    old_chain: Sequence[str],
    start: int,
    resolved: Recorded | None = None,
    holds: Callable[[int, str], bool] | None = None,
    renames: Callable[[], dict[str, str]] | None = None,
) -> TrialPicks:
    """Pick, 3-way, the commits of *old_chain* (one per patch, on the old pin) from *start* on, onto *tip*, in objects only.

    What ``zmr rebase``'s cherry-picks do in its checkout, without one: each
    commit is merged as cherry-pick merges it (``git.Repo.pick_tree``: merge-ort
    over the commit's parent, so a file upstream renamed is followed to its new
    name); a pick that changes nothing is upstream's (dropped as ``empty``); one
    that conflicts but whose change the tree already holds (*holds*: patch
    index, tree) is upstream's too; the first other that conflicts is the
    conflict (its files at their new names), unless its recorded resolution
    (*resolved*, ``zmr.model.resolutions``) applies there in its place, as rebase's
    checkout pass replays it (*renames*: upstream's since the pin, old path →
    new, for a resolution recorded before a rename). Commits are made with each
    patch's author, date and message, as the replay makes them; nothing but
    objects is written.
    """
    picks = TrialPicks(tip)
    tree = repo.tree_of(tip)
    for j in range(start, len(patches)):
        old = old_chain[j]
        merged = repo.pick_tree(old, old_chain[j - 1] if j else repo.parent(old), tree)
        new_tree = merged.tree
        if merged.conflicts and holds is not None and holds(j, tree):
            picks.upstream.append(j)  # the tree stays as it was
            continue
        if merged.conflicts:
            with TempIndex(repo) as index:
                index.read_tree(tree)  # the index as the patches before left it
                replay = functools.partial(_pick_resolution, repo, index, tree)
                if not try_recorded(resolved, patches[j], replay, picks.reused, picks.unused, renames):
                    picks.conflict, picks.files = j, list(merged.conflicts)
                    return picks
                new_tree = index.write_tree()
        if new_tree == tree:
            picks.empty.append(j)
            continue
        meta = CommitMeta.for_patch(patches[j])
        picks.tip = repo.commit_tree(new_tree, [picks.tip], meta.message, meta.identity, meta.identity)
        picks.made.append((picks.tip, j))
        tree = new_tree
    return picks


def _pick_resolution(repo: git.Repo, index: TempIndex, tree: str, alternative: Patch) -> str | None:
    """``trial_pick``'s replay of a recorded resolution (*alternative*) on *tree* in *index*: None when it applies and changes the tree."""
    if repo.apply(apply_options(alternative.strip), input=alternative.data, env=index.env).returncode != 0:
        index.read_tree(tree)
        return "does not apply where the patch conflicts (the new upstream with the patches before it)"
    if index.write_tree() == tree:
        return "changes nothing there"
    return None


# -- commits compared: patch ids and file sets ----------------------------------------------------------


def patch_ids(repo: git.Repo, commits: Sequence[str]) -> dict[str, str]:
    """``git patch-id --stable`` of each commit's diff: commit → patch id."""
    if not commits:
        return {}
    diff = diff_tree(repo, "--stdin", input=("\n".join(commits) + "\n").encode()).stdout
    out = repo.patch_ids(diff)
    result = {}
    for line in out.splitlines():
        pid, _, commit = line.partition(" ")
        result[commit] = pid
    return result


PATCH_IDS_PREFIX = "refs/zmr/patch-ids/"  # + chain tip: a blob of "<commit> <patch id>" lines


def chain_patch_ids(repo: git.Repo, chain: Sequence[str]) -> dict[str, str]:
    """``patch_ids`` of a chain, kept in the mirror under its tip (a chain never changes: commits are content).

    What is kept is checked before use: it must name exactly the chain's
    commits, each with one well-formed id; anything else is computed again
    and replaced.
    """
    if not chain:
        return {}
    ref = PATCH_IDS_PREFIX + chain[-1]
    data = repo.read_blob(ref)
    if data is not None:
        kept = dict(line.split(" ", 1) for line in data.decode("ascii", "replace").splitlines() if line.count(" ") == 1)
        if set(kept) == set(chain) and all(pid == "-" or git.FULL_OID_RE.fullmatch(pid) for pid in kept.values()):
            return {c: pid for c, pid in kept.items() if pid != "-"}  # "-": the commit changes nothing
    ids = patch_ids(repo, chain)
    blob = repo.hash_blob("".join(f"{c} {ids.get(c, '-')}\n" for c in chain).encode())
    repo.update_ref(ref, blob)
    return ids


def files_unchanged(repo: git.Repo, old: str, new: str, paths: Sequence[str]) -> bool:
    """True when every path is the same (or as absent) in *new* as in *old*, and can still be created there.

    Then a series touching only *paths* applies to *new* exactly as to *old*
    (a file *new* puts where the series puts a folder is the one way it could not).
    """
    for batch in git.argument_batches(paths):
        if repo.diff_tree(["--quiet", "-r", old, new, "--", *batch], options=["--literal-pathspecs"], check=False).returncode != 0:
            return False
    return paths_fit(repo, new, paths)


def file_sets(repo: git.Repo, commits: Sequence[str]) -> dict[str, frozenset[str]]:
    """The paths each commit changes (against its first parent): commit → paths."""
    if not commits:
        return {}
    changes = repo.diff_tree_raw(commits)
    return {commit: frozenset(change.path for change in changes.get(commit, ())) for commit in commits}
