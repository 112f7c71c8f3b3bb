"""The cache: one bare mirror per upstream URL (docs/reference.md §5).

Layout under ``$ZMR_CACHE`` (default ``$XDG_CACHE_HOME/zmr``, else
``~/.cache/zmr``)::

    mirrors/<slug>-<hash>.git     bare mirror of one upstream URL
    mirrors/<slug>-<hash>.lock    its lock (flock: released when the holder dies)
    mirrors/<slug>-<hash>.writers held shared by a replay's fast-import (its temp pack is live work)
    quarantine/                   mirrors found damaged, kept for inspection
    history/<slug>-<hash>.git     commits only (no trees), for how far a pin moved (zmr diff)
    revisions/v1-<commit>/        the manifests and series of a revision of the zmr repository (zmr diff)

A mirror is created by check → lock → check → ``git init`` in a temporary
folder → rename into place, so a crash never leaves half a mirror. Only
the pinned commits are fetched (depth 1 where the server allows, a full
fetch otherwise); each pin is kept reachable by ``refs/zmr/pins/<oid>``.
Before a mirror is used, every object of each pinned tree must be present;
a mirror that fails that check is moved to ``quarantine/`` and fetched anew.

Partial mirrors. ``zmr verify`` needs a pin's trees and only the blobs its
series touches (``read-tree``, ``write-tree --missing-ok`` and
``commit-tree`` read no other blob). Asked for *paths*, the cache fetches
the pin with ``--filter=blob:none`` (kept by ``refs/zmr/partial/<oid>``),
then the blobs at those paths in one fetch; ``zmr.partial=true`` in the
mirror's config records that blobs may be missing there. Invariants:

- ``refs/zmr/pins/<oid>``: every object of the tree is present;
  ``refs/zmr/partial/<oid>``: every tree is, blobs maybe not. A missing
  tree is damage (quarantine); a missing blob of a partial pin is not;
- no promisor remote is ever written into a mirror's config: the filtered
  fetches name one with ``-c`` for that command only. So git 2.39, which
  lazily fetches a missing object from any configured promisor remote,
  never fetches behind zmr's back: a command that reads a missing blob
  fails instead (newer gits also honour ``GIT_NO_LAZY_FETCH``, set by
  zmr/infra/git.py);
- full fetches into a partial mirror offer only complete refs as haves
  (``--negotiation-tip``), else the server would leave out the blobs that
  partial pins share with what is fetched; a partial pin made complete is
  fetched again whole (``--refetch``) and moves to ``refs/zmr/pins/``.

A server that ignores the filter (no ``uploadpack.allowFilter``) sends the
whole tree: that is today's depth-1 fetch, noted once in ``Cache.notes``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict

from zmr.infra import git, lock
from zmr.infra.errors import ZmrError
from zmr.infra.reports import Report


class Pinned(Protocol):
    """What the cache reads of a component (`zmr.model.manifest.Component`): the infrastructure knows no manifest."""

    @property
    def upstream(self) -> str: ...

    @property
    def label(self) -> str: ...


# A URL's scheme, scp's `host:path`, and what git says below: patterns compiled (and kept) by re when first used, as
# zmr.infra.git's, so that a command that fetches nothing never pays for them.
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*://"
_SCP_LIKE = r"^[^/:]+:(?!//)"

# The ref prefixes of a mirror, declared here only (checkout, findbase and rebase import them).
PINS = "refs/zmr/pins/"  # + oid: a pin, every object of its tree present
PARTIAL_PINS = "refs/zmr/partial/"  # + oid: a pin fetched blobless (every tree present, blobs maybe not)
HEADS = "refs/zmr/heads/"  # upstream's branches, fetched with history (ensure_history)
TAGS = "refs/zmr/tags/"  # upstream's tags, likewise
TRACK = "refs/zmr/track/"  # a branch, tag or commit fetched by name (fetch_ref)
HISTORY = "refs/zmr/history/"  # + oid: in a commits-only history repository (commit_history), not a mirror
# Refs that name upstream's commits (refs/zmr/chains/ and patch-ids/, zmr.ops.replay's, hold zmr's own).
UPSTREAM_REFS = (PINS, PARTIAL_PINS, HEADS, TAGS, TRACK)
# Those whose objects are all present: the only haves a full fetch into a partial mirror may offer.
COMPLETE_REFS = (PINS, HEADS, TAGS, TRACK)
HISTORY_REFS = (HEADS, TAGS)  # upstream's branches and tags, with their history: where zmr import looks for a base
PARTIAL_KEY = "zmr.partial"
_PROMISOR = "zmr-upstream"  # the remote name filtered fetches use, defined with -c for that fetch only
_FILTER_IGNORED = "filtering not recognized by server"
_ALL_REFS = [f"+refs/heads/*:{HEADS}*", f"+refs/tags/*:{TAGS}*"]  # every branch and tag, for history
# Ref namespaces only fetches (under the mirror's lock) write: a lock file there is always stale.
_FETCHED_REFS = tuple(prefix.rstrip("/") for prefix in UPSTREAM_REFS)
_MIRROR_OID_HEX = 40  # mirrors are made by `git init` with no object format: SHA-1
_HASH_NAMES = {40: "SHA-1", 64: "SHA-256"}
_BLOB_LIMIT = "4g"  # _fetch_move's filter: a larger blob is left out, then fetched by id
_STALE_AFTER = 600  # seconds: older temporary files of a mirror are leftovers, never live work


@contextlib.contextmanager
def _no_writer(mirror: Mirror) -> Iterator[bool]:
    """True, held until the end, when no process writes temporary packs into *mirror* (nobody holds its writers lock)."""
    with lock.probe(mirror.writers_lock, f"the writers of the mirror of {mirror.url}") as idle:
        yield idle


def _fetch_keep(path: Path) -> bool:
    """A ``.keep`` file that git's fetch writes until it has updated the refs (zmr keeps no pack on purpose)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(16).startswith(b"fetch-pack")
    except OSError:
        return False


def _older(path: Path, than: float) -> bool:
    try:
        return path.lstat().st_mtime < than
    except FileNotFoundError:
        return False


