"""What zmr knows about a component's checkout: which folder it is, its pointer and token, and whether it equals the series.

``checkout_path`` is the checkout-selection rule (docs/reference.md §8.1):
``--dir``, the checkout the current folder is in, the one known checkout
(``work/<model>/<component>`` or the remembered ``--dir``). A remembered
``--dir`` (``Project.checkout_pointer``) is trusted only while the folder
carries the token zmr recorded with it. ``series_fingerprint`` names the
series a checkout was made from; ``sync_state`` says whether its commits
equal the series, and which work exporting would save.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from zmr.infra import git
from zmr.infra.cache import UPSTREAM_REFS, Cache
from zmr.infra.errors import ZmrError
from zmr.infra.state import POINTER
from zmr.infra.wording import counted, verb
from zmr.model.manifest import Component
from zmr.model.patchfile import CommitMeta
from zmr.model.project import Project
from zmr.model.series import Series
from zmr.ops.checkout.worktree import SERIES_KEY, Checkout, CheckoutError, check_identity, check_not_half_refreshed, open_checkout, try_open
from zmr.ops.patchplan import list_commits, plan_export


@dataclass(frozen=True)
class Pointer:
    """The remembered ``--dir`` of a component's checkout (``Project.checkout_pointer``): its folder and its ``zmr.token``."""

    path: Path
    token: str


def read_pointer(project: Project, component: Component) -> Pointer | None:
    """The remembered ``--dir``; None when there is none. One that is not what zmr writes (damaged, too big, no absolute
    path or no token) is refused (``zmr.infra.state.POINTER``: the file and what to do)."""
    file = project.checkout_pointer(component)
    data = POINTER.load(file)
    if data is None:
        return None
    if not isinstance(data.get("path"), str) or not isinstance(data.get("token"), str) or not data["token"] or not Path(data["path"]).is_absolute():
        raise POINTER.refused(file, "not an absolute path and a token, as zmr writes")
    return Pointer(Path(data["path"]), data["token"])


def write_pointer(project: Project, component: Component, co: Checkout) -> None:
    POINTER.save(project.checkout_pointer(component), {"path": str(co.path), "token": co.ensure_token()})


def forget_pointer(project: Project, component: Component) -> None:
    project.checkout_pointer(component).unlink(missing_ok=True)


def remembered_checkout(project: Project, component: Component) -> Checkout | None:
    """The checkout made with ``--dir``, when it is still there, of *component*, and carries the token zmr recorded for it."""
    pointer = read_pointer(project, component)
    if pointer is None:
        return None
    co = try_open(pointer.path)
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
        if same_folder(here, default) or (remembered is not None and same_folder(here, remembered.path)):
            return here
        raise CheckoutError(
            f"{here}: is a checkout of {component.label} that this repository does not know (neither {show_path(project, default)} nor its remembered --dir)",
            details=[
                f"use it by naming it: `--dir {here}`",
                f"or run the command outside it (the known checkout is {remembered.path if remembered else show_path(project, default)})",
            ],
        )
    at_default = try_open(default) is not None
    if remembered is not None and not same_folder(remembered.path, default):
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
    top = git.Repo.at(os.getcwd()).absolute_toplevel()
    if top is None:
        return None
    if same_folder(top, project.root):
        return None
    co = try_open(top)
    if co is None or (co.model, co.component) != (component.model, component.key):
        return None
    return co.path


def checkout_of(path: Path, component: Component) -> Checkout | None:
    """The zmr checkout of *component* at *path*, a real folder; None for anything else (``zmr.ops.legacy`` checks what an older zmr wrote)."""
    co = try_open(path)
    return co if co is not None and (co.model, co.component) == (component.model, component.key) else None


def same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


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


def show_path(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)


