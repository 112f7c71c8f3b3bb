"""Checkouts: a git working tree per component where engineers change a series.

``zmr checkout`` turns a series into commits and ``zmr export`` turns commits
back into a series; both commands live here, on top of ``zmr.replay``
(series → commits) and ``zmr.export`` (commits → series, planned by ``zmr.patchplan``).
``zmr.patchplan`` knows nothing of checkouts, so that checkout (is there
unexported work?), export and rebase all plan with it and no import goes
in a circle::

    series ──build_chain (zmr.replay: a temp index in the mirror, one fast-import)──▶ chain of commits
           ──(local fetch: objects copied, never borrowed)──▶ checkout: branch <model>/<component>
    checkout ──(rev-list zmr/base..HEAD)──▶ zmr.patchplan.plan_export ──▶ write_plan ──▶ series

Where state is kept, inside the checkout's ``.git``:

- config ``zmr.model``, ``zmr.component``, ``zmr.pin``, ``zmr.branch``,
  ``zmr.project``, ``zmr.upstream``: what the checkout is of;
- config ``zmr.token``: a random marker written by the zmr that made (or
  first saved) the checkout; state that names a checkout (the remembered
  ``--dir``, a rebase's saved checkout) names its token too, and zmr changes
  or deletes a folder named by state only when it carries that token;
- ``refs/zmr/base``: the pinned upstream commit (``git log zmr/base..``
  shows exactly the series);
- ``refs/zmr/exported``: the last tip known to equal the series (set by
  checkout, export and rebase: ``mark_exported``); a HEAD elsewhere may hold
  unexported work;
- config ``zmr.series``: the fingerprint of the series ``refs/zmr/exported``
  equals (``series_fingerprint``), so export can tell a stale checkout from
  new work (the three sides, docs/reference.md §7.7);
- ``zmr-merge/``: present only while ``zmr checkout --merge`` replays the
  checkout's new commits on the repository's series (``merge``);
- ``refs/zmr/backup/<time>[-worktree]``: what ``--force`` discarded;
- remote ``upstream``: the component's upstream (history on demand: ``--history``);
- ``zmr-refresh``: present only while a refresh runs, so an interrupted one
  is finished by the next ``zmr checkout`` instead of being taken for work
  (``Checkout.half_refreshed``).

A checkout made with ``--dir`` is remembered in the git directory
(``Project.checkout_pointer``). Which checkout a command uses is
``checkout_path`` (the checkout-selection rule, docs/reference.md §8.1).
``zmr rebase`` changes a checkout only through ``snapshot``, ``place``,
``restore``, ``mark_rebased`` and the cherry-pick steps ``Checkout.cherry_pick``,
``skip_pick``, ``quit_pick``, ``commit_as`` and ``reset_hard_to_head``.
Everything else it does there only reads: checks (``check_identity``,
``dirty``, ``sync_state``, ``Checkout.pick_in_progress``, ``unmerged_paths``,
``unstaged_paths``, ``index_matches_head``, ``conflict_marked``,
``Repo.is_ancestor``) and the commits it exports. Git porcelain that changes a
working tree (cherry-pick, commit, reset, ...) and the files git keeps for
an operation in progress (``CHERRY_PICK_HEAD``, ...) are used in no other
module (tests/test_architecture.py checks).
State and commands: docs/reference.md §8.1, §7.6, §7.7.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from zmr import git
from zmr.git import Progress
from zmr.cache import HEADS, TAGS, UPSTREAM_REFS, Cache, Mirror
from zmr.errors import ZmrError
from zmr.patchplan import list_commits, plan_export
from zmr.files import FileRefused, atomic_write, current_umask, read_repo_file
from zmr.lock import locked
from zmr.manifest import Component
from zmr.patchfile import CommitMeta
from zmr.project import Project
from zmr.replay import TempIndex, build_chain
from zmr.series import Series

BASE_REF = "refs/zmr/base"
EXPORTED_REF = "refs/zmr/exported"
BACKUP_PREFIX = "refs/zmr/backup/"
REFRESH_MARKER = "zmr-refresh"
TOKEN_KEY = "zmr.token"
MAX_POINTER_BYTES = 1 << 16
MERGE_DIR = "zmr-merge"  # in the checkout's .git while `zmr checkout --merge` is under way (merge_state)
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
        return [p for p in paths if _has_markers(self.path / p)]

    def _diff_names(self, options: list[str]) -> list[str]:
        return self.repo.run(["diff", *options, "--name-only", "-z"]).stdout.decode("utf-8", "surrogateescape").split("\0")


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


@dataclass(frozen=True)
class Pointer:
    """The remembered ``--dir`` of a component's checkout (``Project.checkout_pointer``): its folder and its ``zmr.token``."""

    path: Path
    token: str


