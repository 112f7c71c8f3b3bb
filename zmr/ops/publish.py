"""Publishing release branches (``zmr publish``) and the CI job matrix (``zmr ci-matrix``).

Publish pipeline::

    verify (rebuild in memory, compare with the local branches)   refuse on any drift
      ──▶ ls-remote (what the remote has now)
      ──▶ lease check per branch                                   refuse a branch someone else moved
      ──▶ one `git push --atomic --porcelain` with
          --force-with-lease=refs/heads/<b>:<remote value>   (or `<b>:`: must not exist)
          <verified commit>:refs/heads/<b>                  for every branch

The push names the verified commit ids, never the local branch names, so a
branch moved after verification cannot slip in. ``--atomic``: the remote
moves every branch or none (a hook refusing one ref refuses them all).

Lease. Release branches are rewritten on every change (a new root commit),
so the push is forced; the lease makes it safe. A remote branch may be
overwritten only when it holds what this repository last saw there (its
remote-tracking ref, which a successful push updates), or -- when there is
no such ref, as in a fresh CI clone -- a release commit zmr made for the
same model and component (checked on its trailers and layout after fetching
it). Anything else is somebody's work: publish refuses, naming the branch,
and moves nothing.

Foreign tips. A remote branch whose tip zmr did not build (a hand-made
release branch of a repository adopting zmr, a commit added on top;
``zmr.model.provenance``) is replaced only with ``--replace-foreign``, even when
this repository has seen it: the push rewrites its history. Its old tip
stays on the remote as ``refs/zmr/replaced/<branch>/<old-id>``, created in
the same atomic push (``--force-with-lease=<ref>:``: it must not exist).
What publish compares is fetched by id without touching remote-tracking
refs, so a single-branch clone (CI) works the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from zmr.infra import git
from zmr.infra.errors import CheckFailed, ZmrError
from zmr.infra.git import Progress
from zmr.infra.reports import Report

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra.cache import Cache
    from zmr.model.manifest import Component, Manifest, SmokeTest
    from zmr.model.project import Project


CREATED, UPDATED, REPLACED, UP_TO_DATE = "created", "updated", "replaced", "up to date"
_PORCELAIN_RE = re.compile(r"^([ +\-*!=])\t([^\t]*):([^\t]+)\t(.*)$")


class BranchPushJson(TypedDict):
    """A release branch: on the remote before (*old*, null: absent) and what publish sends (*new*); its status
    (created, updated, replaced, up to date); why the remote tip is not a release zmr built, the ref that keeps it
    (--replace-foreign), and why this branch stops the push (each null: none)."""

    model: str
    component: str
    branch: str
    old: str | None
    new: str
    status: str
    not_built_by_zmr: str | None
    old_tip_kept_as: str | None
    refused: str | None


class PublishJson(TypedDict):
    """The remote, whether this was a dry run and whether anything was pushed, why the publish refuses (null: it does
    not; one atomic push, so no branch moves while one refuses), every branch."""

    remote: str
    dry_run: bool
    pushed: bool
    refused: str | None
    branches: list[BranchPushJson]


@dataclass
class BranchPush:
    """One release branch: what the remote had and what publish sends."""

    component: Component
    new: str
    old: str | None  # on the remote before; None: absent
    foreign: str = ""  # why the remote tip is not a release zmr built ('' when it is, or absent)
    keep: str | None = None  # --replace-foreign: the ref that keeps the old tip on the remote
    refused: str = ""  # why this branch stops the push ('' when it does not)

    @property
    def branch(self) -> str:
        return self.component.branch

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.component.branch}"

    @property
    def status(self) -> str:
        if self.old is None:
            return CREATED
        if self.old == self.new:
            return UP_TO_DATE
        return REPLACED if self.foreign else UPDATED

    def to_json(self) -> BranchPushJson:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "branch": self.branch,
            "old": self.old,
            "new": self.new,
            "status": self.status,
            "not_built_by_zmr": self.foreign or None,
            "old_tip_kept_as": self.keep,
            "refused": self.refused or None,
        }


@dataclass
class PublishResult(Report):
    remote: str
    dry_run: bool
    branches: list[BranchPush] = field(default_factory=list)
    pushed: bool = False
    refusal: CheckFailed | None = None  # dry run: why the real publish would refuse (raised otherwise)

    @property
    def moving(self) -> list[BranchPush]:
        return [b for b in self.branches if b.status != UP_TO_DATE]

    def failed(self) -> bool:
        """The publish refused (a dry run: would refuse); the CLI raises *refusal*, with its details."""
        return self.refusal is not None

    def reason(self) -> str:
        return self.refusal.message if self.refusal else ""

    def to_json(self) -> PublishJson:
        return {
            "remote": self.remote,
            "dry_run": self.dry_run,
            "pushed": self.pushed,
            "refused": self.refusal.message if self.refusal else None,
            "branches": [b.to_json() for b in self.branches],
        }


def publish(
    project: "Project",
    components: Sequence["Component"],
    remote: str = "origin",
    *,
    dry_run: bool = False,
    replace_foreign: bool = False,
    cache: "Cache | None" = None,
    progress: Progress | None = None,
) -> PublishResult:
    """Verify, check the leases, then push every branch in one atomic push (or, dry run, nothing).

    A dry run returns the plan with ``refusal`` set where the real run would
    raise it, so the plan can be shown either way.
    """
    from zmr.ops.verify import verify

    if not remote.strip() or remote.startswith("-") or any(ord(c) < 32 for c in remote):
        raise ZmrError(f"--remote {remote!r} is not a remote name or URL", details=["name a remote of `git remote -v`, e.g. origin"])
    repo = project.repo
    if git.missing_remote(repo, remote):
        raise ZmrError(f"no remote {remote!r}: `git remote add {remote} URL` or `--remote`", details=["`git remote -v` lists this repository's remotes"])
    repo.check_remote(remote)  # fd::0 would hang, ext:: run a command: refused before any work
    results = verify(project, components, cache=cache, progress=progress)
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise CheckFailed(
            f"refusing to publish: {', '.join(r.branch for r in bad)} do{'es' if len(bad) == 1 else ''} not rebuild to the same commit ids",
            details=[f"{r.status} {r.branch}: {'; '.join(r.reasons)}" for r in bad]
            + ["nothing was pushed; run `zmr build` (and look at what changed), then publish again"],
        )
    if progress:
        progress(f"reading {remote}")
    remote_refs = repo.ls_remote(remote, [f"refs/heads/{r.branch}" for r in results])
    plan = [BranchPush(r.component, r.expected, remote_refs.get(f"refs/heads/{r.branch}")) for r in results]
    outcome = PublishResult(remote, dry_run, plan)
    try:
        _check_leases(repo, remote, plan, progress)
        _check_foreign(repo, remote, plan, replace_foreign)
    except CheckFailed as err:
        if not dry_run:
            raise
        outcome.refusal = err
    if dry_run or not outcome.moving:
        return outcome
    if progress:
        progress(f"pushing {len(outcome.moving)} branch{'es' if len(outcome.moving) != 1 else ''} to {remote}")
    _push(repo, remote, plan)
    outcome.pushed = True
    return outcome


def _check_leases(repo: git.Repo, remote: str, plan: Sequence[BranchPush], progress: Progress | None) -> None:
    """Refuse to overwrite a remote branch that holds something this repository has not seen."""
    specs = fetch_refspecs(repo, remote)
    refused: list[str] = []
    for item in plan:
        if item.old is None or item.old == item.new:
            continue
        seen_ref = tracking_ref(specs, item.ref)
        seen = repo.ref_value(seen_ref) if seen_ref is not None else None
        if seen is not None and seen != item.old:
            item.refused = f"{remote} has {item.old[:12]}, but this repository last saw {seen[:12]} there ({seen_ref}); someone else pushed to it"
            refused.append(f"{item.branch}: {item.refused}")
            continue
        if progress:
            progress(f"inspecting {item.branch} on {remote}")
        item.foreign = _not_a_release(repo, remote, item)
        if item.foreign and seen is None:
            # Never seen here, and not zmr's: it may be anybody's; --replace-foreign takes it all the same.
            item.foreign += "; someone else pushed to it"
    if refused:
        raise CheckFailed(
            f"refusing to publish: {len(refused)} branch{'es' if len(refused) != 1 else ''} on {remote} changed behind zmr's back",
            details=refused
            + [
                "nothing was pushed; look at the remote branch (git fetch " + remote + "), and when it may be replaced,",
                "update the remote-tracking ref to it (git fetch " + remote + ") and publish again",
            ],
        )


def _check_foreign(repo: git.Repo, remote: str, plan: Sequence[BranchPush], replace_foreign: bool) -> None:
    """Refuse to replace tips zmr did not build, unless asked; when asked, name the refs that keep them."""
    from zmr.model.provenance import replaced_ref

    foreign = [item for item in plan if item.foreign and item.old is not None and item.old != item.new]
    if not foreign:
        return
    if not replace_foreign:
        for item in foreign:
            item.refused = f"not built by zmr ({item.foreign}); needs --replace-foreign"
        raise CheckFailed(
            f"refusing to publish: {len(foreign)} branch{'es' if len(foreign) != 1 else ''} on {remote} "
            f"hold{'s' if len(foreign) == 1 else ''} commits zmr did not build: " + ", ".join(item.branch for item in foreign),
            details=[f"{item.branch}: {remote} has {item.old[:12]}, which {item.foreign}" for item in foreign if item.old]
            + [
                "publishing replaces them with the zmr release commits (their history is rewritten); nothing was pushed",
                f"look first: git fetch {remote} {foreign[0].branch} && git log FETCH_HEAD",
                f"then: zmr publish --replace-foreign (add --dry-run to see the plan); the old tips stay on {remote} as refs/zmr/replaced/<branch>/<old-id>",
            ],
        )
    kept = repo.ls_remote(remote, [replaced_ref(item.branch, item.old) for item in foreign if item.old])
    for item in foreign:
        assert item.old is not None
        ref = replaced_ref(item.branch, item.old)
        if ref not in kept:  # kept by an earlier publish already: nothing to add
            item.keep = ref


def fetch_refspecs(repo: git.Repo, remote: str) -> list[tuple[str, str]]:
    """(src, dst) of ``remote.<remote>.fetch``; empty for a URL or an unknown remote."""
    specs = [spec for value in repo.config_get_all(f"remote.{remote}.fetch") for spec in value.split()]
    return [tuple(spec.lstrip("+").split(":", 1)) for spec in specs if ":" in spec and not spec.startswith("^")]  # type: ignore[misc]


def tracking_ref(specs: Sequence[tuple[str, str]], ref: str) -> str | None:
    """The remote-tracking ref *ref* maps to under *specs* (exact or one-'*' refspecs)."""
    for src, dst in specs:
        if src.count("*") == 1 and dst.count("*") == 1:
            head, tail = src.split("*")
            if ref.startswith(head) and ref.endswith(tail) and len(ref) > len(head) + len(tail):
                return dst.replace("*", ref[len(head) : len(ref) - len(tail)])
        elif "*" not in src and src == ref and "*" not in dst:
            return dst
    return None


def _not_a_release(repo: git.Repo, remote: str, item: BranchPush) -> str:
    """'' when *item.old* is a release commit zmr built for the same model and component, else why not."""
    from zmr.model.provenance import not_built_by_zmr

    oid = item.old
    assert oid is not None
    if not repo.has_object(oid, "commit"):
        # --refmap= : do not touch remote-tracking refs (that would accept the commit as seen).
        repo.fetch(remote, [item.ref], extra=["--refmap="])
        if not repo.has_object(oid, "commit"):
            return "changed again while zmr was looking at it"
    return not_built_by_zmr(repo, oid, item.component.model, item.component.key)


def _push(repo: git.Repo, remote: str, plan: Sequence[BranchPush]) -> None:
    args = ["--atomic", "--porcelain", "--no-verify", "--no-recurse-submodules"]
    for item in plan:
        args.append(f"--force-with-lease={item.ref}:{item.old or ''}")
    keeps = [item for item in plan if item.keep]
    args += [f"--force-with-lease={item.keep}:" for item in keeps]
    args += ["--end-of-options", remote]
    args += [f"{item.new}:{item.ref}" for item in plan]
    args += [f"{item.old}:{item.keep}" for item in keeps]
    proc = repo.push(args)
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    statuses: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        match = _PORCELAIN_RE.match(line)
        if match:
            statuses[match.group(3)] = (match.group(1), match.group(4))
    rejected = [(item, statuses.get(item.ref, ("?", "no status reported"))) for item in plan]
    rejected += [(item, statuses.get(item.keep, ("?", "no status reported"))) for item in keeps if item.keep]
    rejected = [(item, st) for item, st in rejected if st[0] in "!?"]
    if proc.returncode != 0 or rejected:
        details = [f"{item.branch}: {summary}" for item, (_, summary) in rejected]
        details += [f"git: {line}" for line in err.strip().splitlines()[-8:]]
        details.append("the push was atomic: no branch moved on " + remote)
        lease = any("stale info" in summary for _, (_, summary) in rejected)
        if lease:
            details.append(f"a branch on {remote} changed while publishing; run `zmr publish` again to look at it")
        raise CheckFailed(f"{remote} refused the push of {', '.join(item.branch for item, _ in rejected) or 'the release branches'}", details=details)


# -- the weekly pull request's branch -------------------------------------------------------

UPDATE_SUBJECT = "zmr update: move "  # the subject of the commit the weekly job makes (action.yml's pull-request step)
REFUSED = "refused"


@dataclass
class UpdateBranchPush:
    """The branch of the weekly pull request (``zmr/update/<model>/<component>``): pushed, or left alone and why.

    *foreign*: the commits the remote branch holds (past the commit the new one is made on) that zmr's weekly job did
    not make, as (id, subject, committer): a colleague's fix on the pull request is never pushed over.
    """

    branch: str
    old: str | None
    new: str
    status: str  # created | updated | up to date | refused
    foreign: list[tuple[str, str, str]] = field(default_factory=list)

    def message(self, remote: str) -> str:
        if self.status != REFUSED:
            return f"{self.branch}: {self.status} on {remote}"
        named = "; ".join(f"{oid[:12]} {subject} ({who})" for oid, subject, who in self.foreign[:5])
        more = f" and {len(self.foreign) - 5} more" if len(self.foreign) > 5 else ""
        return (
            f"{self.branch} on {remote} has commits zmr did not make: {named}{more}; the branch and its pull request are left"
            f" alone (once the pull request is merged, or the branch deleted, the next run pushes again)"
        )


def push_update_branch(repo: git.Repo, remote: str, branch: str, commit: str, base: str, identity: str) -> UpdateBranchPush:
    """Push *commit* (one commit of the weekly job on *base*) to *branch* of *remote*, replacing only what the job made.

    The remote branch's commits past *base* must all be the job's own (its subject, author and committer *identity*, an
    email); then the push replaces them with a lease on the tip just read (``--force-with-lease=<ref>:<tip>``: a push
    made meanwhile refuses it). Anything else is somebody's work: nothing is pushed, and the result says whose.
    """
    ref = f"refs/heads/{branch}"
    old = repo.ls_remote(remote, [ref]).get(ref)
    if old == commit:
        return UpdateBranchPush(branch, old, commit, UP_TO_DATE)
    if old is not None:
        if not repo.has_object(old, "commit"):
            repo.fetch(remote, [ref], extra=["--refmap="])  # by name, touching no remote-tracking ref
        if not repo.has_object(old, "commit"):
            raise CheckFailed(f"{branch} on {remote} changed while zmr read it", details=["run the job again"])
        foreign = _not_the_jobs(repo, repo.commits_between(base, old), identity)
        if foreign:
            return UpdateBranchPush(branch, old, commit, REFUSED, foreign)
    lease = f"--force-with-lease={ref}:{old or ''}"  # `<ref>:` when absent: it must not exist
    proc = repo.push(["--porcelain", "--no-verify", "--no-recurse-submodules", lease, "--end-of-options", remote, f"{commit}:{ref}"])
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-6:]
        raise CheckFailed(
            f"{remote} refused the push of {branch}",
            details=[f"git: {line}" for line in err] + ["someone may have pushed to it meanwhile: run the job again, which looks at it first"],
        )
    return UpdateBranchPush(branch, old, commit, CREATED if old is None else UPDATED)


def _not_the_jobs(repo: git.Repo, commits: Sequence[str], identity: str) -> list[tuple[str, str, str]]:
    """Those of *commits* the weekly job did not make: (id, subject, committer)."""
    found = []
    for oid, obj in zip(commits, repo.cat_file_batch(list(commits)) if commits else []):
        info = git.CommitInfo.parse(oid, obj.content) if obj is not None else None
        subject = info.message.split("\n", 1)[0] if info else ""
        emails = {_email(info.author), _email(info.committer)} if info else set()
        if info is None or emails != {identity} or not subject.startswith(UPDATE_SUBJECT):
            found.append((oid, subject, info.committer.rsplit(">", 1)[0] + ">" if info else "?"))
    return found


def _email(person: str) -> str:
    """The email of a commit's ``Name <email> time zone`` line."""
    start, end = person.rfind("<"), person.rfind(">")
    return person[start + 1 : end] if 0 <= start < end else ""