def clear_stale_locks(project: Project, co: Checkout) -> list[str]:
    """The lock files zmr's own git, killed in *co*, left there (``Checkout.remove_stale_locks``) removed; what to say of it.

    Only for a caller that knows every git of that checkout since was zmr's (a
    refresh or a replay that handed nothing to the engineer, under zmr's lock
    of the component): a lock file is otherwise a git at work.
    """
    removed = co.remove_stale_locks()
    if not removed:
        return []
    return [f"undone now: the lock{'s' if len(removed) != 1 else ''} {', '.join(removed)} that zmr's killed git left in {show_path(project, co.path)}"]


def finish_refresh_locks(project: Project, co: Checkout) -> None:
    """Before a checkout is refreshed: when a refresh was killed there (its marker left, ``Checkout.half_refreshed``), the lock
    files its git left (``shallow.lock`` of the fetch, ``index.lock`` of the reset) are removed and said (``Project.notices``):
    every git of the rerun stopped on them."""
    if co.half_refreshed:
        project.notices.extend(clear_stale_locks(project, co))


def keep_out_of_status(project: Project, target: Path) -> None:
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
        return False, [] if fresh else [f"{counted(count, 'commit')} on the old pin {co.pin[:12]} (the manifest now pins {component.commit[:12]})"]
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
    theirs = f"{counted(len(found), 'commit')} between zmr/base and HEAD {verb(len(found), 'is', 'are')} upstream's"
    return CheckoutError(
        f"{show_path(project, co.path)}: {theirs} ({found[0][:12]} {subject}" + (", ..." if len(found) > 1 else "") + ")",
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


def series_moved(project: Project, component: Component, co: Checkout) -> list[str] | None:
    """What changed in the repository's series since *co* was made or last exported (a colleague's change, pulled): the
    names of the patches its commits differ in (changed, added or removed), or None when the series did not move.

    Told by the fingerprint the checkout recorded (``series_fingerprint``, the "three sides" of export); a checkout
    made before zmr recorded one cannot tell: None. A pin moved under the checkout is a move of the series too: its
    patches are then named all (each commit is another one). The difference is read from the last exported tip
    (``refs/zmr/exported``), so the checkout's own newer commits never count as the repository's change.
    """
    recorded = co.config.get(SERIES_KEY)
    series = project.series(component)
    if recorded is None or recorded == series_fingerprint(project, component, component.commit, series):
        return None
    exported, base = co.exported(), co.base()
    if co.pin != component.commit or exported is None or base is None or not co.repo.is_ancestor(base, exported):
        return [p.name for p in series.patches]
    try:
        commits = list_commits(co.repo, base, exported, component.label)
        plan = plan_export(co.repo, base, commits, project.root / component.patches, component.patches, series=series)
    except ZmrError:
        return [p.name for p in series.patches]
    changed = [p.old_name or p.name for p in plan.patches if p.data is not None or p.status != "unchanged"]
    return sorted({*changed, *plan.removed})


def rewritten_advice(component: Component, co: Checkout) -> list[str]:
    """What to do with commits that rewrite exported ones (amend, rebase -i) when the repository's series or pin moved
    too, so that zmr cannot tell which are new: each step names the checkout, so it works from any folder, and the
    change is redone in the commit it changes (a commit picked on top keeps the subject of the one it rewrote, and
    export would write it as a new patch beside the old one, issue #47). The old base is named by its id: ``--force``
    moves ``zmr/base`` when the pin moved."""
    import shlex

    m, k = component.model, component.key
    there = f"git -C {shlex.quote(str(co.path))}"
    old_base = (co.base() or "zmr/base")[:12]
    return [
        "your commits since the last export rewrite earlier ones (amend, rebase -i): zmr cannot tell which are new",
        f"save them on a branch of the checkout: `{there} branch keep`; take the repository's series: `zmr checkout {m} -c {k} --force` (keep stays)",
        "then redo each change in the commit it changes, not as a new commit on top (that would export as a new patch):"
        f" `{there} range-diff --creation-factor=100 {old_base}..keep zmr/base..HEAD` shows, commit by commit, what yours change;"
        f" amend that commit (`{there} rebase -i zmr/base`, mark it `edit`), then `zmr export {m} -c {k}`",
    ]