def read_pointer(project: Project, component: Component) -> Pointer | None:
    """The remembered ``--dir``; None when there is none or it is not one zmr wrote (an older zmr's one-line file, damage)."""
    file = project.checkout_pointer(component)
    if not file.is_file():
        return None
    try:
        data = json.loads(read_repo_file(None, file, limit=MAX_POINTER_BYTES, what="checkout pointer"))
    except (FileRefused, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not isinstance(data.get("token"), str) or not data["token"]:
        return None
    path = Path(data["path"])
    return Pointer(path, data["token"]) if path.is_absolute() else None


def write_pointer(project: Project, component: Component, co: Checkout) -> None:
    atomic_write(project.checkout_pointer(component), json.dumps({"path": str(co.path), "token": co.ensure_token()}).encode() + b"\n")


def forget_pointer(project: Project, component: Component) -> None:
    project.checkout_pointer(component).unlink(missing_ok=True)


def remembered_checkout(project: Project, component: Component) -> Checkout | None:
    """The checkout made with ``--dir``, when it is still there, of *component*, and carries the token zmr recorded for it."""
    pointer = read_pointer(project, component)
    if pointer is None:
        return None
    co = _try_open(pointer.path)
    if co is None or co.token != pointer.token or (co.model, co.component) != (component.model, component.key):
        return None
    return co


def default_path(project: Project, component: Component) -> Path:
    """``work/<model>/<component>``, refused when ``work``, ``work/<model>`` or the checkout itself is a symbolic link."""
    return project.no_links(project.default_checkout(component).relative_to(project.root), "checkouts")


def checkout_path(project: Project, component: Component, explicit: Path | None = None) -> Path:
    """The checkout a command uses (the checkout-selection rule, docs/reference.md §8.1).

    ``--dir``; else the checkout of *component* the current folder is in;
    else the one known checkout: ``work/<model>/<component>`` or the
    remembered ``--dir`` (refused when both exist); else
    ``work/<model>/<component>``, where ``zmr checkout`` makes one. A
    remembered ``--dir`` that is gone, or whose checkout lacks its token, is
    never used (and the pointer is forgotten when it is gone).
    """
    if explicit is not None:
        return Path(os.path.abspath(explicit))
    default = default_path(project, component)
    remembered = remembered_checkout(project, component)
    here = _standing_in(project, component)
    if here is not None:
        if _same_folder(here, default) or (remembered is not None and _same_folder(here, remembered.path)):
            return here
        raise CheckoutError(
            f"{here}: is a checkout of {component.label} that this repository does not know (neither {show_path(project, default)} nor its remembered --dir)",
            details=[
                f"use it by naming it: `--dir {here}`",
                f"or run the command outside it (the known checkout is {remembered.path if remembered else show_path(project, default)})",
            ],
        )
    at_default = _try_open(default) is not None
    if remembered is not None and not _same_folder(remembered.path, default):
        if at_default:
            raise CheckoutError(
                f"{component.label}: two checkouts: {show_path(project, default)} and {remembered.path} (made with --dir)",
                details=["run the command inside the one you mean, or name it with --dir"],
            )
        return remembered.path
    pointer = read_pointer(project, component)
    if pointer is not None and not pointer.path.exists():
        forget_pointer(project, component)
        project.notices.append(f"{component.label}: the checkout made with --dir {pointer.path} is gone; forgot it (zmr uses {show_path(project, default)})")
    return default


def _standing_in(project: Project, component: Component) -> Path | None:
    """The top of the checkout of *component* that the current folder is in; None outside one."""
    proc = git.run(["rev-parse", "--path-format=absolute", "--show-toplevel"], cwd=os.getcwd(), check=False)
    if proc.returncode != 0:
        return None
    top = Path(proc.stdout.decode("utf-8", "surrogateescape").strip())
    if _same_folder(top, project.root):
        return None
    co = _try_open(top)
    if co is None or (co.model, co.component) != (component.model, component.key):
        return None
    return co.path


def checkout_of(path: Path, component: Component) -> Checkout | None:
    """The zmr checkout of *component* at *path*, a real folder; None for anything else (``zmr.legacy`` checks what an older zmr wrote)."""
    co = _try_open(path)
    return co if co is not None and (co.model, co.component) == (component.model, component.key) else None


def _same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _try_open(path: Path) -> Checkout | None:
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


def require_checkout(project: Project, component: Component, explicit: Path | None = None) -> Checkout:
    path = checkout_path(project, component, explicit)
    co = open_checkout(path)
    if co is None:
        raise CheckoutError(
            f"{component.label}: no checkout at {show_path(project, path)}",
            details=[f"run `zmr checkout {component.model} -c {component.key}` first"],
        )
    check_identity(co, component)
    check_not_half_refreshed(co, component)
    return co


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


def sync_state(project: Project, component: Component, co: Checkout, cache: Cache | None = None) -> tuple[bool, list[str]]:
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
    if base is None or not co.repo.is_ancestor(base, head):
        return False, [] if fresh else [f"HEAD {head[:12]} is not on top of the checkout's base"]
    if co.pin != component.commit:
        count = len(co.repo.commits_between(base, head))
        return False, [] if fresh else [f"{count} commit(s) on the old pin {co.pin[:12]} (the manifest now pins {component.commit[:12]})"]
    moved = None if fresh else upstream_commits_problem(project, component, co, base, head, cache)
    if moved is not None:
        return False, [moved.message]
    try:
        commits = list_commits(co.repo, base, head, component.label)
        plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches, series=project.series(component))
    except ZmrError as err:
        return False, [] if fresh else [err.message]
    if not plan.changed:
        return True, []
    return False, [] if fresh else ["commits not exported: " + "; ".join(plan.summary())]


