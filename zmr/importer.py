"""``zmr import``: existing release branches → the manifest and series that rebuild them.

Accepted layouts of a branch (linear, one root):

- two commits: a root *snapshot* whose tree is exactly the upstream tree,
  then a *changes* commit → one patch (the changes commit's diff and message);
- more than two: the snapshot, then one patch per further commit;
- one commit (``release: snapshot``): upstream tree plus changes in one root
  → one patch, the diff from the upstream commit's tree to the branch's.

The upstream is read from the snapshot's trailers (``Zmr-Upstream``,
``Zmr-Upstream-Commit``); ``--upstream URL --commit SHA`` stand in where they
are missing (``--upstream`` also overrides a URL that is not reachable from
here). The snapshot tree must equal the upstream commit's tree. The model and
component come from the changes commit's ``Zmr-Model``/``Zmr-Component``
trailers, else from ``--model`` and the branch name ``<component>/<model>``.

Everything is computed, and checked by applying the new series to the
upstream tree and comparing with the branch's tree, before a file is written;
an existing manifest is never overwritten.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from zmr import git
from zmr.cache import Cache, resolve_upstream
from zmr.errors import ZmrError
from zmr.manifest import COMPONENT_RE, FULL_OID_RE, MODEL_RE, parse_manifest
from zmr.files import atomic_write, current_umask
from zmr.patchfile import CommitMeta, commit_diff, format_mail, patch_name
from zmr.project import Project
from zmr.series import parse_patch
from zmr.replay import TempIndex

MAX_COMMITS = 1000
Progress = Callable[[str], None]


class ImportBranchError(ZmrError):
    """A branch cannot be imported."""


@dataclass
class Imported:
    """One component read from one branch."""

    model: str
    key: str
    branch: str
    tip: str
    upstream: str
    commit: str
    release: str  # two-commit | snapshot
    layout: str  # two-commit | per-commit | snapshot
    patches: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def default_branch(self) -> bool:
        return self.branch == f"{self.key}/{self.model}"

    @property
    def folder(self) -> str:
        return f"patches/{self.model}/{self.key}"


@dataclass
class ImportResult:
    manifests: dict[str, list[Imported]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "manifests": [
                {
                    "model": model,
                    "path": f"manifests/{model}.yaml",
                    "components": [
                        {
                            "component": i.key,
                            "branch": i.branch,
                            "tip": i.tip,
                            "upstream": i.upstream,
                            "commit": i.commit,
                            "release": i.release,
                            "layout": i.layout,
                            "series": i.folder,
                            "patches": [name for name, _ in i.patches],
                        }
                        for i in items
                    ],
                }
                for model, items in self.manifests.items()
            ],
            "warnings": self.warnings,
        }


def import_branches(
    project: Project,
    branches: Sequence[str],
    *,
    model: str | None = None,
    remote: str | None = None,
    upstream: str | None = None,
    commit: str | None = None,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Read *branches* and write manifests and series that rebuild them."""
    cache = cache or Cache()
    repo = project.repo
    remote_url = _remote_url(repo, remote) if remote else None
    if model is not None and not MODEL_RE.match(model):
        raise ImportBranchError(f"--model {model!r} is not a valid model name", details=["use [a-z0-9][a-z0-9._-]*"])
    if commit is not None and not FULL_OID_RE.match(commit):
        raise ImportBranchError(f"--commit {commit!r} is not a full commit id", details=["give the 40-hex id of the upstream commit"])
    result = ImportResult()
    items: list[Imported] = []
    for name in branches:
        if progress:
            progress(f"reading {name}")
        items.append(_read_branch(project, repo, cache, name, remote, remote_url, model, upstream, commit, result.warnings))
    for item in items:
        result.manifests.setdefault(item.model, []).append(item)
    _check_targets(project, result)
    _write(project, result)
    return result


def _remote_url(repo: git.Repo, remote: str) -> str:
    proc = repo.run(["config", "--get", f"remote.{remote}.url"], check=False)
    url = proc.stdout.decode("utf-8", "surrogateescape").strip()
    if proc.returncode == 0 and url:
        return url
    if os.path.exists(remote):
        return os.path.abspath(remote)
    return remote


