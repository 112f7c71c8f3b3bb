"""A checkout as a git working tree: the `Checkout` porcelain class and the verbs that make, refresh and read one.

Git porcelain that changes a working tree (cherry-pick, commit, reset, ...)
and the files git keeps for an operation in progress (``CHERRY_PICK_HEAD``,
...) are used only in the ``zmr.ops.checkout`` package (tests/test_architecture.py
checks): ``create_checkout`` and ``refresh`` make and reset a checkout,
``Checkout.cherry_pick`` and its neighbours are the steps of ``zmr rebase``
and ``zmr checkout --merge``, ``dirty`` says what uncommitted work holds it.
The refs and config a checkout keeps are listed in ``zmr.ops.checkout``'s docstring.
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from zmr.infra import git
from zmr.infra.cache import Mirror
from zmr.infra.errors import ZmrError
from zmr.infra.files import atomic_write, current_umask
from zmr.model.manifest import Component
from zmr.ops.replay import TempIndex

BASE_REF = "refs/zmr/base"
EXPORTED_REF = "refs/zmr/exported"
BACKUP_PREFIX = "refs/zmr/backup/"
REFRESH_MARKER = "zmr-refresh"
TOKEN_KEY = "zmr.token"
SERIES_KEY = "zmr.series"  # config: the fingerprint of the series refs/zmr/exported equals (series_fingerprint)
_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or git am",
    "BISECT_LOG": "a bisect",
}


class CheckoutError(ZmrError):
    """A checkout or export cannot proceed."""


@dataclass
class Checkout:
    """A zmr checkout: a normal git working tree with zmr's notes in its config and refs.

    Invariant: *config* holds the checkout's ``zmr.*`` config values as
    git has them (``set_config`` writes through); ``zmr.model`` is always set.
    """

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

    @property
    def half_refreshed(self) -> bool:
        """An interrupted refresh left its marker: the tree may be half reset (the next ``zmr checkout`` finishes it)."""
        return (self.git_dir / REFRESH_MARKER).exists()

    @property
    def token(self) -> str:
        return self.config.get(TOKEN_KEY, "")

    def ensure_token(self) -> str:
        """The checkout's marker (``zmr.token``), written first when it has none (made by an older zmr)."""
        if not self.token:
            self.set_config({TOKEN_KEY: new_token()})
        return self.token

    def set_config(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            if self.config.get(key) != value:
                self.repo.run(["config", key, value])
                self.config[key] = value

    # -- the cherry-pick steps of ``zmr rebase`` and ``zmr checkout --merge`` (git porcelain on the checkout runs only here)

    def cherry_pick(self, commit: str) -> PickResult:
        """``git cherry-pick`` *commit* onto HEAD (3-way), its message kept as it is (no editor), told apart as ``PickResult`` says."""
        proc = self.repo.run(["cherry-pick", "--allow-empty-message", commit], check=False, env={"GIT_EDITOR": "true"})
        if proc.returncode == 0:
            return PickResult("picked")
        files = self.unmerged_paths()
        if files:
            return PickResult("conflict", files)
        if self.pick_in_progress() and self.index_matches_head():
            return PickResult("empty")
        return PickResult("failed", error=proc.stderr.decode("utf-8", "replace").strip().splitlines())

    def pick_in_progress(self) -> bool:
        """A cherry-pick stopped here and is not finished (``CHERRY_PICK_HEAD``): the engineer has not committed or dropped it."""
        return (self.git_dir / "CHERRY_PICK_HEAD").exists()

    def skip_pick(self) -> None:
        """Drop the cherry-pick in progress (``git cherry-pick --skip``): its change is there already, or it resolved to nothing."""
        self.repo.run(["cherry-pick", "--skip"])

    def quit_pick(self) -> None:
        """Forget a cherry-pick in progress, if any, leaving HEAD and the tree as they are (``git cherry-pick --quit``)."""
        self.repo.run(["cherry-pick", "--quit"], check=False)

    def apply_to_index(self, diff: bytes) -> bool:
        """``git apply --index`` *diff* (``-p1``, no fuzz): tree and index changed together, or (False) nothing changed.

        git refuses a path outside the tree and any write beyond a symbolic link of the tree.
        """
        return self.repo.apply(["--index", "-p1", "--whitespace=nowarn"], input=diff).returncode == 0

    def remove_stale_locks(self) -> list[str]:
        """The lock files a git killed in this checkout left (``index.lock``, ``HEAD.lock``, a ref's ``.lock``, ``shallow.lock``
        of the fetch that brings the old commits in), removed: their names. Only for a caller that knows the git that made them
        was zmr's own, killed (under zmr's lock of the component)."""
        names = ["index.lock", "HEAD.lock", "ORIG_HEAD.lock", "packed-refs.lock", "config.lock", "shallow.lock"]
        refs = self.git_dir / "refs"
        found = [self.git_dir / name for name in names] + (sorted(refs.rglob("*.lock")) if refs.is_dir() and not refs.is_symlink() else [])
        removed = []
        for path in found:
            if path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(path.relative_to(self.git_dir).as_posix())
        return removed

    def pick_leftovers(self) -> PickLeftovers:
        """What a cherry-pick killed before it committed may have left: changed and untracked files, git's note of it."""
        out = self.repo.run(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"]).stdout
        entries = [e for e in out.decode("utf-8", "surrogateescape").split("\0") if e]
        return PickLeftovers(
            changed=[e[3:] for e in entries if len(e) > 3 and e[:2] != "??"],
            untracked=[e[3:] for e in entries if e.startswith("??")],
            in_progress=self.pick_in_progress() or (self.git_dir / "MERGE_MSG").exists(),
        )

    def undo_pick(self, head: str, untracked: Sequence[str]) -> None:
        """Put the index and the tracked files back to *head* (``git reset --hard``) and remove *untracked* (files the killed pick
        wrote before git recorded them): what a cherry-pick killed before its commit did is gone. The caller checked that
        every change in the checkout is one the pick writes, and removed the lock files a killed git left."""
        self.repo.run(["cherry-pick", "--quit"], check=False)
        self.repo.run(["reset", "--quiet", "--hard", head])
        for name in untracked:
            path = self.path / name
            if path.is_file() and not path.is_symlink() and os.path.realpath(path.parent).startswith(os.path.realpath(self.path) + os.sep):
                path.unlink()
        (self.git_dir / "MERGE_MSG").unlink(missing_ok=True)

    def commit_as(self, commit: str) -> None:
        """Commit the index with *commit*'s message and author (``git commit -C``): a resolved pick keeps the patch's metadata, byte for byte."""
        self.repo.run(["commit", "--quiet", "--no-verify", "--cleanup=verbatim", "-C", commit])

    def reset_hard_to_head(self) -> None:
        """Index and tracked files back to HEAD (``git reset --hard``): a half-done pick's changes go; untracked files stay."""
        self.repo.run(["reset", "--quiet", "--hard", "HEAD"])

    def unmerged_paths(self) -> list[str]:
        """The files still in conflict (unmerged in the index), sorted: the engineer resolves these."""
        return sorted({p for p in self._diff_names(["--diff-filter=U"]) if p})

    def unstaged_paths(self) -> list[str]:
        """Tracked files changed in the tree but not in the index: a resolution not yet ``git add``-ed, which a commit would leave out."""
        return [p for p in self._diff_names([]) if p]

    def staged_paths(self) -> list[str]:
        """Files the index changes against HEAD: what committing the resolution would commit."""
        return [p for p in self._diff_names(["--cached"]) if p]

    def index_matches_head(self) -> bool:
        """The index holds no change against HEAD: committing the pick would make an empty commit."""
        return self.repo.ok(["diff", "--cached", "--quiet"])

    def conflict_marked(self, paths: Sequence[str]) -> list[str]:
        """Those of *paths* (relative to the checkout) whose file still holds a conflict marker line; links and folders are read as none."""
        return [p for p in paths if has_markers(self.path / p)]

    def _diff_names(self, options: list[str]) -> list[str]:
        return self.repo.run(["diff", *options, "--name-only", "-z"]).stdout.decode("utf-8", "surrogateescape").split("\0")


@dataclass(frozen=True)
class PickLeftovers:
    """``Checkout.pick_leftovers``: what is in a checkout besides HEAD's tree."""

    changed: list[str]
    untracked: list[str]
    in_progress: bool  # CHERRY_PICK_HEAD or MERGE_MSG

    @property
    def paths(self) -> list[str]:
        return self.changed + self.untracked

    @property
    def any(self) -> bool:
        return bool(self.changed or self.untracked or self.in_progress)


PickStatus = Literal["picked", "conflict", "empty", "failed"]


@dataclass(frozen=True)
class PickResult:
    """What ``Checkout.cherry_pick`` left in the checkout.

    *status* ``picked``: committed. ``conflict``: stopped with *files* in
    conflict, for the engineer to resolve. ``empty``: the change is in HEAD
    already; the pick is still in progress (``skip_pick`` drops it).
    ``failed``: none of these; *error* holds git's message.
    """

    status: PickStatus
    files: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)


def branch_name(component: Component) -> str:
    return f"{component.model}/{component.key}"


def new_token() -> str:
    return os.urandom(16).hex()


def try_open(path: Path) -> Checkout | None:
    """The zmr checkout at *path*, a real folder (no symbolic link); None for anything else."""
    if path.is_symlink():
        return None
    try:
        return open_checkout(path)
    except CheckoutError:
        return None


def open_checkout(path: Path) -> Checkout | None:
    """The zmr checkout at *path*; None when nothing is there; an error for anything else."""
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    git_dir = path / ".git"
    if not git_dir.is_dir():
        raise CheckoutError(f"{path}: exists and is not a zmr checkout", details=["remove it, or pass another --dir"])
    repo = git.Repo(git_dir, path)
    proc = repo.run(["config", "--local", "-z", "--get-regexp", r"^zmr\."], check=False)
    config = {}
    for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if item:
            key, _, value = item.partition("\n")
            config[key] = value
    if "zmr.model" not in config:
        raise CheckoutError(f"{path}: is a git repository but not a zmr checkout", details=["remove it, or pass another --dir"])
    return Checkout(path, repo, config)


def check_not_half_refreshed(co: Checkout, component: Component) -> None:
    if co.half_refreshed:
        raise CheckoutError(
            f"{co.path}: an interrupted `zmr checkout` left this checkout half-refreshed",
            details=[f"run `zmr checkout {component.model} -c {component.key}` again to finish it"],
        )


def check_identity(co: Checkout, component: Component) -> None:
    if (co.model, co.component) != (component.model, component.key):
        raise CheckoutError(
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


def has_markers(path: Path) -> bool:
    try:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    except OSError:
        return False
    return any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in data.split(b"\n"))


def create_checkout(target: Path, mirror: Mirror | Path, branch: str, base: str, tip: str, config: dict[str, str], extra: Sequence[str] = ()) -> None:
    """A new checkout, built in a temporary sibling folder and renamed into place."""
    source = mirror.path if isinstance(mirror, Mirror) else mirror
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_half_made(target)  # left by an interrupted checkout
    tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix(target), dir=target.parent))
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