def upstream_commits_in(project: Project, component: Component, co: Checkout, base: str, head: str, cache: Cache | None = None) -> list[str]:
    """The commits of base..head that are upstream's, oldest first: what ``git rebase --onto <newer upstream>`` leaves there.

    A commit is upstream's when the checkout reaches it from a remote-tracking
    ref of a remote whose URL is the upstream's, or from what ``FETCH_HEAD``
    says was fetched from that URL, or when the component's mirror reaches it
    from its upstream refs. The engineer's own commits, zmr's commits of the
    series, and a colleague's branch fetched from elsewhere are none of them.
    """
    commits = co.repo.commits_between(base, head)
    if not commits:
        return []
    upstream = (cache or Cache()).for_component(component, project.root)
    urls = {_same_url(upstream.url), _same_url(component.upstream)}
    tips = []
    remotes = co.repo.run(["config", "--get-regexp", r"^remote\..*\.url$"], check=False).stdout.decode("utf-8", "surrogateescape")
    for line in remotes.splitlines():
        key, _, value = line.partition(" ")
        if _same_url(value) in urls:
            tips.append(f"--glob=refs/remotes/{key.removeprefix('remote.').removesuffix('.url')}/*")
    fetch_head = co.git_dir / "FETCH_HEAD"
    if fetch_head.is_file():
        for line in fetch_head.read_text("utf-8", "replace").splitlines():
            oid, _, rest = line.partition("\t")
            source = rest.rsplit(" of ", 1)[-1] if " of " in rest else ""
            if _same_url(source) in urls and git.FULL_OID_RE.match(oid) and co.repo.has_object(oid, "commit"):
                tips.append(oid)
    own = set(co.repo.rev_list([head, "--not", base, *tips])) if tips else set(commits)
    foreign = {c for c in commits if c not in own}
    mirror = upstream.mirror.path
    candidates = [c for c in commits if c in own]
    if candidates and mirror.is_dir():
        repo = git.Repo(mirror)
        missing = set(repo.missing_objects(candidates))
        present = [c for c in candidates if c not in missing]
        if present and any(ref.startswith(UPSTREAM_REFS) for ref in repo.refs("refs/zmr/")):
            unreached = set(repo.rev_list(["--not", *(f"--glob={prefix}*" for prefix in UPSTREAM_REFS)], stdin=present))
            foreign |= set(present) - unreached
    return [c for c in commits if c in foreign]


def _same_url(url: str) -> str:
    """*url* as compared with the upstream's: no trailing slash or ``.git``."""
    return url.strip().rstrip("/").removesuffix(".git")