# -- CI matrix -------------------------------------------------------------------------------


def needs_gpu(test: SmokeTest) -> bool:
    """A test needs a GPU when it asks for a positive ``GPU`` resource."""
    return any(name.upper() == "GPU" and amount > 0 for name, amount in test.resources)


@dataclass(frozen=True)
class CiMatrix:
    """The CI job matrix: one job per model × component (``ci_matrix``)."""

    include: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"include": self.include}


def ci_matrix(manifests: Sequence[Manifest]) -> CiMatrix:
    """``{"include": [...]}``: one job per model × component, for ``strategy.matrix``.

    A component's own smoke tests go to its job; a model-level test goes to
    the job of the first component (in manifest order) it needs (``zmr
    smoke`` builds the other trees it needs). ``smoke`` lists the test ids
    that need no GPU, ``smoke_args`` the same as ``--only`` options for
    ``zmr smoke MODEL``; ``gpu_smoke`` the ids that need one.
    """
    include = []
    for manifest in sorted(manifests, key=lambda m: m.model):
        order = list(manifest.components)
        assigned: dict[str, list[tuple[str, SmokeTest]]] = {key: [] for key in order}
        for key, comp in manifest.components.items():
            for test in comp.smoke:
                assigned[key].append((f"{key}.{test.name}", test))
        for test in manifest.smoke:
            owner = min(test.needs, key=order.index) if test.needs else order[0]
            assigned[owner].append((test.name, test))
        for key, comp in manifest.components.items():
            cpu = [ident for ident, test in assigned[key] if not needs_gpu(test)]
            gpu = [ident for ident, test in assigned[key] if needs_gpu(test)]
            include.append(
                {
                    "name": f"{manifest.model}/{key}",
                    "model": manifest.model,
                    "component": key,
                    "branch": comp.branch,
                    "upstream": comp.upstream,
                    "commit": comp.commit,
                    "release": comp.release,
                    "smoke": cpu,
                    "smoke_args": " ".join(f"--only {ident}" for ident in cpu),
                    "gpu": bool(gpu),
                    "gpu_smoke": gpu,
                }
            )
    return CiMatrix(include)