def tmp_prefix(target: Path) -> str:
    return f".{target.name}.zmr-tmp-"


def _remove_half_made(target: Path) -> None:
    for stale in target.parent.glob(tmp_prefix(target) + "*"):
        shutil.rmtree(stale, ignore_errors=True)


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
        repo.fetch(str(source), wanted, depth=depth, extra=["--update-shallow"], own_source=True)


def refresh(
    co: Checkout,
    source: Path,
    branch: str,
    base: str,
    tip: str,
    config: dict[str, str],
    *,
    clean: bool,
    extra_updates: Sequence[git.RefUpdate] = (),
    extra_objects: Sequence[str] = (),
    exported: str | None = None,
) -> str:
    """Point the checkout's branch at *tip* on *base* and reset its working tree.

    A marker file makes an interrupted refresh resumable: the next checkout
    sees it and finishes the job instead of taking the half-reset tree for work.
    """
    if (
        co.head() == tip
        and co.repo.head_symref() == f"refs/heads/{branch}"
        and co.base() == base
        and co.exported() == (exported or tip)
        and not extra_updates
        and not dirty(co)
        and all(co.config.get(k) == v for k, v in config.items())
        and not co.half_refreshed
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
    co.repo.point_head(f"refs/heads/{branch}")
    co.set_config(config)
    co.repo.run(["reset", "--quiet", "--hard", "HEAD"])
    if clean:
        co.repo.run(["clean", "--quiet", "-d", "--force"])
    marker.unlink()
    return "refreshed"


def backup(co: Checkout) -> list[git.RefUpdate]:
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


def mark_exported(co: Checkout, tip: str, reason: str, fingerprint: str | None = None) -> None:
    """Record that *tip* equals the series (``refs/zmr/exported``): a HEAD there holds no unexported work.

    *fingerprint* (``series_fingerprint``) names that series; it is written
    first, so an interruption leaves an older tip with the newer series, which
    export reads as work of the checkout's own (§7.7), never as a conflict.
    """
    if fingerprint is not None:
        co.set_config({SERIES_KEY: fingerprint})
    old = co.exported()
    if old != tip:
        co.repo.update_refs([git.RefUpdate(EXPORTED_REF, tip, old)], reason)