def upstream_commits_problem(project: Project, component: Component, co: Checkout, base: str, head: str, cache: Cache | None) -> CheckoutError | None:
    """An error when base..head holds upstream's commits (the branch was rebased with git, not with ``zmr rebase``)."""
    found = upstream_commits_in(project, component, co, base, head, cache)
    if not found:
        return None
    newest = found[-1]
    subject = CommitMeta.for_commit(co.repo.commit_info(found[0])).subject
    return CheckoutError(
        f"{show_path(project, co.path)}: {len(found)} commit(s) between zmr/base and HEAD are upstream's ({found[0][:12]} {subject}"
        + (", ..." if len(found) > 1 else "")
        + ")",
        details=[
            "the branch was moved onto a newer upstream with git; exporting would write upstream's commits as patches, on the old pin",
            f"put your commits back on the pin: `git rebase --onto zmr/base {newest[:12]}`",
            f"then move the series and the pin with `zmr rebase {component.model} -c {component.key} --onto {newest}`",
        ],
    )


def rebase_in_progress(project: Project, component: Component) -> bool:
    return project.rebase_state(component).is_file()


def refuse_during_rebase(project: Project, component: Component, what: str) -> None:
    if rebase_in_progress(project, component):
        raise CheckoutError(
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
    history: bool = False  # upstream's history was added (--history)

    def to_json(self) -> dict:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "path": str(self.path),
            "branch": self.branch,
            "base": self.base,
            "tip": self.tip,
            "patches": self.patches,
            "action": self.action,
            "backups": self.backups,
            "history": self.history,
        }


@dataclass(frozen=True)
class CheckoutReport:
    """What ``zmr checkout`` did: one result per component."""

    checkouts: list[CheckoutResult]

    def to_json(self) -> dict:
        return {"checkouts": [r.to_json() for r in self.checkouts]}


@locked
def checkout(
    project: Project,
    component: Component,
    cache: Cache | None = None,
    path: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    history: bool = False,
) -> CheckoutResult:
    """Make (or refresh) the working tree of *component*: the pin plus one commit per patch.

    The checkout is shallow (the pin and the series: fast) with an ``upstream``
    remote; *history* also gives it upstream's history and branches (``add_history``).
    """
    cache = cache or Cache()
    result = _checkout(project, component, cache, path, force, progress)
    co = open_checkout(result.path)
    assert co is not None
    upstream = cache.for_component(component, project.root)
    ensure_upstream_remote(co, upstream.url)
    if history:
        if progress:
            progress(f"{component.label}: fetching upstream's history")
        add_history(co, upstream.ensure_history())
        result.history = True
    return result


UPSTREAM_REMOTE = "upstream"


def ensure_upstream_remote(co: Checkout, url: str) -> None:
    """An ``upstream`` remote (the component's upstream) unless the checkout has one: ``git fetch upstream`` works there."""
    if co.repo.run(["config", "--get", f"remote.{UPSTREAM_REMOTE}.url"], check=False).returncode != 0:
        co.repo.run(["config", f"remote.{UPSTREAM_REMOTE}.url", url])
        co.repo.run(["config", f"remote.{UPSTREAM_REMOTE}.fetch", f"+refs/heads/*:refs/remotes/{UPSTREAM_REMOTE}/*"])


def add_history(co: Checkout, mirror: Mirror) -> None:
    """Upstream's whole history and branches in the checkout (``git log``, ``blame``, ``cherry-pick <upstream id>``).

    Copied from the mirror, which ``zmr rebase`` and ``upstreamed`` keep
    complete anyway: the same as ``git fetch --unshallow upstream``, without
    asking the upstream again.
    """
    shallow = ["--unshallow"] if (co.git_dir / "shallow").exists() else []
    refspecs = [f"+{HEADS}*:refs/remotes/{UPSTREAM_REMOTE}/*", f"+{TAGS}*:refs/tags/*"]
    co.repo.fetch(str(mirror.path), refspecs, extra=[*shallow, "--update-shallow"], own_source=True)


