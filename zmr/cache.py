"""The cache: one bare mirror per upstream URL (docs/reference.md §5).

Layout under ``$ZMR_CACHE`` (default ``$XDG_CACHE_HOME/zmr``, else
``~/.cache/zmr``)::

    mirrors/<slug>-<hash>.git     bare mirror of one upstream URL
    mirrors/<slug>-<hash>.lock    its lock (flock: released when the holder dies)
    quarantine/                   mirrors found damaged, kept for inspection

A mirror is created by check → lock → check → ``git init`` in a temporary
folder → rename into place, so a crash never leaves half a mirror. Only
the pinned commits are fetched (depth 1 where the server allows, a full
fetch otherwise); each pin is kept reachable by ``refs/zmr/pins/<oid>``.
Before a mirror is used, every object of each pinned tree must be present;
a mirror that fails that check is moved to ``quarantine/`` and fetched anew.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from zmr import git
from zmr.errors import ZmrError

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_LIKE_RE = re.compile(r"^[^/:]+:(?!//)")


class CacheError(ZmrError):
    """The cache cannot provide what a pin needs."""


def default_cache_dir() -> Path:
    explicit = os.environ.get("ZMR_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "zmr"


def resolve_upstream(upstream: str, root: Path) -> str:
    """The URL git fetches from: network URLs as written, paths made absolute from *root*."""
    if _SCHEME_RE.match(upstream) or (_SCP_LIKE_RE.match(upstream) and not upstream.startswith(("./", "../", "/"))):
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
        return git.Repo(self.path)


class Cache:
    """Mirrors of upstream repositories, shared by every model and run."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        # (mirror, commit) pairs this process has checked whole: six components on
        # one pin walk its tree once. Forgotten when a mirror is replaced.
        self._verified: set[tuple[Path, str]] = set()

    @property
    def mirrors_dir(self) -> Path:
        return self.root / "mirrors"

    def mirror_for(self, url: str) -> Mirror:
        digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
        tail = url.rstrip("/").rsplit("/", 1)[-1]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", tail.removesuffix(".git"))[:40].strip(".-") or "upstream"
        return Mirror(url, self.mirrors_dir / f"{slug}-{digest}.git")

    @contextlib.contextmanager
    def lock(self, mirror: Mirror) -> Iterator[None]:
        """Exclusive lock of one mirror; the kernel drops it when the holder dies."""
        self.mirrors_dir.mkdir(parents=True, exist_ok=True)
        lock_path = mirror.path.with_suffix(".lock")
        with open(lock_path, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def ensure(self, url: str, commits: Sequence[str], *, display: str = "") -> Mirror:
        """A mirror of *url* that holds every object of each commit in *commits*."""
        mirror = self.mirror_for(url)
        display = display or url
        if mirror.path.is_dir() and self._has_all(mirror, commits):
            return mirror
        with self.lock(mirror):
            fresh = False
            if not mirror.path.is_dir() or self._damaged(mirror):
                self._replace(mirror)
                fresh = True
            missing = [c for c in commits if not self._complete(mirror, c)]
            if missing and not fresh and any(mirror.repo.has_object(c, "commit") for c in missing):
                # A pin whose commit is here but whose tree is not: the mirror is damaged.
                self._replace(mirror)
                fresh = True
            if missing:
                try:
                    self._fetch_commits(mirror, missing, display)
                except CacheError:
                    if fresh:
                        raise
                    # Fetching into an old mirror can trip over its damage: start clean once.
                    self._replace(mirror)
                    fresh = True
                    self._fetch_commits(mirror, missing, display)
            still = [c for c in missing if not self._complete(mirror, c)]
            if still and not fresh:
                self._replace(mirror)
                self._fetch_commits(mirror, still, display)
                still = [c for c in still if not self._complete(mirror, c)]
            if still:
                raise CacheError(
                    f"{display}: commit {still[0]} is incomplete after fetching",
                    details=["the upstream itself may be damaged; run `git fsck` on it"],
                )
        return mirror

    def fetch_ref(self, url: str, ref: str, *, display: str = "") -> tuple[Mirror, str]:
        """Fetch a branch, tag or commit id *ref* of *url* with history; returns its commit id."""
        mirror = self.mirror_for(url)
        with self.lock(mirror):
            if not mirror.path.is_dir():
                self._create(mirror)
            repo = mirror.repo
            if git.FULL_OID_RE.match(ref) and repo.has_object(ref, "commit"):
                self._unshallow(mirror)
                return mirror, ref
            safe = re.sub(r"[^A-Za-z0-9._/-]", "_", ref)
            target = f"refs/zmr/track/{safe}"
            try:
                repo.fetch(url, [f"+{ref}:{target}"], extra=self._unshallow_args(mirror))
                repo.write_commit_graph()
            except git.GitError as err:
                raise CacheError(f"{display or url}: cannot fetch {ref!r}", details=[*err.details, "check that the branch, tag or commit exists upstream"]) from None
            oid = repo.resolve(target)
        if oid is None:
            raise CacheError(f"{display or url}: {ref!r} is not a commit")
        return mirror, oid

    def _unshallow_args(self, mirror: Mirror) -> list[str]:
        return ["--unshallow"] if (mirror.path / "shallow").exists() else []

    def _unshallow(self, mirror: Mirror) -> None:
        if (mirror.path / "shallow").exists():
            mirror.repo.fetch(mirror.url, ["+refs/heads/*:refs/zmr/heads/*"], extra=["--unshallow"])
            mirror.repo.write_commit_graph()

    def ensure_history(self, url: str, *, display: str = "") -> Mirror:
        """A mirror with full history of every branch and tag (for rebase and upstreamed)."""
        mirror = self.mirror_for(url)
        with self.lock(mirror):
            if not mirror.path.is_dir():
                self._create(mirror)
            try:
                mirror.repo.fetch(url, ["+refs/heads/*:refs/zmr/heads/*", "+refs/tags/*:refs/zmr/tags/*"], extra=self._unshallow_args(mirror))
                mirror.repo.write_commit_graph()
            except git.GitError as err:
                raise CacheError(f"{display or url}: fetch failed", details=err.details) from None
        return mirror

    # -- internals -------------------------------------------------------------
    def _has_all(self, mirror: Mirror, commits: Sequence[str]) -> bool:
        return all(self._complete(mirror, c) for c in commits)

    def _complete(self, mirror: Mirror, commit: str) -> bool:
        if (mirror.path, commit) in self._verified:
            return True
        repo = mirror.repo
        if repo.has_object(commit, "commit") and repo.objects_complete(commit):
            self._verified.add((mirror.path, commit))
            return True
        return False

    def _damaged(self, mirror: Mirror) -> bool:
        return not (mirror.path / "HEAD").is_file() or not (mirror.path / "objects").is_dir()

    def _create(self, mirror: Mirror) -> None:
        self.mirrors_dir.mkdir(parents=True, exist_ok=True)
        # Called under this mirror's lock: leftovers of an interrupted creation are ours to remove.
        for stale in self.mirrors_dir.glob(f".tmp-{mirror.path.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{mirror.path.name}-", dir=self.mirrors_dir))
        try:
            git.run(["init", "--quiet", "--bare", str(tmp)])
            repo = git.Repo(tmp)
            for key, value in (
                ("gc.auto", "0"),  # no automatic gc racing parallel runs
                ("core.logAllRefUpdates", "false"),
                ("zmr.url", mirror.url),
                ("uploadpack.allowAnySHA1InWant", "true"),
                ("fetch.unpackLimit", "1"),  # keep fetched objects packed: builds reuse packed data
            ):
                repo.run(["config", key, value])
            os.rename(tmp, mirror.path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _replace(self, mirror: Mirror) -> None:
        """Move a damaged mirror aside (kept for inspection) and start an empty one."""
        self._verified = {entry for entry in self._verified if entry[0] != mirror.path}
        if mirror.path.exists():
            self._quarantine(mirror)
        self._create(mirror)

    def _quarantine(self, mirror: Mirror) -> None:
        target = self.root / "quarantine" / f"{mirror.path.name}-{int(time.time())}-{os.getpid()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(mirror.path, target)

    def _fetch_commits(self, mirror: Mirror, commits: Sequence[str], display: str) -> None:
        repo = mirror.repo
        refspecs = [f"+{c}:refs/zmr/pins/{c}" for c in commits]
        attempts: list[tuple[int | None, list[str]]] = [(1, refspecs), (None, refspecs)]
        errors: list[str] = []
        for depth, specs in attempts:
            try:
                repo.fetch(mirror.url, specs, depth=depth)
                return
            except git.GitError as err:
                errors.append(err.stderr_text.strip())
        # The server refuses unadvertised commits: fetch everything it advertises.
        try:
            repo.fetch(mirror.url, ["+refs/heads/*:refs/zmr/heads/*", "+refs/tags/*:refs/zmr/tags/*"], extra=self._unshallow_args(mirror))
        except git.GitError as err:
            raise CacheError(
                f"{display}: cannot fetch from {mirror.url}",
                details=[*err.stderr_text.strip().splitlines()[-5:], "check the URL, your network and credentials (url.<base>.insteadOf is honoured)"],
            ) from None
        for commit in commits:
            if not repo.has_object(commit, "commit"):
                raise CacheError(
                    f"{display}: upstream has no commit {commit}",
                    details=["it may have been force-pushed away; pin a commit that exists (git ls-remote <upstream>)"],
                )
            repo.run(["update-ref", f"refs/zmr/pins/{commit}", commit])