def _read_branch(project, repo, cache, name, remote, remote_url, model, upstream, commit, warnings) -> Imported:
    short, ref, tip = _resolve(repo, name, remote, remote_url)
    count = int(repo.out(["rev-list", "--count", f"--max-count={MAX_COMMITS + 1}", tip]))
    if count > MAX_COMMITS:
        raise ImportBranchError(f"{name}: has more than {MAX_COMMITS} commits; not a release branch", details=["import branches in the two-commit or snapshot layout"])
    if repo.rev_list(["--merges", tip]):
        raise ImportBranchError(f"{name}: has merge commits; a release branch is linear", details=["import branches in the two-commit or snapshot layout"])
    commits = repo.rev_list(["--topo-order", "--reverse", tip])
    root = repo.commit_info(commits[0])
    head = repo.commit_info(tip)
    trailers = root.trailers()
    url = upstream or trailers.get("Zmr-Upstream")
    pin = trailers.get("Zmr-Upstream-Commit")
    if commit and pin and commit != pin:
        raise ImportBranchError(f"{name}: the snapshot names upstream commit {pin}, --commit says {commit}", details=["drop --commit, or import another branch"])
    pin = commit or pin
    if not url or not pin:
        raise ImportBranchError(
            f"{name}: the snapshot commit {commits[0][:12]} does not name its upstream (no Zmr-Upstream / Zmr-Upstream-Commit trailers)",
            details=["pass --upstream URL --commit SHA (the upstream commit whose tree the snapshot is)"],
        )
    if not FULL_OID_RE.match(pin):
        raise ImportBranchError(f"{name}: upstream commit {pin!r} is not a full commit id", details=["pass --commit with the 40-hex id"])
    head_trailers = head.trailers()
    model_name = model or head_trailers.get("Zmr-Model") or (short.split("/", 1)[1] if "/" in short else None)
    key = head_trailers.get("Zmr-Component") or short.split("/", 1)[0]
    if not model_name or not MODEL_RE.match(model_name):
        raise ImportBranchError(f"{name}: cannot tell the model from the branch name", details=["pass --model NAME"])
    if not COMPONENT_RE.match(key):
        raise ImportBranchError(f"{name}: {key!r} is not a valid component key", details=["name the branch <component>/<model> with a component key of [a-z0-9][a-z0-9-]*"])
    display = f"{name} ({url})"
    mirror = cache.ensure(resolve_upstream(url, project.root), [pin], display=display)
    mrepo = mirror.repo
    # The branch's objects go into the mirror, where the upstream tree is: diffs and checks run there.
    if not mrepo.has_object(tip, "commit"):
        mrepo.fetch(remote_url if remote else str(repo.git_dir), [ref])
    upstream_tree = mrepo.tree_of(pin)
    if len(commits) == 1:
        release, layout = "snapshot", "snapshot"
        diff = commit_diff(mrepo, pin, tip)
        steps = [(_meta(root), diff)] if diff else []
    else:
        release, layout = "two-commit", "two-commit" if len(commits) == 2 else "per-commit"
        if root.tree != upstream_tree:
            from zmr.release import changed_paths

            raise ImportBranchError(
                f"{name}: the snapshot tree of {commits[0][:12]} differs from {url} at {pin}",
                details=[f"differing paths: {changed_paths(mrepo, upstream_tree, mrepo, root.tree)}", "check --upstream/--commit (or the trailers): the snapshot must be the unmodified upstream tree"],
            )
        steps = []
        for oid in commits[1:]:
            info = mrepo.commit_info(oid)
            diff = commit_diff(mrepo, info.parents[0], oid)
            if diff:
                steps.append((_meta(info), diff))
            else:
                warnings.append(f"{name}: commit {oid[:12]} changes nothing; left out")
    patches: list[tuple[str, bytes]] = []
    for position, (meta, diff) in enumerate(steps, start=1):
        base = patch_name(position, meta.subject)
        patch_file = base
        n = 1
        while any(patch_file == existing for existing, _ in patches):
            n += 1
            patch_file = base.removesuffix(".patch") + f"-{n}.patch"
        patches.append((patch_file, format_mail(meta, diff)))
    _check_rebuilds(mrepo, name, upstream_tree, repo.tree_of(tip), patches)
    return Imported(model_name, key, short, tip, url, pin, release, layout, patches)


def _resolve(repo: git.Repo, name: str, remote: str | None, remote_url: str | None) -> tuple[str, str, str]:
    """(short branch name, full ref, commit id); a remote branch's objects are fetched."""
    if remote:
        short = name.removeprefix("refs/heads/")
        ref = f"refs/heads/{short}"
        try:
            heads = repo.ls_remote(remote_url or remote, [ref])
        except git.GitError as err:
            raise ImportBranchError(f"cannot read remote {remote}", details=err.details) from None
        oid = heads.get(ref)
        if oid is None:
            raise ImportBranchError(f"{remote}: has no branch {short}", details=[f"`git ls-remote {remote}` lists its branches"])
        if not repo.has_object(oid, "commit"):
            repo.fetch(remote_url or remote, [ref])
        return short, ref, oid
    full = repo.out(["rev-parse", "--symbolic-full-name", "--end-of-options", name], check=False) if not name.startswith("refs/") else name
    if not full.startswith("refs/"):
        full = f"refs/heads/{name}"
    oid = repo.resolve(full)
    if oid is None:
        raise ImportBranchError(f"no branch {name!r} in this repository", details=["`git branch -a` lists them; pass --remote R to read a remote's branch"])
    short = full.removeprefix("refs/heads/")
    if full.startswith("refs/remotes/"):
        short = full.removeprefix("refs/remotes/").split("/", 1)[-1]
    return short, full, oid