def _checkout(project: Project, component: Component, cache: Cache, path: Path | None, force: bool, progress: Progress | None) -> CheckoutResult:
    refuse_during_rebase(project, component, "a checkout")
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    in_sync = False
    if co is not None:
        check_identity(co, component)
        refuse_during_merge(co, component)
        if not co.half_refreshed:
            problems = dirty(co)
            in_sync, work = sync_state(project, component, co, cache)
            problems += work
            if problems and not force:
                recorded = co.config.get(SERIES_KEY)
                if recorded and co.head() != co.exported() and recorded != series_fingerprint(project, component, component.commit):
                    problems.append(f"the series changed in the repository too: combine both with `zmr checkout {component.model} -c {component.key} --merge`")
                raise CheckoutError(
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
                mark_exported(co, head, "zmr checkout", series_fingerprint(project, component, component.commit))
                _remember(project, component, co)
                count = len(co.repo.commits_between(component.commit, head))
                return CheckoutResult(component, target, co.branch, component.commit, head, count, "unchanged")
    series = project.series(component, no_links=True)
    if progress:
        progress(f"{component.label}: fetching {component.commit[:12]}")
    mirror = cache.for_component(component, project.root).ensure([component.commit])
    if progress:
        progress(f"{component.label}: committing {len(series.patches)} patches")
    chain = build_chain(mirror.repo, component, component.commit, series.patches, progress=progress)
    tip = chain[-1] if chain else component.commit
    branch = branch_name(component)
    config = config_values(project, component, branch, series=series)
    if co is None:
        _keep_out_of_status(project, target)
        create_checkout(target, mirror, branch, component.commit, tip, {**config, TOKEN_KEY: new_token()})
        action, backups = "created", []
    else:
        backups = _backup(co) if force else []
        action = refresh(co, mirror.path, branch, component.commit, tip, config, clean=force, extra_updates=backups)
    made = open_checkout(target)
    assert made is not None
    _remember(project, component, made)
    return CheckoutResult(component, target, branch, component.commit, tip, len(series.patches), action, [u.ref for u in backups])


def _remember(project: Project, component: Component, co: Checkout) -> None:
    """A checkout outside ``work/<model>/<component>`` becomes the remembered ``--dir``, with its token."""
    if not _same_folder(co.path, project.default_checkout(component)):
        write_pointer(project, component, co)


def _keep_out_of_status(project: Project, target: Path) -> None:
    """Before zmr makes ``work/``: ``/work/`` in the repository's ``info/exclude``, so no checkout shows in ``git status``."""
    if target.parent.parent == project.root / "work":
        project.exclude_checkouts()


def config_values(project: Project, component: Component, branch: str, pin: str | None = None, series: Series | None = None) -> dict[str, str]:
    """The ``zmr.*`` config of a checkout of *component* on *pin* (default: the manifest's) made from *series* (default: the one on disk now)."""
    pin = pin or component.commit
    return {
        "zmr.model": component.model,
        "zmr.component": component.key,
        "zmr.pin": pin,
        "zmr.branch": branch,
        "zmr.project": str(project.root),
        "zmr.upstream": component.upstream,
        SERIES_KEY: series_fingerprint(project, component, pin, series),
    }


def series_fingerprint(project: Project, component: Component, pin: str, series: Series | None = None) -> str:
    """One id for what a checkout's commits are made from: the pin and each patch's name, ``-p`` level and bytes.

    Comments and blank lines of ``series`` are left out: they make no commit
    (export keeps the repository's). The "three sides" of export compare it
    (docs/reference.md §7.7).
    """
    series = series or project.series(component)
    digest = hashlib.sha256(f"zmr-series 1\n{pin}\n".encode())
    for patch in series.patches:
        digest.update(f"{patch.name}\0{patch.strip}\0{len(patch.data)}\0".encode("utf-8", "surrogateescape") + patch.data)
    return digest.hexdigest()


def create_checkout(target: Path, mirror: Mirror | Path, branch: str, base: str, tip: str, config: dict[str, str], extra: Sequence[str] = ()) -> None:
    """A new checkout, built in a temporary sibling folder and renamed into place."""
    source = mirror.path if isinstance(mirror, Mirror) else mirror
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_half_made(target)  # left by an interrupted checkout
    tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), dir=target.parent))
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


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}.zmr-tmp-"