def _last_line(err: git.GitError) -> str:
    lines = [line for line in err.stderr_text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {err.returncode}"


def _commits(commits: Sequence[str]) -> str:
    return ", ".join(c[:12] for c in commits[:3]) + (f" and {len(commits) - 3} more" if len(commits) > 3 else "")


class CacheError(ZmrError):
    """The cache cannot provide what a pin needs."""


class FetchInterrupted(CacheError):
    """A fetch was cut short (git or its transfer killed): an error, never a reason to fetch more history instead."""


# What git says when a transfer was cut short, not refused: no fallback answers that.
_CUT_SHORT = (
    r"early EOF|the remote end hung up unexpectedly|unexpected disconnect while reading sideband packet|index-pack failed"
    r"|index-pack died|fetch-pack: invalid index-pack output|RPC failed; curl|Connection reset by peer|Broken pipe"
)
# ... unless the server said why it would not send: then a fallback may still get the commit.
_REFUSED = r"not our ref|unadvertised object|does not support shallow|remote error|couldn't find remote ref|Server does not allow"


def _cut_short(err: git.GitError) -> str:
    """Why the fetch of *err* ended early (git killed by a signal, a transfer cut off), or '' when the server refused or the input was wrong."""
    if err.returncode < 0:
        return f"git was killed by signal {-err.returncode}"
    if re.search(_REFUSED, err.stderr_text) or git.storage_problem(err.stderr_text):
        return ""  # a refusal, or this disk (full, read-only): said as such elsewhere
    match = re.search(_CUT_SHORT, err.stderr_text)
    return f"the transfer was cut off ({match.group(0)})" if match else ""


# Network errors that may pass on their own (a dropped connection, DNS, a busy server): a fetch is tried again for them.
_TRANSIENT = (
    r"Could not resolve host|Temporary failure in name resolution|Connection timed out|Operation timed out"
    r"|The requested URL returned error: (?:429|5\d\d)|gnutls_handshake|SSL_read|TLS connection was non-properly terminated"
)
FETCH_ATTEMPTS_ENV = "ZMR_FETCH_ATTEMPTS"  # how many times a fetch is tried in all (default 3; 1: no retry)
FETCH_BACKOFF_ENV = "ZMR_FETCH_BACKOFF"  # seconds before the first retry (default 2), doubled for each next one, at most 60


def _transient(err: git.GitError) -> str:
    """The transient network error of a failed fetch ('' when it is not one: a refusal, a kill, a full disk, a wrong name)."""
    if err.returncode < 0 or isinstance(err, git.DamagedRepoError) or re.search(_REFUSED, err.stderr_text) or git.storage_problem(err.stderr_text):
        return ""
    match = re.search(_TRANSIENT, err.stderr_text)  # a transfer cut off is not retried: FetchInterrupted says so
    return match.group(0) if match else ""


def fetch_attempts() -> tuple[int, float]:
    """(attempts, first delay in seconds) from the environment, bounded: 1 to 10 attempts, 0 to 60 seconds."""
    try:
        attempts = int(os.environ.get(FETCH_ATTEMPTS_ENV, "3"))
    except ValueError:
        attempts = 3
    try:
        backoff = float(os.environ.get(FETCH_BACKOFF_ENV, "2"))
    except ValueError:
        backoff = 2.0
    return max(1, min(attempts, 10)), max(0.0, min(backoff, 60.0))


def default_cache_dir() -> Path:
    explicit = os.environ.get("ZMR_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "zmr"


def resolve_upstream(upstream: str, root: Path) -> str:
    """The URL git fetches from: network URLs as written, paths made absolute from *root*."""
    if re.match(_SCHEME, upstream) or (re.match(_SCP_LIKE, upstream) and not upstream.startswith(("./", "../", "/"))):
        return upstream
    path = Path(upstream)
    if not path.is_absolute():
        path = root / path
    return str(path.resolve())


@dataclass(frozen=True)
class Mirror:
    """A bare mirror of one upstream URL."""

    url: str
    path: Path

    @property
    def repo(self) -> git.Repo:
        # fast-import (a replay, outside the mirror's lock) holds the writers lock shared: its temporary pack is then live work.
        return git.Repo(self.path, writer_lock=self.writers_lock)

    @property
    def writers_lock(self) -> Path:
        return self.path.with_suffix(".writers")


class FetchedJson(TypedDict):
    model: str
    component: str
    commit: str
    mirror: str


class FetchJson(TypedDict):
    """What ``zmr fetch`` made sure of: each component's pinned commit and the cache mirror that holds it."""

    fetched: list[FetchedJson]


@dataclass(frozen=True)
class Fetched:
    """One pinned commit ``zmr fetch`` made sure of, and the mirror that holds it."""

    model: str
    component: str
    commit: str
    mirror: Path

    def to_json(self) -> FetchedJson:
        return {"model": self.model, "component": self.component, "commit": self.commit, "mirror": str(self.mirror)}


@dataclass(frozen=True)
class FetchReport(Report):
    """What ``zmr fetch`` did: one entry per component."""

    fetched: list[Fetched]

    def to_json(self) -> FetchJson:
        return {"fetched": [f.to_json() for f in self.fetched]}


@dataclass(frozen=True)
class Upstream:
    """One upstream as the cache reaches it: the URL git fetches and the name messages give it (``Cache.for_component``).

    Every fetch of a component's upstream goes through one of these, so the
    URL is resolved and the upstream named one way everywhere.
    """

    cache: Cache
    url: str  # resolve_upstream's: network URLs as written, paths absolute
    display: str

    @property
    def mirror(self) -> Mirror:
        """Its mirror in the cache, which may not exist yet (nothing is fetched)."""
        return self.cache.mirror_for(self.url)

    def ensure(self, commits: Sequence[str], *, paths: Collection[str] | None = None) -> Mirror:
        return self.cache.ensure(self.url, commits, display=self.display, paths=paths)

    def ensure_blobs(self, commits: Sequence[str], blobs: Collection[str], *, local: git.Repo | None = None, move: tuple[str, str] | None = None) -> Mirror:
        return self.cache.ensure_blobs(self.url, commits, blobs, display=self.display, local=local, move=move)

    def ensure_history(self) -> Mirror:
        return self.cache.ensure_history(self.url, display=self.display)

    def fetch_ref(self, ref: str) -> tuple[Mirror, str]:
        return self.cache.fetch_ref(self.url, ref, display=self.display)

    def try_commit(self, commit: str) -> Mirror | None:
        return self.cache.try_commit(self.url, commit)

    def commit_history(self, commits: Sequence[str]) -> git.Repo:
        return self.cache.commit_history(self.url, commits, display=self.display)

    def recover(self, err: git.DamagedRepoError) -> bool:
        return self.cache.recover(self.mirror, err, self.display)


class Cache:
    """Mirrors of upstream repositories, shared by every model and run."""

    def __init__(self, root: Path | None = None, progress: Callable[[str], None] | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        # Told git's counts (objects, bytes) while a fetch runs, as "<what>: Receiving objects: 45% (450/1000), 1.20 MiB".
        self.progress = progress
        # (mirror, commit) pairs this process has checked whole (or, in _trees, every
        # tree): six components on one pin walk its tree once. Forgotten when a mirror is replaced.
        self._verified: set[tuple[Path, str]] = set()
        self._trees: set[tuple[Path, str]] = set()
        self._listings: dict[tuple[Path, str], list[git.TreeEntry]] = {}  # (mirror, commit): its tree's entries (a commit's tree never changes)
        self._recovered: set[Path] = set()  # mirrors this process replaced after damage: once each
        # What the user should know about how pins were fetched, each said once.
        self.notes: list[str] = []

    @property
    def mirrors_dir(self) -> Path:
        return self.root / "mirrors"

    def for_component(self, component: Pinned, root: Path) -> Upstream:
        """*component*'s upstream (a path in it relative to the repository at *root*), named ``<model>/<component> (<upstream>)`` in messages."""
        return self.for_upstream(component.upstream, root, component.label)

    def for_upstream(self, upstream: str, root: Path, name: str = "") -> Upstream:
        """The upstream written as *upstream* (a URL, or a path relative to *root*), named ``<name> (<upstream>)`` in messages (bare without *name*)."""
        return Upstream(self, resolve_upstream(upstream, root), f"{name} ({upstream})" if name else upstream)

    def mirror_for(self, url: str) -> Mirror:
        digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
        tail = url.rstrip("/").rsplit("/", 1)[-1]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", tail.removesuffix(".git"))[:40].strip(".-") or "upstream"
        return Mirror(url, self.mirrors_dir / f"{slug}-{digest}.git")

    @contextlib.contextmanager
    def writing(self, where: Path | None = None) -> Iterator[None]:
        """The block writes *where* (default: the cache root) in the cache: an OSError (a full disk, a folder not writable) is a `CacheError` naming it."""
        try:
            yield
        except OSError as err:
            if err.filename is None:  # os.write and friends do not say which file
                err.filename = str(where or self.root)
            raise self.refused(err) from None

    def refused(self, err: OSError) -> CacheError:
        """What *err*, met writing into the cache, means to a user: exit 2, the path, and where else the cache can be."""
        from zmr.infra.files import os_error

        plain = os_error(err)
        if err.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            return CacheError(plain.message, details=plain.details)
        return CacheError(
            f"{plain.message}: zmr cannot write its cache there",
            details=[
                "zmr fetches upstream commits into the cache and writes there the objects of the release commits it computes,"
                f" so the cache must be writable: set ZMR_CACHE to a folder you can write (it fills on first use), or make {self.root} writable"
            ],
        )

    @contextlib.contextmanager
    def lock(self, mirror: Mirror) -> Iterator[None]:
        """Exclusive lock of one mirror (`zmr.infra.lock`: the kernel drops it when the holder dies;
        a wait of ``lock.MIRROR_TIMEOUT`` at most, the holder named)."""
        lock_path = mirror.path.with_suffix(".lock")
        with contextlib.ExitStack() as held:
            with self.writing(lock_path):
                self.mirrors_dir.mkdir(parents=True, exist_ok=True)
                held.enter_context(lock.hold_file(lock_path, f"the mirror of {mirror.url} in the cache", wait=lock.timeout(lock.MIRROR_TIMEOUT)))
            yield

    def ensure(self, url: str, commits: Sequence[str], *, display: str = "", paths: Collection[str] | None = None) -> Mirror:
        """A mirror of *url* that holds every object of each commit in *commits*.

        With *paths* (the files a series touches), less is enough: every tree
        of each commit and the blobs at *paths*, fetched blobless where the
        server allows (see the module docstring).
        """
        mirror = self.mirror_for(url)
        display = display or url
        try:
            if mirror.path.is_dir() and self._has_all(mirror, commits, paths):
                return mirror
        except git.DamagedRepoError:
            pass  # looked at again under the lock
        with self.lock(mirror):
            try:
                self._ensure_locked(mirror, commits, display, paths, fresh=False)
            except git.DamagedRepoError as err:
                if not err.concerns(mirror.path):
                    raise
                self._damaged_note(mirror, display, err)
                self._replace(mirror)
                try:
                    self._ensure_locked(mirror, commits, display, paths, fresh=True)
                except git.DamagedRepoError as again:
                    raise CacheError(
                        f"{display}: damaged objects in a mirror fetched anew: {again.evidence}",
                        details=["the upstream itself may be damaged; run `git fsck` on it"],
                    ) from None
        return mirror

    def recover(self, mirror: Mirror, err: git.DamagedRepoError, display: str = "") -> bool:
        """After *err* (a command outside the cache found damage): quarantine *mirror* once, so that ``ensure`` fetches it anew.

        True when the caller should compute again; False when the damage is not
        in *mirror*, or this process already replaced it once (never a loop).
        """
        if not err.concerns(mirror.path) or mirror.path in self._recovered:
            return False
        self._recovered.add(mirror.path)
        with self.lock(mirror):
            self._damaged_note(mirror, display or mirror.url, err)
            self._forget(mirror)
            if mirror.path.exists():
                self._quarantine(mirror)
        return True

    def _damaged_note(self, mirror: Mirror, display: str, err: git.DamagedRepoError) -> None:
        self._recovered.add(mirror.path)
        self._note(f"{display}: the cache mirror was damaged ({err.evidence}); moved it to {self.root / 'quarantine'} and fetched again")

    def _ensure_locked(self, mirror: Mirror, commits: Sequence[str], display: str, paths: Collection[str] | None, *, fresh: bool) -> None:
        if not mirror.path.is_dir() or self._damaged(mirror):
            self._replace(mirror)
            fresh = True
        missing = [c for c in commits if not self._satisfied(mirror, c, paths)]
        if missing and not fresh and any(self._broken(mirror, c) for c in missing):
            # A pin whose commit is here but whose tree is not: the mirror is damaged.
            self._replace(mirror)
            fresh = True
        if missing:
            try:
                self._fetch_commits(mirror, missing, display, paths)
            except FetchInterrupted:
                raise  # not the mirror's fault: no quarantine, no second fetch
            except CacheError:
                if fresh or all(self._has_trees(mirror, c) for c in missing):
                    # New, or only blobs were wanted for trees found whole: the fetch failed, not the mirror.
                    raise
                # Fetching into an old mirror can trip over its damage: start clean once.
                self._replace(mirror)
                fresh = True
                self._fetch_commits(mirror, missing, display, paths)
        still = [c for c in missing if not self._satisfied(mirror, c, paths)]
        if still and not fresh:
            self._replace(mirror)
            self._fetch_commits(mirror, still, display, paths)
            still = [c for c in still if not self._satisfied(mirror, c, paths)]
        if still:
            raise CacheError(
                f"{display}: commit {still[0]} is incomplete after fetching",
                details=["the upstream itself may be damaged; run `git fsck` on it"],
            )

    def fetch_ref(self, url: str, ref: str, *, display: str = "") -> tuple[Mirror, str]:
        """Fetch a branch, tag or commit id *ref* of *url* with history; returns its commit id."""
        mirror = self.mirror_for(url)
        with self.lock(mirror):
            if not mirror.path.is_dir():
                self._create(mirror)
            repo = mirror.repo
            if git.FULL_OID_RE.match(ref) and repo.has_object(ref, "commit"):
                if not self._complete(mirror, ref):
                    self._fetch_whole(mirror, [ref], display or url)
                self._unshallow(mirror)
                return mirror, ref
            safe = re.sub(r"[^A-Za-z0-9._/-]", "_", ref)
            target = f"{TRACK}{safe}"
            try:
                self._fetch(
                    mirror, url, [f"+{ref}:{target}"], extra=[*self._unshallow_args(mirror), *self._haves(mirror)], progress=self._reporter(display or url)
                )
                repo.write_commit_graph()
            except git.StorageError:
                raise  # the disk, not the fetch: the message names the folder
            except git.GitError as err:
                raise CacheError(
                    f"{display or url}: cannot fetch {ref!r}", details=[*err.details, "check that the branch, tag or commit exists upstream"]
                ) from None
            oid = repo.resolve(target)
        if oid is None:
            raise CacheError(f"{display or url}: {ref!r} is not a commit")
        return mirror, oid

    def try_commit(self, url: str, commit: str) -> Mirror | None:
        """A mirror of *url* holding *commit* whole, or None when the upstream has no such commit.

        For trying candidates (``zmr import``): unlike ``ensure``, a failed
        fetch is an answer, not damage, and never replaces the mirror.
        """
        mirror = self.mirror_for(url)
        with self.lock(mirror):
            if not mirror.path.is_dir():
                self._create(mirror)
            if not self._complete(mirror, commit):
                for depth in (1, None):
                    try:
                        # Through _fetch, as every fetch into a mirror: stale leftovers of killed fetches go first,
                        # its own temp packs after a failure, and a partial mirror offers only complete refs.
                        self._fetch(mirror, url, [f"+{commit}:{PINS}{commit}"], depth=depth, extra=self._haves(mirror))
                        break
                    except git.StorageError:
                        raise  # a full disk is no answer about the commit
                    except git.GitError:
                        continue
            return mirror if self._complete(mirror, commit) else None

    def _unshallow_args(self, mirror: Mirror) -> list[str]:
        return ["--unshallow"] if (mirror.path / "shallow").exists() else []

    def _unshallow(self, mirror: Mirror) -> None:
        if (mirror.path / "shallow").exists():
            self._fetch(mirror, mirror.url, [f"+refs/heads/*:{HEADS}*"], extra=["--unshallow", *self._haves(mirror)], progress=self._reporter(mirror.url))
            mirror.repo.write_commit_graph()

    def ensure_history(self, url: str, *, display: str = "") -> Mirror:
        """A mirror with full history of every branch and tag (for rebase and upstreamed)."""
        mirror = self.mirror_for(url)
        with self.lock(mirror):
            if not mirror.path.is_dir():
                self._create(mirror)
            try:
                self._fetch(mirror, url, _ALL_REFS, extra=[*self._unshallow_args(mirror), *self._haves(mirror)], progress=self._reporter(display or url))
                mirror.repo.write_commit_graph()
            except git.StorageError:
                raise  # the disk, not the fetch: the message names the folder
            except git.GitError as err:
                raise CacheError(f"{display or url}: fetch failed", details=err.details) from None
        return mirror

    def commit_history(self, url: str, commits: Sequence[str], *, display: str = "") -> git.Repo:
        """A repository holding *commits* and every commit before them, without trees or blobs (``--filter=tree:0``).

        Kept apart from the mirror, whose fetches rely on its depth-1 pins
        (a mirror with history but not the trees of it would offer haves it
        cannot back). A server that ignores the filter sends whole history,
        noted once.
        """
        mirror = self.mirror_for(url)
        path = self.root / "history" / mirror.path.name
        history = Mirror(url, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock(history):
            if not path.is_dir():
                self._create(history)
            repo = history.repo
            missing = [c for c in commits if not repo.has_object(c, "commit")]
            if missing:
                config = [f"remote.{_PROMISOR}.url={url}", f"remote.{_PROMISOR}.promisor=true", f"remote.{_PROMISOR}.partialclonefilter=tree:0"]
                try:
                    proc = self._fetch(
                        history,
                        _PROMISOR,
                        [f"+{c}:{HISTORY}{c}" for c in missing],
                        extra=["--filter=tree:0"],
                        config=config,
                        progress=self._reporter(display or url),
                    )
                except git.StorageError:
                    raise  # the disk, not the fetch: the message names the folder
                except git.GitError as err:
                    raise CacheError(f"{display or url}: cannot fetch the history of {_commits(missing)}", details=[err.message, *err.details]) from None
                if _FILTER_IGNORED in proc.stderr.decode("utf-8", "replace"):
                    self._note(f"{display or url}: the server does not allow filtered fetches (uploadpack.allowFilter); fetched whole history for the pin move")
        return history.repo

    # -- internals -------------------------------------------------------------
    def _reporter(self, what: str) -> Callable[[str], None] | None:
        progress = self.progress
        if progress is None:
            return None
        return lambda line: progress(f"{what}: {line}")

    def _has_all(self, mirror: Mirror, commits: Sequence[str], paths: Collection[str] | None = None) -> bool:
        return all(self._satisfied(mirror, c, paths) for c in commits)

    def _satisfied(self, mirror: Mirror, commit: str, paths: Collection[str] | None) -> bool:
        """*commit* is whole in *mirror*, or (with *paths*) its trees and the blobs at *paths* are."""
        if self._complete(mirror, commit):
            return True
        return paths is not None and self._has_trees(mirror, commit) and not self._missing_blobs(mirror, commit, paths)

    def _complete(self, mirror: Mirror, commit: str) -> bool:
        if (mirror.path, commit) in self._verified:
            return True
        repo = mirror.repo
        if repo.has_object(commit, "commit") and repo.objects_complete(commit):
            self._verified.add((mirror.path, commit))
            return True
        return False

    def _has_trees(self, mirror: Mirror, commit: str) -> bool:
        if (mirror.path, commit) in self._trees:
            return True
        repo = mirror.repo
        if repo.has_object(commit, "commit") and repo.objects_complete(commit, blobs=False):
            self._trees.add((mirror.path, commit))
            return True
        return False

    def _broken(self, mirror: Mirror, commit: str) -> bool:
        """The commit is here but not what it should be: damage, not just a pin not fetched yet.

        In a partial mirror a missing blob is expected; a missing tree never is.
        """
        if not mirror.repo.has_object(commit, "commit"):
            return False
        return not (self._has_trees(mirror, commit) if self._is_partial(mirror) else self._complete(mirror, commit))

    def _missing_blobs(self, mirror: Mirror, commit: str, paths: Collection[str]) -> list[str]:
        """Blob ids at *paths* in *commit*'s tree that *mirror* lacks (paths not in the tree need none)."""
        wanted = [entry.oid for entry in self._listing(mirror, commit) if entry.type == "blob" and entry.path in paths]
        return mirror.repo.missing_objects(wanted)

    def _listing(self, mirror: Mirror, commit: str) -> list[git.TreeEntry]:
        """The entries of *commit*'s tree in *mirror*, listed once a run (twelve builds on two pins ask 24 times)."""
        key = (mirror.path, commit)
        if key not in self._listings:
            self._listings[key] = mirror.repo.ls_tree(commit)
        return self._listings[key]

    def _is_partial(self, mirror: Mirror) -> bool:
        return mirror.repo.config_get(PARTIAL_KEY, bool_type=True) == "true"

    def _note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def _damaged(self, mirror: Mirror) -> bool:
        return not (mirror.path / "HEAD").is_file() or not (mirror.path / "objects").is_dir()

    def _create(self, mirror: Mirror) -> None:
        # Made beside where it goes: a mirror and its history repository have one name (and a lock each).
        folder = mirror.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        # Called under this mirror's lock: leftovers of an interrupted creation are ours to remove.
        for stale in folder.glob(f".tmp-{mirror.path.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{mirror.path.name}-", dir=folder))
        try:
            repo = git.init_bare(tmp)
            for key, value in (
                ("gc.auto", "0"),  # no automatic gc racing parallel runs
                ("core.logAllRefUpdates", "false"),
                ("zmr.url", mirror.url),
                ("uploadpack.allowAnySHA1InWant", "true"),
                ("fetch.unpackLimit", "1"),  # keep fetched objects packed: builds reuse packed data
            ):
                repo.config_set(key, value)
            os.rename(tmp, mirror.path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _replace(self, mirror: Mirror) -> None:
        """Move a damaged mirror aside (kept for inspection) and start an empty one."""
        self._forget(mirror)
        if mirror.path.exists():
            self._quarantine(mirror)
        self._create(mirror)

    def _forget(self, mirror: Mirror) -> None:
        self._verified = {entry for entry in self._verified if entry[0] != mirror.path}
        self._trees = {entry for entry in self._trees if entry[0] != mirror.path}
        self._listings = {key: entries for key, entries in self._listings.items() if key[0] != mirror.path}

    def _quarantine(self, mirror: Mirror) -> None:
        target = self.root / "quarantine" / f"{mirror.path.name}-{int(time.time())}-{os.getpid()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(mirror.path, target)

    def _fetch_commits(self, mirror: Mirror, commits: Sequence[str], display: str, paths: Collection[str] | None = None) -> None:
        """Fetch *commits*: whole, or (with *paths*) blobless plus the blobs at *paths*."""
        if paths is None:
            here = [c for c in commits if mirror.repo.has_object(c, "commit")]
            if here:
                self._fetch_whole(mirror, here, display)
            commits = [c for c in commits if c not in here]
            if commits:
                self._fetch_full(mirror, commits, display)
        else:
            absent = [c for c in commits if not mirror.repo.has_object(c, "commit")]
            if absent and not self._fetch_blobless(mirror, absent, display):
                self._fetch_full(mirror, absent, display)
            self._fetch_blobs(mirror, commits, paths, display)
        self._settle(mirror, commits)

    def _fetch(self, mirror: Mirror, source: str, refspecs: Sequence[str], *, answered: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """``git fetch`` into *mirror*, under its lock: stale leftovers of killed fetches removed first, its own temp packs after a failure.

        git leaves ``objects/pack/tmp_pack_*`` behind when a fetch dies (a full
        disk, a dropped connection, a kill); zmr removes those this fetch made.
        *answered*: the caller answers a failure with a fetch of another kind,
        so one that ended early raises the GitError itself, not
        FetchInterrupted (but for git killed by a signal).
        """
        git.check_remote(mirror.url, what="upstream")  # a protocol the caller's GIT_ALLOW_PROTOCOL forbids: refused before git starts
        self._clear_stale(mirror)
        packs = mirror.path / "objects" / "pack"
        before = set(packs.glob("tmp_*"))
        attempts, delay = fetch_attempts()
        for attempt in range(1, attempts + 1):
            try:
                return mirror.repo.fetch(source, refspecs, **kwargs)
            except git.GitError as err:
                for leftover in set(packs.glob("tmp_*")) - before:
                    leftover.unlink(missing_ok=True)
                transient = _transient(err)
                if transient and attempt == attempts:
                    # Not the server's answer to this fetch: no fallback to another kind of fetch (each would be tried as many times).
                    raise FetchInterrupted(
                        f"{mirror.url}: cannot fetch: {transient}",
                        details=[
                            *err.git_lines[-3:],
                            f"tried {attempts} time{'s' if attempts != 1 else ''} (a transient network error), "
                            f"waiting {delay:g}s, then twice as long, between tries",
                            f"run the command again later (or set {FETCH_ATTEMPTS_ENV} / {FETCH_BACKOFF_ENV})",
                        ],
                    ) from None
                if not transient:
                    if not answered or err.returncode < 0:
                        self._fetch_failed(mirror, err)
                    raise
                wait = min(delay * 2 ** (attempt - 1), 60.0)
                self._note(f"{mirror.url}: fetch attempt {attempt} of {attempts} failed ({transient}); retried after {wait:g}s")
                reporter = self._reporter(mirror.url)
                if reporter:
                    reporter(f"transient fetch error ({transient}); retrying in {wait:g}s (attempt {attempt + 1} of {attempts})")
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch_failed(self, mirror: Mirror, err: git.GitError) -> None:
        """Raise what a failed fetch means: cut short (FetchInterrupted), else nothing here (the caller re-raises *err*)."""
        why = _cut_short(err) if not isinstance(err, git.DamagedRepoError) else ""
        if why:
            raise FetchInterrupted(
                f"{mirror.url}: the fetch was cut short: {why}",
                details=[*err.git_lines[-4:], "nothing was kept of it; run the command again (zmr does not fall back to fetching full history for this)"],
            ) from None

    def _clear_stale(self, mirror: Mirror) -> None:
        """Remove what killed git processes left in *mirror*; called under its lock.

        Fetches and config changes happen only under the lock, so their lock
        files are stale (a ``shallow.lock`` would make every depth-1 fetch
        fail). zmr also writes objects and a few refs into a mirror outside
        the lock (replaying a series), so temporary objects and other ref
        locks are removed only when nobody touched them for ``_STALE_AFTER`` seconds.
        """
        root = mirror.path
        always = [root / "shallow.lock", root / "config.lock", root / "HEAD.lock"]
        always += [*root.glob("objects/info/commit-graph*.lock"), *root.glob("objects/info/commit-graphs/*.lock")]
        for space in _FETCHED_REFS:
            always += (root / space).rglob("*.lock")
        aged = [root / "packed-refs.lock", *(root / "refs").rglob("*.lock"), *root.glob("objects/??/tmp_obj_*")]
        with _no_writer(mirror) as idle:
            # Under the mirror's lock no fetch runs; with no fast-import either, every temporary pack is a killed process's.
            packs = [*root.glob("objects/pack/tmp_*"), *(k for k in root.glob("objects/pack/pack-*.keep") if _fetch_keep(k))]
            (always if idle else aged).extend(packs)
            now = time.time()
            for path in always + [p for p in aged if _older(p, now - _STALE_AFTER)]:
                path.unlink(missing_ok=True)
        for incoming in root.glob("objects/incoming-*"):  # a quarantine of receive-pack: nothing pushes into a mirror
            shutil.rmtree(incoming, ignore_errors=True)

    def _promisor_config(self, mirror: Mirror) -> list[str]:
        # Makes this one fetch a partial-clone fetch without git writing the remote into the mirror's config.
        return [f"remote.{_PROMISOR}.url={mirror.url}", f"remote.{_PROMISOR}.promisor=true", f"remote.{_PROMISOR}.partialclonefilter=blob:none"]

    def _fetch_blobless(self, mirror: Mirror, commits: Sequence[str], display: str) -> bool:
        """Fetch *commits* at depth 1 without blobs; False when the server cannot (then nothing is fetched)."""
        repo = mirror.repo
        if not self._is_partial(mirror):
            repo.config_set(PARTIAL_KEY, "true")  # before any blobless pack arrives
        try:
            refspecs = [f"+{c}:{PARTIAL_PINS}{c}" for c in commits]
            proc = self._fetch(
                mirror, _PROMISOR, refspecs, depth=1, extra=["--filter=blob:none"], config=self._promisor_config(mirror), progress=self._reporter(display)
            )
        except (git.DamagedRepoError, git.StorageError):
            raise  # damage, or a full disk: no other kind of fetch answers it
        except git.GitError:
            return False  # e.g. a server that refuses unadvertised commits: the full path knows what to do
        if _FILTER_IGNORED in proc.stderr.decode("utf-8", "replace"):
            # The server sent whole trees: today's depth-1 fetch, so nothing else to do.
            self._note(f"{display}: the server does not allow filtered fetches (uploadpack.allowFilter); fetched whole trees at depth 1")
        return True

    def _fetch_blobs(self, mirror: Mirror, commits: Sequence[str], paths: Collection[str], display: str) -> None:
        """The missing blobs at *paths* of *commits*, in one fetch; the whole trees where the server refuses single objects."""
        needed = sorted({oid for c in commits for oid in self._missing_blobs(mirror, c, paths)})
        if not needed:
            return
        self._fetch_ids(mirror, needed, display)
        short = [c for c in commits if self._missing_blobs(mirror, c, paths)]
        if short:
            self._note(f"{display}: the server does not send single blobs by id; fetched whole trees at depth 1")
            self._fetch_whole(mirror, short, display)

    def _fetch_ids(self, mirror: Mirror, oids: Sequence[str], display: str) -> None:
        """Objects by id, in one fetch without haves (what git's own lazy fetch does); a server that refuses is no error here."""
        try:
            self._fetch(
                mirror,
                _PROMISOR,
                oids,
                extra=["--filter=blob:none"],
                config=[*self._promisor_config(mirror), "fetch.negotiationAlgorithm=noop"],
                progress=self._reporter(display),
            )
        except (git.DamagedRepoError, git.StorageError):
            raise  # damage, or a full disk: no other kind of fetch answers it
        except git.GitError:
            pass

    def ensure_blobs(
        self, url: str, commits: Sequence[str], blobs: Collection[str], *, display: str = "", local: git.Repo | None = None, move: tuple[str, str] | None = None
    ) -> Mirror:
        """A mirror of *url* that holds *blobs*, blobs of *commits* (whose trees it has): those missing in one fetch by id.

        For ``zmr diff``: the blobs of the files that differ between two trees,
        named by the trees themselves, so nothing walks either tree and no file
        is looked up by path. Where the server does not send single objects,
        *commits* are fetched whole. Those *local* has (the project's
        repository: its release branches hold whole trees) are copied from it
        instead (``_local_blobs``, ``_copy_and_fetch``). *move*: (old pin, new
        pin) when *blobs* are those of the files that differ between the two
        pins' trees: those the old pin's tree lacks come first, in one fetch
        of the new pin that names the old pin (``_fetch_move``), before
        anything else is looked up.
        """
        mirror = self.mirror_for(url)
        display = display or url
        wanted = sorted(set(blobs))
        if not mirror.path.is_dir():
            self.ensure(url, commits, display=display, paths=())
        if not wanted or not mirror.repo.missing_objects(wanted):
            return mirror
        with self.lock(mirror):
            needed = mirror.repo.missing_objects(wanted)
            if move is not None and local is not None and needed and self._fetch_move(mirror, move, needed, local, display):
                needed = mirror.repo.missing_objects(needed)
            copied = set(self._local_blobs(local, needed) if local is not None and needed else [])
            self._copy_and_fetch(mirror, local, sorted(copied), [oid for oid in needed if oid not in copied], display)
            needed = mirror.repo.missing_objects(needed)
            uncopied = [oid for oid in needed if oid in copied]  # a copy that failed: fetched by id now
            if uncopied:
                self._fetch_ids(mirror, uncopied, display)
                needed = mirror.repo.missing_objects(needed)
            if needed:
                self._note(f"{display}: the server does not send single blobs by id; fetched whole trees at depth 1")
                self._fetch_whole(mirror, commits, display)
                needed = mirror.repo.missing_objects(needed)
            if needed:
                raise CacheError(
                    f"{display}: blob {needed[0]} of {', '.join(c[:12] for c in commits)} is missing after fetching",
                    details=["the upstream itself may be damaged; run `git fsck` on it"],
                )
        return mirror

    def _local_blobs(self, local: git.Repo, oids: Sequence[str]) -> list[str]:
        """Of the blobs *oids*, those *local* (the project's repository) has.

        A pin move's diff needs the old release tree's blobs of every file that
        differs, and the base side's release branch in the project holds
        them: only the new side's then cross the network. None from a partial
        clone (asking it could start a fetch there), nor from a repository git
        cannot read (the project's own commands say what is wrong with it).
        """
        try:
            if local.may_fetch_lazily():
                return []
            return [oid for oid, info in zip(oids, local.object_infos(oids)) if info is not None and info.type == "blob"]
        except git.GitError:
            return []

    def _copy_and_fetch(self, mirror: Mirror, local: git.Repo | None, copied: Sequence[str], fetched: Sequence[str], display: str) -> None:
        """*copied* from *local* into *mirror* (under its lock) while *fetched* are fetched by id: each writes a pack of its own, at once.

        A copy that fails is noted, not raised (``ensure_blobs`` fetches what it left out), but for a full disk, where a fetch would fail the same way.
        """
        if not copied or local is None:
            if fetched:
                self._fetch_ids(mirror, fetched, display)
            return
        with ThreadPoolExecutor(max_workers=1) as pool:
            copying = pool.submit(local.copy_objects, copied, mirror.repo)
            if fetched:
                self._fetch_ids(mirror, fetched, display)
            try:
                copying.result()
            except git.StorageError:
                raise
            except git.GitError as err:
                self._note(f"{display}: blobs not copied from {local.git_dir} ({err.git_lines[-1] if err.git_lines else err}); fetched instead")

    def _fetch_move(self, mirror: Mirror, move: tuple[str, str], needed: Sequence[str], local: git.Repo, display: str) -> bool:
        """The blobs of the new pin of *move* that its old pin's tree lacks: one depth-1 fetch of the new pin offering the old one as have
        (True when it was made and brought them).

        The same blobs a fetch by id asks for, but the server finds them by
        walking both trees, so it knows each one's path: its delta search
        compares versions of one file, where blobs asked for by id are all
        nameless and compared by size alone (on Megatron-LM's 400-commit pin
        move, 1,354 blobs: 0.7 s of the upstream's CPU instead of 1.5 s). Its
        thin pack's deltas are against the old tree's blobs, read from *local*
        (the base side's release branch has them) and the mirror.

        Only where one of *needed* (blobs the mirror lacks) is not the old
        pin's (those are copied from *local*), and where that fetch cannot
        change what the mirror holds: both pins here, the new one a shallow
        commit (a depth-1 fetch of it leaves the history as it is); and only
        where *local* has the old pin's tree (the base side's release branch
        built: its first commit's tree is the pin's), else no base of the thin
        pack's deltas could be found.
        ``--filter=blob:limit`` keeps it a filtered fetch (a promisor pack:
        blobs the have stands for may stay missing) that leaves out no blob of
        the size git stores. A fetch that fails (a server that refuses shallow
        fetches, a base that is not what its id says) is no error: what is
        still missing is fetched by id.
        """
        old, new = move
        if old == new or not {old, new} <= self._shallow(mirror):
            return False
        if not set(needed) - {entry.oid for entry in self._listing(mirror, old)} or not self._has_tree_of(local, mirror, old):
            return False
        objects = local.git_path("objects")
        alternates = [str(objects)] if objects is not None and not re.search(r'[:"\n]', str(objects)) else []
        try:
            self._fetch(
                mirror,
                _PROMISOR,
                [new],
                depth=1,
                extra=[f"--filter=blob:limit={_BLOB_LIMIT}", f"--negotiation-tip={old}"],
                config=self._promisor_config(mirror),
                alternates=alternates,
                progress=self._reporter(display),
                answered=True,
            )
        except git.StorageError:
            raise  # a full disk: the fetch by id would fail the same way
        except git.GitError as err:  # refused, cut off, or a base that is not what its id says (git's "corrupt": the project's, maybe)
            said = [line for line in err.stderr_text.splitlines() if line.startswith(("fatal:", "error:"))]  # the first says why
            self._note(f"{display}: the fetch of {new[:12]} against {old[:12]} failed ({said[0] if said else _last_line(err)}); its blobs were fetched by id")
            return False
        return True

    def _has_tree_of(self, local: git.Repo, mirror: Mirror, commit: str) -> bool:
        """Whether *local*, not a partial clone (``_local_blobs`` says why), has the tree of *commit* (a commit of *mirror*)."""
        try:
            return not local.may_fetch_lazily() and local.has_object(mirror.repo.tree_of(commit), "tree")
        except git.GitError:
            return False

    def _shallow(self, mirror: Mirror) -> set[str]:
        """The commits whose parents the mirror does not have (its ``shallow`` file, written by depth-1 fetches under its lock)."""
        try:
            return set((mirror.path / "shallow").read_text("ascii").split())
        except (OSError, UnicodeDecodeError):
            return set()

    def _fetch_whole(self, mirror: Mirror, commits: Sequence[str], display: str) -> None:
        """Fetch again, whole, commits the mirror has without all their blobs.

        With ``--refetch`` (git 2.36): a plain fetch sees the commit here and fetches nothing.
        """
        self._fetch_full(mirror, commits, display, refetch=True)
        self._settle(mirror, commits)

    def _haves(self, mirror: Mirror) -> list[str]:
        """Options for a full fetch: in a partial mirror, only complete refs may be offered as haves."""
        if not self._is_partial(mirror):
            return []
        present = {name.split("/", 3)[2] for name in mirror.repo.refs("refs/zmr/")}
        tips = [f"--negotiation-tip={prefix}*" for prefix in COMPLETE_REFS if prefix.split("/")[2] in present]
        # No complete ref: offer nothing (a --negotiation-tip that matches no ref would be ignored).
        return tips or ["--refetch"]

    def _settle(self, mirror: Mirror, commits: Sequence[str]) -> None:
        """Keep each fetched pin by the ref that says what of it is here: pins/ whole, partial/ every tree."""
        repo = mirror.repo
        updates = []
        for commit in commits:
            if self._complete(mirror, commit):
                want = {PINS + commit: commit, PARTIAL_PINS + commit: None}
            elif self._has_trees(mirror, commit):
                want = {PINS + commit: None, PARTIAL_PINS + commit: commit}
            else:
                continue  # not fetched: the caller finds it missing
            for ref, new in want.items():
                old = repo.ref_value(ref)
                if old != new:
                    updates.append(git.RefUpdate(ref, new, old))
        repo.update_refs(updates, "zmr cache")

    def _object_format_error(self, mirror: Mirror, commits: Sequence[str], display: str) -> CacheError | None:
        """The error for pins of the other hash function than the upstream's (read from ``ls-remote``: its ids' length); None."""
        try:
            lengths = {len(oid) for oid in mirror.repo.ls_remote(mirror.url).values() if git.FULL_OID_RE.match(oid)}
        except git.GitError:
            return None  # the fetch's own error says why
        wrong = next((c for c in commits if lengths and len(c) not in lengths), None)
        if wrong is None and not any(len(c) != _MIRROR_OID_HEX for c in commits):
            return None
        upstream = _HASH_NAMES.get(min(lengths)) if lengths else None
        if wrong is not None and upstream is not None:
            return CacheError(
                f"{display}: commit {wrong} is a {_HASH_NAMES[len(wrong)]} id on a {upstream} repository",
                details=[
                    f"a {upstream} repository names commits with {min(lengths)} hex digits; pin the id `git ls-remote {mirror.url}` prints"
                    if upstream == "SHA-1"
                    else "zmr's cache and release branches are SHA-1 repositories: SHA-256 upstreams are not supported"
                ],
            )
        odd = next(c for c in commits if len(c) != _MIRROR_OID_HEX)
        return CacheError(
            f"{display}: commit {odd} is a SHA-256 id; zmr's cache and release branches are SHA-1 repositories",
            details=["SHA-256 upstreams are not supported; pin a SHA-1 upstream's 40-hex commit id"],
        )

    def _fetch_full(self, mirror: Mirror, commits: Sequence[str], display: str, *, refetch: bool = False) -> None:
        repo = mirror.repo
        if not refetch and any(len(c) != _MIRROR_OID_HEX for c in commits):
            # Asked of a SHA-1 server, a 64-hex id is a ref name it lacks: the fallbacks would fetch all history, then blame a force-push.
            error = self._object_format_error(mirror, commits, display)
            if error is not None:
                raise error
        refspecs = [f"+{c}:{PINS}{c}" for c in commits]
        haves = ["--refetch"] if refetch else self._haves(mirror)
        attempts: list[tuple[int | None, list[str]]] = [(1, refspecs), (None, refspecs)]
        errors: list[str] = []
        for depth, specs in attempts:
            try:
                self._fetch(mirror, mirror.url, specs, depth=depth, extra=haves, progress=self._reporter(display))
            except (git.DamagedRepoError, git.StorageError):
                raise  # damage, or a full disk: no other kind of fetch answers it
            except git.GitError as err:
                errors.append(_last_line(err))
                continue
            if errors:
                # Never a silent full fetch where depth 1 was meant: it can be many times the size.
                self._note(f"{display}: a depth-1 fetch failed ({errors[0]}); fetched {_commits(commits)} with full history")
            return
        # The server refuses unadvertised commits: fetch everything it advertises.
        try:
            self._fetch(mirror, mirror.url, _ALL_REFS, extra=[*self._unshallow_args(mirror), *self._haves(mirror)], progress=self._reporter(display))
        except git.GitError as err:
            raise self._object_format_error(mirror, commits, display) or CacheError(
                f"{display}: cannot fetch from {mirror.url}",
                details=[err.message, *err.details],
            ) from None
        self._note(f"{display}: the server would not send {_commits(commits)} by id ({errors[-1]}); fetched every branch and tag with full history")
        for commit in commits:
            if not repo.has_object(commit, "commit"):
                raise self._object_format_error(mirror, commits, display) or CacheError(
                    f"{display}: upstream has no commit {commit}",
                    details=["it may have been force-pushed away; pin a commit that exists (git ls-remote <upstream>)"],
                )
            repo.update_ref(f"{PINS}{commit}", commit)
