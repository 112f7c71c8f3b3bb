"""Checkouts: a git working tree per component where engineers change a series.

``zmr checkout`` turns a series into commits and ``zmr export`` turns commits
back into a series; both commands live here, on top of ``zmr.replay``
(series → commits) and ``zmr.export`` (commits → series, planned and written).
``zmr.export`` knows nothing of checkouts, so that checkout (is there
unexported work?), export and rebase all plan with it and no import goes
in a circle::

    series ──build_chain (zmr.replay: a temp index in the mirror, one fast-import)──▶ chain of commits
           ──(local fetch: objects copied, never borrowed)──▶ checkout: branch <model>/<component>
    checkout ──(rev-list zmr/base..HEAD)──▶ zmr.export.plan_export ──▶ write_plan ──▶ series

Where state is kept, inside the checkout's ``.git``:

- config ``zmr.model``, ``zmr.component``, ``zmr.pin``, ``zmr.branch``,
  ``zmr.project``, ``zmr.upstream``: what the checkout is of;
- ``refs/zmr/base``: the pinned upstream commit (``git log zmr/base..``
  shows exactly the series);
- ``refs/zmr/exported``: the last tip known to equal the series (set by
  checkout, export and rebase: ``mark_exported``); a HEAD elsewhere may hold
  unexported work;
- ``refs/zmr/backup/<time>[-worktree]``: what ``--force`` discarded;
- remote ``upstream``: the component's upstream (history on demand: ``--history``);
- ``zmr-refresh``: present only while a refresh runs, so an interrupted one
  is finished by the next ``zmr checkout`` instead of being taken for work
  (``Checkout.half_refreshed``).

A checkout made with ``--dir`` is remembered in the zmr repository
(``Project.checkout_pointer``). ``zmr rebase`` changes a checkout only
through ``place``, ``mark_exported``, ``snapshot`` and ``restore``.
State and commands: docs/reference.md §8.1, §7.6, §7.7.
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zmr import git
from zmr.cache import Cache, Mirror, resolve_upstream
from zmr.errors import ZmrError
from zmr.export import ExportPlan, list_commits, plan_export, write_plan
from zmr.files import atomic_write, current_umask
from zmr.manifest import Component
from zmr.patchfile import CommitMeta
from zmr.project import Project
from zmr.replay import TempIndex, build_chain
from zmr.series import read_series

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
    pointer = project.checkout_pointer(component)
    if pointer.is_file():
        text = pointer.read_text().strip()
        if text:
            return Path(text)
    return project.default_checkout(component)


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
    moved = None if fresh else _upstream_commits_problem(project, component, co, base, head)
    if moved is not None:
        return False, [moved.message]
    try:
        commits = list_commits(co.repo, base, head, component.label)
        plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches)
    except ZmrError as err:
        return False, [] if fresh else [err.message]
    if not plan.changed:
        return True, []
    return False, [] if fresh else ["commits not exported: " + "; ".join(plan.summary())]


# Refs of a mirror that name upstream's history (zmr.cache); refs/zmr/chains/ and patch-ids/ hold zmr's own commits.
_MIRROR_UPSTREAM_REFS = ("refs/zmr/pins/", "refs/zmr/partial/", "refs/zmr/heads/", "refs/zmr/tags/", "refs/zmr/track/")


def upstream_commits_in(project: Project, component: Component, co: Checkout, base: str, head: str) -> list[str]:
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
    url = resolve_upstream(component.upstream, project.root)
    urls = {_same_url(url), _same_url(component.upstream)}
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
    mirror = Cache().mirror_for(url).path
    candidates = [c for c in commits if c in own]
    if candidates and mirror.is_dir():
        repo = git.Repo(mirror)
        missing = set(repo.missing_objects(candidates))
        present = [c for c in candidates if c not in missing]
        if present and any(ref.startswith(_MIRROR_UPSTREAM_REFS) for ref in repo.refs("refs/zmr/")):
            unreached = set(repo.rev_list(["--not", *(f"--glob={prefix}*" for prefix in _MIRROR_UPSTREAM_REFS)], stdin=present))
            foreign |= set(present) - unreached
    return [c for c in commits if c in foreign]


def _same_url(url: str) -> str:
    """*url* as compared with the upstream's: no trailing slash or ``.git``."""
    return url.strip().rstrip("/").removesuffix(".git")


def _upstream_commits_problem(project: Project, component: Component, co: Checkout, base: str, head: str) -> CheckoutError | None:
    """An error when base..head holds upstream's commits (the branch was rebased with git, not with ``zmr rebase``)."""
    found = upstream_commits_in(project, component, co, base, head)
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


def _refuse_during_rebase(project: Project, component: Component, what: str) -> None:
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
    result = _checkout(project, component, cache or Cache(), path, force, progress)
    co = open_checkout(result.path)
    assert co is not None
    url = resolve_upstream(component.upstream, project.root)
    ensure_upstream_remote(co, url)
    if history:
        if progress:
            progress(f"{component.label}: fetching upstream's history")
        add_history(co, (cache or Cache()).ensure_history(url, display=f"{component.label} ({component.upstream})"))
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
    refspecs = [f"+refs/zmr/heads/*:refs/remotes/{UPSTREAM_REMOTE}/*", "+refs/zmr/tags/*:refs/tags/*"]
    co.repo.fetch(str(mirror.path), refspecs, extra=[*shallow, "--update-shallow"])