def _remove_half_made(target: Path) -> None:
    for stale in target.parent.glob(_tmp_prefix(target) + "*"):
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
    head_ref = co.repo.run(["symbolic-ref", "--quiet", "HEAD"], check=False).stdout.decode().strip()
    if (
        co.head() == tip
        and head_ref == f"refs/heads/{branch}"
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


# -- what other commands do to a checkout: zmr rebase ------------------------------------------


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


def mark_rebased(co: Checkout, pin: str, tip: str, fingerprint: str) -> None:
    """A rebase that ended in the checkout moved its pin to *pin*; *tip* (its HEAD) equals the series written (``mark_exported``)."""
    co.set_config({"zmr.pin": pin})
    mark_exported(co, tip, "zmr rebase", fingerprint)


def place(project: Project, component: Component, saved: SavedCheckout, source: Path, base: str, tip: str, extra_objects: Sequence[str] = ()) -> Checkout:
    """The checkout *saved* names made the branch of *component* at *tip*, pinned at *base*.

    Created (with the saved token) when nothing is there, else refreshed (its
    tree reset to *tip*, untracked files kept) when it carries the saved
    token; anything else there is refused. *source* is the mirror holding
    the commits; *extra_objects* are more commits to copy in (for a later cherry-pick).
    """
    branch = branch_name(component)
    config = config_values(project, component, branch, base)
    path = saved.path
    co = None if path.is_symlink() else open_checkout(path)
    if co is None:
        if path.is_symlink():
            raise CheckoutError(f"{path}: is a symbolic link; zmr makes a checkout only in a real folder", details=["remove the link, then run again"])
        _keep_out_of_status(project, path)
        create_checkout(path, source, branch, base, tip, {**config, TOKEN_KEY: saved.token}, extra=extra_objects)
        co = open_checkout(path)
        assert co is not None
    elif not saved.token or co.token != saved.token:
        raise CheckoutError(
            f"{path}: is not the checkout this rebase saved (its zmr.token differs); zmr leaves it alone",
            details=["undo the rebase with --abort (nothing is done there either)"],
        )
    else:
        refresh(co, source, branch, base, tip, config, clean=False, extra_objects=extra_objects)
    return co


_CONFIG_COPY = "checkout-config"  # the name of the copy of .git/config in the folder given to snapshot


@dataclass(frozen=True)
class SavedCheckout:
    """What ``restore`` needs to put a checkout back as ``snapshot`` found it.

    Invariant: when *existed*, *refs* are all its refs under ``refs/``, *head*
    is its HEAD (a ref name when *head_symbolic*, else a commit id), and the
    folder given to ``snapshot`` holds a byte copy of its ``.git/config``.
    When not, nothing was at *path*: a checkout the rebase makes there gets
    *token*. Either way zmr touches the folder only while it carries *token*
    (``zmr.token``); state without one (an older zmr's) names no checkout zmr may touch.
    """

    path: Path
    existed: bool
    head: str = ""
    head_symbolic: bool = False
    refs: dict[str, str] = field(default_factory=dict)
    token: str = ""

    def to_json(self) -> dict:
        data: dict = {"path": str(self.path), "existed": self.existed, "token": self.token}
        if self.existed:
            data.update(head=self.head, head_symbolic=self.head_symbolic, refs=dict(self.refs))
        return data

    @classmethod
    def from_json(cls, data: dict) -> SavedCheckout:
        return cls(
            Path(data["path"]),
            bool(data["existed"]),
            data.get("head", ""),
            bool(data.get("head_symbolic")),
            dict(data.get("refs", {})),
            str(data.get("token") or ""),
        )

    def open(self) -> Checkout | None:
        """The checkout at *path* when it carries *token*; None when it is gone or is not the one saved (zmr then leaves it alone)."""
        co = _try_open(self.path)
        return co if co is not None and self.token and co.token == self.token else None


def snapshot(co: Checkout | None, path: Path, into: Path) -> SavedCheckout:
    """Save what ``restore`` needs to undo anything done to the checkout *co* at *path* (None: nothing there); files go into *into*."""
    if co is None:
        return SavedCheckout(path, False, token=new_token())
    token = co.ensure_token()  # before the copy: --abort puts back a config that still carries it
    shutil.copyfile(co.git_dir / "config", into / _CONFIG_COPY)
    symref = co.repo.run(["symbolic-ref", "--quiet", "HEAD"], check=False)
    head = symref.stdout.decode().strip() if symref.returncode == 0 else (co.head() or "")
    return SavedCheckout(path, True, head, symref.returncode == 0, co.repo.refs("refs/"), token)


def restore(saved: SavedCheckout, folder: Path) -> bool:
    """Put the checkout back as *saved* (files from *folder*): config, refs, HEAD and tree; False when it is gone.

    A checkout that did not exist is removed, half made or not, when it
    carries the saved token; anything else there is left alone. One that did
    gets its operations in progress quit, its config and refs back (refs the
    snapshot did not have deleted), HEAD back and its tree reset to HEAD;
    without the saved token it is left alone and this says it is gone.
    """
    path = saved.path
    if not saved.existed:
        made = saved.open()
        if made is not None:
            shutil.rmtree(path)
        for stale in path.parent.glob(_tmp_prefix(path) + "*") if saved.token else ():
            half = _try_open(stale)
            if half is not None and half.token == saved.token:
                shutil.rmtree(stale)
        return True
    co = saved.open()
    if co is None:
        return False
    for args in (["cherry-pick", "--quit"], ["rebase", "--quit"], ["am", "--quit"]):
        co.repo.run(args, check=False)
    atomic_write(co.git_dir / "config", (folder / _CONFIG_COPY).read_bytes())
    current = co.repo.refs("refs/")
    wanted = saved.refs
    updates = [git.RefUpdate(ref, wanted.get(ref), current.get(ref)) for ref in sorted(set(current) | set(wanted)) if current.get(ref) != wanted.get(ref)]
    co.repo.update_refs(updates, "zmr rebase --abort")
    if saved.head_symbolic:
        co.repo.run(["symbolic-ref", "HEAD", saved.head])
    elif saved.head:
        co.repo.run(["update-ref", "--no-deref", "HEAD", saved.head])
    co.repo.run(["reset", "--quiet", "--hard", "HEAD"])
    marker = co.git_dir / REFRESH_MARKER
    if marker.exists():
        marker.unlink()
    return True


# -- checkout --merge: the repository's series and the checkout's new commits ---------------------


@dataclass
class MergeResult:
    """Where ``zmr checkout --merge`` (or its ``--continue``) got: *action* ``merged``, ``stopped`` (a conflict) or ``aborted``.

    *replayed*: the checkout's commits replayed so far; *commit*, *subject*
    and *files*: the commit that stopped and its files in conflict.
    """

    component: Component
    path: Path
    action: str
    replayed: int = 0
    left: int = 0
    commit: str = ""
    subject: str = ""
    files: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "path": str(self.path),
            "action": self.action,
            "replayed": self.replayed,
            "left": self.left,
            "commit": self.commit,
            "subject": self.subject,
            "files": self.files,
        }