def _meta(info: git.CommitInfo) -> CommitMeta:
    """The commit's metadata with zmr's own trailer paragraph (``Zmr-*: ...``) left out."""
    meta = CommitMeta.for_commit(info)
    paragraphs = meta.body.split("\n\n")
    if paragraphs and paragraphs[-1].strip() and all(re.match(r"Zmr-[A-Za-z-]+: ", line) for line in paragraphs[-1].strip().splitlines()):
        paragraphs = paragraphs[:-1]
    body = "\n\n".join(paragraphs).strip("\n")
    return CommitMeta(meta.name, meta.email, meta.timestamp, meta.offset, meta.subject, body)


def _check_rebuilds(repo: git.Repo, name: str, upstream_tree: str, tree: str, patches: list[tuple[str, bytes]]) -> None:
    """The series applied to the upstream tree must give the branch's tree."""
    with TempIndex(repo) as index:
        index.read_tree(upstream_tree)
        for patch_file, data in patches:
            proc = index.apply(parse_patch(data, patch_file))
            if proc.returncode != 0:
                raise ImportBranchError(f"{name}: the patch made from it does not apply ({patch_file})", details=proc.stderr.decode("utf-8", "replace").splitlines()[-4:])
        if index.write_tree() != tree:
            raise ImportBranchError(f"{name}: the series does not rebuild the branch's tree", details=["the branch may hold changes a text patch cannot carry (e.g. submodules); import it by hand"])


def _check_targets(project: Project, result: ImportResult) -> None:
    for model, items in result.manifests.items():
        manifest = project.root / "manifests" / f"{model}.yaml"
        if manifest.exists():
            raise ImportBranchError(f"manifests/{model}.yaml already exists; zmr import never overwrites a manifest", details=["import under another --model, or remove the manifest first"])
        keys: dict[str, str] = {}
        for item in items:
            if item.key in keys:
                raise ImportBranchError(f"{item.branch} and {keys[item.key]} would both be component {item.key!r} of {model}", details=["import them under different models"])
            keys[item.key] = item.branch
            folder = project.root / item.folder
            if folder.exists() and any(folder.iterdir()):
                raise ImportBranchError(f"{item.folder} already exists and is not empty", details=["remove it (it belongs to no manifest), then import again"])


def _quote(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./][A-Za-z0-9_./:@+~-]*", value) and not re.fullmatch(r"(?i)(true|false|yes|no|on|off|null|~|[0-9.e+-]+)", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def manifest_text(model: str, items: Sequence[Imported]) -> str:
    lines = [f"model: {model}", f"title: {_quote(model)}", "components:"]
    for item in items:
        lines += [f"  {item.key}:", f"    upstream: {_quote(item.upstream)}", f"    commit: {item.commit}"]
        if not item.default_branch:
            lines.append(f"    branch: {_quote(item.branch)}")
        if item.release != "two-commit":
            lines.append(f"    release: {item.release}")
    return "\n".join(lines) + "\n"


def _write(project: Project, result: ImportResult) -> None:
    """Check each manifest by parsing it, then write series folders (renamed into place), then manifests."""
    texts = {}
    for model, items in result.manifests.items():
        text = manifest_text(model, items)
        with tempfile.TemporaryDirectory(prefix="zmr-import-") as tmp:
            probe = Path(tmp) / f"{model}.yaml"
            probe.write_text(text)
            manifest, problems = parse_manifest(probe, project.root)
        if problems:
            raise ImportBranchError(f"manifests/{model}.yaml would be invalid", details=[str(p).replace(str(probe), f"manifests/{model}.yaml") for p in problems])
        texts[model] = text
    for model, items in result.manifests.items():
        for item in items:
            if not item.patches:
                continue
            folder = project.root / item.folder
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.zmr-tmp-", dir=folder.parent))
            try:
                os.chmod(tmp, 0o777 & ~current_umask())
                for patch_file, data in item.patches:
                    (tmp / patch_file).write_bytes(data)
                (tmp / "series").write_text(f"# imported by zmr import from {item.branch}\n" + "".join(f"{n}\n" for n, _ in item.patches))
                if folder.is_dir():
                    folder.rmdir()  # empty: checked before
                os.rename(tmp, folder)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        atomic_write(project.root / "manifests" / f"{model}.yaml", texts[model].encode())