def _checkout(project: Project, component: Component, cache: Cache, path: Path | None, force: bool, progress: Progress | None) -> CheckoutResult:
    _refuse_during_rebase(project, component, "a checkout")
    target = checkout_path(project, component, path)
    co = open_checkout(target)
    in_sync = False
    if co is not None:
        check_identity(co, component)
        if not co.half_refreshed:
            problems = dirty(co)
            in_sync, work = sync_state(project, component, co)
            problems += work
            if problems and not force:
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
                mark_exported(co, head, "zmr checkout")
                if path is not None:
                    atomic_write(project.checkout_pointer(component), (str(target) + "\n").encode())
                count = len(co.repo.commits_between(component.commit, head))
                return CheckoutResult(component, target, co.branch, component.commit, head, count, "unchanged")
    series = read_series(project.root / component.patches, component.patches, origin=component.patches_origin)
    if progress:
        progress(f"{component.label}: fetching {component.commit[:12]}")
    mirror = cache.ensure(resolve_upstream(component.upstream, project.root), [component.commit], display=f"{component.label} ({component.upstream})")
    if progress:
        progress(f"{component.label}: committing {len(series.patches)} patches")
    chain = build_chain(mirror.repo, component, component.commit, series.patches, progress=progress)
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
        atomic_write(project.checkout_pointer(component), (str(target) + "\n").encode())
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
        repo.fetch(str(source), wanted, depth=depth, extra=["--update-shallow"])


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


def mark_exported(co: Checkout, tip: str, reason: str) -> None:
    """Record that *tip* equals the series (``refs/zmr/exported``): a HEAD there holds no unexported work."""
    old = co.exported()
    if old != tip:
        co.repo.update_refs([git.RefUpdate(EXPORTED_REF, tip, old)], reason)


def place(project: Project, component: Component, path: Path, source: Path, base: str, tip: str, extra_objects: Sequence[str] = ()) -> Checkout:
    """The checkout at *path* made the branch of *component* at *tip*, pinned at *base*.

    Created when nothing is there, else refreshed (its tree reset to *tip*,
    untracked files kept). *source* is the mirror holding the commits;
    *extra_objects* are more commits to copy in (for a later cherry-pick).
    """
    branch = branch_name(component)
    config = config_values(project, component, branch)
    config["zmr.pin"] = base
    co = open_checkout(path)
    if co is None:
        create_checkout(path, source, branch, base, tip, config, extra=extra_objects)
        co = open_checkout(path)
        assert co is not None
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
    When not, nothing was at *path*: all that is there later is to be removed.
    """

    path: Path
    existed: bool
    head: str = ""
    head_symbolic: bool = False
    refs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        data: dict = {"path": str(self.path), "existed": self.existed}
        if self.existed:
            data.update(head=self.head, head_symbolic=self.head_symbolic, refs=dict(self.refs))
        return data

    @classmethod
    def from_json(cls, data: dict) -> SavedCheckout:
        return cls(Path(data["path"]), bool(data["existed"]), data.get("head", ""), bool(data.get("head_symbolic")), dict(data.get("refs", {})))


def snapshot(co: Checkout | None, path: Path, into: Path) -> SavedCheckout:
    """Save what ``restore`` needs to undo anything done to the checkout *co* at *path* (None: nothing there); files go into *into*."""
    if co is None:
        return SavedCheckout(path, False)
    shutil.copyfile(co.git_dir / "config", into / _CONFIG_COPY)
    symref = co.repo.run(["symbolic-ref", "--quiet", "HEAD"], check=False)
    head = symref.stdout.decode().strip() if symref.returncode == 0 else (co.head() or "")
    return SavedCheckout(path, True, head, symref.returncode == 0, co.repo.refs("refs/"))


def restore(saved: SavedCheckout, folder: Path) -> bool:
    """Put the checkout back as *saved* (files from *folder*): config, refs, HEAD and tree; False when it is gone.

    A checkout that did not exist is removed, half made or not. One that did
    gets its operations in progress quit, its config and refs back (refs the
    snapshot did not have deleted), HEAD back and its tree reset to HEAD.
    """
    path = saved.path
    if not saved.existed:
        if path.exists():
            shutil.rmtree(path)
        _remove_half_made(path)
        return True
    co = open_checkout(path) if path.exists() else None
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
        raise CheckoutError(
            f"{where}: the base moved: the checkout is on {(base or co.pin)[:12]}, the manifest pins {component.commit[:12]}",
            details=[
                "the series belongs to the new pin now; exporting would write patches made for the old one",
                f"save your commits (git branch keep), then `zmr checkout {component.model} -c {component.key} --force` and cherry-pick them",
            ],
        )
    if head is None or not co.repo.ok(["merge-base", "--is-ancestor", base, head]):
        raise CheckoutError(
            f"{where}: HEAD is not on top of zmr/base ({base[:12]})",
            details=[
                "rebase your branch onto zmr/base (git rebase zmr/base), then export again",
                f"to move the series to another upstream commit, use `zmr rebase {component.model} -c {component.key} --onto REV`",
            ],
        )
    moved = _upstream_commits_problem(project, component, co, base, head)
    if moved is not None:
        raise moved
    problems = dirty(co, untracked_files=False)
    if problems:
        raise CheckoutError(f"{where}: the working tree is not clean", details=[*problems, "commit or stash the changes, then export again"])
    commits = list_commits(co.repo, base, head, component.label)
    journal = project.pending_removals(component)
    plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches, journal)
    if not dry_run:
        if plan.needs_writing:
            write_plan(plan, journal)
        mark_exported(co, head, "zmr export")
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