def merge_state(co: Checkout) -> Path:
    """The folder of a merge under way: what ``restore`` needs (``saved.json`` + a copy of the config) and ``todo.json``."""
    return co.git_dir / MERGE_DIR


def refuse_during_merge(co: Checkout, component: Component) -> None:
    if merge_state(co).is_dir():
        m, k = component.model, component.key
        raise CheckoutError(
            f"{co.path}: a `zmr checkout --merge` is in progress",
            details=[f"finish it with `zmr checkout {m} -c {k} --continue`, or undo it with `zmr checkout {m} -c {k} --abort`"],
        )


@locked
def merge(project: Project, component: Component, cache: Cache | None = None, path: Path | None = None, progress: Progress | None = None) -> MergeResult:
    """Replay the checkout's commits since its last export on a fresh checkout of the repository's series (§7.6).

    Before anything moves, ``snapshot`` saves the checkout in its own
    ``.git`` (``merge_state``), so ``--abort`` puts it back exactly.
    """
    refuse_during_rebase(project, component, "a merge")
    co = require_checkout(project, component, path)
    refuse_during_merge(co, component)
    where = show_path(project, co.path)
    problems = dirty(co)
    if problems:
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or stash the changes, then merge again"])
    head, exported = co.head(), co.exported()
    if head is None or exported is None or not co.repo.is_ancestor(exported, head):
        raise CheckoutError(
            f"{where}: HEAD does not descend from the last exported tip ({(exported or '?')[:12]}): the checkout's commits were rewritten",
            details=[
                "zmr cannot tell which commits are new; save them (git branch keep), then",
                f"`zmr checkout {component.model} -c {component.key} --force` and cherry-pick yours from keep",
            ],
        )
    mine = list_commits(co.repo, exported, head, component.label)
    cache = cache or Cache()
    series = project.series(component)
    mirror = cache.for_component(component, project.root).ensure([component.commit])
    if progress:
        progress(f"{component.label}: committing {len(series.patches)} patches")
    chain = build_chain(mirror.repo, component, component.commit, series.patches, progress=progress)
    state = merge_state(co)
    tmp = Path(tempfile.mkdtemp(prefix=f".{MERGE_DIR}.tmp-", dir=co.git_dir))
    try:
        saved = snapshot(co, co.path, tmp)
        atomic_write(tmp / "saved.json", json.dumps(saved.to_json()).encode())
        atomic_write(tmp / "todo.json", json.dumps({"todo": mine, "head": None, "replayed": 0}).encode())
        os.rename(tmp, state)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    branch = branch_name(component)
    refresh(co, mirror.path, branch, component.commit, chain[-1] if chain else component.commit, config_values(project, component, branch), clean=False)
    return _replay_mine(component, co)


def _replay_mine(component: Component, co: Checkout) -> MergeResult:
    """Cherry-pick the commits left in ``todo.json``, one at a time; stop on a conflict; done: the merge folder goes."""
    state = merge_state(co)
    todo = json.loads((state / "todo.json").read_bytes())
    while todo["todo"]:
        commit = todo["todo"][0]
        todo["head"] = co.head()
        atomic_write(state / "todo.json", json.dumps(todo).encode())
        picked = co.cherry_pick(commit)
        if picked.status == "conflict":
            subject = CommitMeta.for_commit(co.repo.commit_info(commit)).subject
            return MergeResult(component, co.path, "stopped", todo["replayed"], len(todo["todo"]) - 1, commit, subject, picked.files)
        if picked.status == "failed":
            raise CheckoutError(
                f"{co.path}: git cherry-pick {commit[:12]} failed",
                details=[*picked.error[-6:], "fix the checkout, then --continue (or --abort)"],
            )
        if picked.status == "empty":
            co.skip_pick()  # the repository's series holds that change already
        else:
            todo["replayed"] += 1
        todo["todo"].pop(0)
        todo["head"] = None
        atomic_write(state / "todo.json", json.dumps(todo).encode())
    shutil.rmtree(state)
    return MergeResult(component, co.path, "merged", todo["replayed"])


def _merge_checkout(project: Project, component: Component, path: Path | None, aborting: bool = False) -> Checkout:
    """The checkout of the merge under way; one an interrupted ``--merge`` left half refreshed can only be aborted."""
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    if co is None or not merge_state(co).is_dir():
        raise CheckoutError(
            f"{show_path(project, target)}: no `zmr checkout --merge` in progress",
            details=[f"start one with `zmr checkout {component.model} -c {component.key} --merge`"],
        )
    check_identity(co, component)
    if co.half_refreshed and not aborting:
        raise CheckoutError(
            f"{co.path}: `zmr checkout --merge` was interrupted while it refreshed the checkout",
            details=[f"undo it with `zmr checkout {component.model} -c {component.key} --abort`, then --merge again"],
        )
    return co


@locked
def merge_continue(project: Project, component: Component, path: Path | None = None) -> MergeResult:
    """``--continue``: commit the engineer's resolution of the commit that stopped, replay the rest."""
    co = _merge_checkout(project, component, path)
    where = show_path(project, co.path)
    state = merge_state(co)
    todo = json.loads((state / "todo.json").read_bytes())
    if co.pick_in_progress():
        files = co.unmerged_paths()
        if files:
            raise CheckoutError(f"{where}: conflicts in {', '.join(files)} are not resolved yet", details=["edit the files, `git add` them, then --continue"])
        marked = co.conflict_marked(co.staged_paths())
        if marked:
            raise CheckoutError(f"{where}: conflict markers left in {', '.join(marked)}", details=["remove them, `git add` the files, then --continue again"])
        if co.unstaged_paths():
            raise CheckoutError(f"{where}: changes not staged", details=["`git add` them (or `git checkout -- FILE`), then --continue again"])
        if co.index_matches_head():
            co.skip_pick()  # resolved to nothing: the repository's series has it
        else:
            co.commit_as(todo["todo"][0])
            todo["replayed"] += 1
        todo["todo"].pop(0)
    elif dirty(co, untracked_files=False):
        problems = dirty(co, untracked_files=False)
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or drop the changes, then --continue"])
    elif todo["todo"] and todo["head"] is not None and co.head() != todo["head"]:
        todo["todo"].pop(0)  # the engineer committed the resolution (git cherry-pick --continue)
        todo["replayed"] += 1
    todo["head"] = None
    atomic_write(state / "todo.json", json.dumps(todo).encode())
    return _replay_mine(component, co)


@locked
def merge_abort(project: Project, component: Component, path: Path | None = None) -> MergeResult:
    """``--abort``: the checkout back as the merge found it (branch, refs, config, tree)."""
    co = _merge_checkout(project, component, path, aborting=True)
    state = merge_state(co)
    saved = SavedCheckout.from_json(json.loads((state / "saved.json").read_bytes()))
    restore(saved, state)
    shutil.rmtree(state)
    return MergeResult(component, co.path, "aborted")


def _has_markers(path: Path) -> bool:
    try:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    except OSError:
        return False
    return any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in data.split(b"\n"))


# -- export ---------------------------------------------------------------------------------


def show_path(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)
