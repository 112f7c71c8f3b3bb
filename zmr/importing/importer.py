"""``zmr import``: existing release branches → the manifest and series that rebuild them.

Accepted layouts of a branch (linear, one root):

- two commits: a root *snapshot* whose tree is exactly the upstream tree,
  then a *changes* commit → one patch (the changes commit's diff and message);
- more than two: the snapshot, then one patch per further commit;
- one commit (``release: snapshot``): upstream tree plus changes in one root
  → one patch, the diff from the base (an upstream commit) to the branch's tree.

Which upstream commit. zmr's own trailers (``Zmr-Upstream``,
``Zmr-Upstream-Commit``) name it; a hand-made snapshot names it in words
(``zmr.importing.upstream_words``: a full or abbreviated id, a ``…/commit/<sha>`` URL,
``<name> @ <sha>``, ``Upstream: URL SHA``). Each id is looked up in the
upstream -- ``--upstream URL``, else a URL in the message, else the URL of
the same component in any manifest -- and accepted only when that commit's
tree is the snapshot's tree; otherwise the error lists every candidate
tried. ``--commit SHA`` names the commit outright. A single snapshot commit
has no upstream tree to compare with: its base is ``--base REV``, the id its
message names, or (``--find-base``) the closest commit of the upstream's
history around its date (``zmr.importing.findbase``).

The model and component come from the changes commit's ``Zmr-Model``/
``Zmr-Component`` trailers, else from ``--model`` and the branch name
``<component>/<model>``. Components of a model may come from several
upstreams, in one call or several: a component is added to an existing
manifest by inserting its lines after the last component (comments and
layout stay as they are); a component already in the manifest is never
overwritten.

Everything is computed and checked before a file is written: the series is
read back exactly as ``zmr validate``/``zmr build`` read it (so import refuses
what build would, with the same message), applied to the upstream tree and
compared with the branch's tree.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, TypedDict, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from zmr.infra.git import FULL_OID_RE, Progress
from zmr.infra.cache import Cache, CacheError, Mirror, Upstream
from zmr.infra.errors import ZmrError
from zmr.infra.lock import hold
from zmr.model.manifest import COMPONENT_RE, MODEL_RE, Component, manifest_file, parse_manifest
from zmr.model.patchfile import CommitMeta, commit_diff, format_mail, patch_name
from zmr.model.project import Project
from zmr.infra.reports import Report
from zmr.model.series import read_series
from zmr.importing.upstream_words import Named, named_commits, named_urls
from zmr.infra import git, transaction
from zmr.infra.wording import counted

MAX_COMMITS = 1000
# A single snapshot's patch touching more files than this (or 3x what the component's
# other series touch) probably carries upstream changes: its base is wrong.
MANY_FILES = 100
IMPORT_TRANSACTION = "import"


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
    found_by: str = ""  # how the upstream commit was found: trailer, message words, --commit, --base, --find-base
    notes: list[str] = field(default_factory=list)  # e.g. the candidates --find-base compared

    @property
    def default_branch(self) -> bool:
        return self.branch == f"{self.key}/{self.model}"

    @property
    def folder(self) -> str:
        return f"patches/{self.model}/{self.key}"

    @property
    def touched(self) -> int:
        return sum(data.count(b"\ndiff --git ") + data.startswith(b"diff --git ") for _, data in self.patches)


class ImportedComponentJson(TypedDict):
    """A component imported from a release *branch* at *tip*: its upstream and the commit found (and how, *found_by*),
    the release layout written and the one read (*layout*: two-commit, per-commit, snapshot), the series folder and
    its patches, and notes (e.g. the candidates --find-base compared)."""

    component: str
    branch: str
    tip: str
    upstream: str
    commit: str
    found_by: str
    release: str
    layout: str
    series: str
    patches: list[str]
    notes: list[str]


class ImportedManifestJson(TypedDict):
    """A manifest written (*added*: it existed, and components were added to it)."""

    model: str
    path: str
    added: bool
    components: list[ImportedComponentJson]


class ImportJson(TypedDict):
    """The manifests ``zmr import`` wrote, and its warnings."""

    manifests: list[ImportedManifestJson]
    warnings: list[str]


@dataclass
class ImportResult(Report):
    manifests: dict[str, list[Imported]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    added: set[str] = field(default_factory=set)  # models whose manifest existed: components were added

    def to_json(self) -> ImportJson:
        return {
            "manifests": [
                {
                    "model": model,
                    "path": manifest_file(model),
                    "added": model in self.added,
                    "components": [
                        {
                            "component": i.key,
                            "branch": i.branch,
                            "tip": i.tip,
                            "upstream": i.upstream,
                            "commit": i.commit,
                            "found_by": i.found_by,
                            "release": i.release,
                            "layout": i.layout,
                            "series": i.folder,
                            "patches": [name for name, _ in i.patches],
                            "notes": i.notes,
                        }
                        for i in items
                    ],
                }
                for model, items in self.manifests.items()
            ],
            "warnings": self.warnings,
        }


@dataclass
class _Run:
    """What one import call shares between its branches."""

    project: Project
    repo: git.Repo
    cache: Cache
    remote: str | None
    remote_url: str | None
    model: str | None
    upstreams: dict[str, str]  # component key ('' for every component) -> --upstream URL
    commit: str | None
    base: str | None
    find_base: bool
    warnings: list[str]
    progress: Progress | None
    known_urls: dict[str, list[str]] = field(default_factory=dict)  # component key -> URLs in the manifests
    histories: dict[str, Mirror] = field(default_factory=dict)


def import_branches(
    project: Project,
    branches: Sequence[str],
    *,
    model: str | None = None,
    remote: str | None = None,
    upstream: str | Sequence[str] | None = None,
    commit: str | None = None,
    base: str | None = None,
    find_base: bool = False,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Read *branches* and write (or add to) manifests and series that rebuild them.

    *upstream*: ``URL`` for every branch, or ``COMPONENT=URL`` for one component (repeatable).
    """
    cache = cache or Cache()
    repo = project.repo
    remote_url = _remote_url(repo, remote) if remote else None
    if model is not None and not MODEL_RE.match(model):
        raise ImportBranchError(f"--model {model!r} is not a valid model name", details=["use [a-z0-9][a-z0-9._-]*"])
    if commit is not None and not FULL_OID_RE.match(commit):
        raise ImportBranchError(f"--commit {commit!r} is not a full commit id", details=["give the 40-hex id of the upstream commit"])
    if base is not None and (find_base or commit):
        raise ImportBranchError("give one of --base, --find-base and --commit")
    result = ImportResult()
    run = _Run(
        project,
        repo,
        cache,
        remote,
        remote_url,
        model,
        _upstream_options(upstream),
        commit,
        base,
        find_base,
        result.warnings,
        progress,
        _manifest_urls(project),
    )
    items: list[Imported] = []
    for name in branches:
        if progress:
            progress(f"reading {name}")
        items.append(_read_branch(run, name))
    for item in items:
        result.manifests.setdefault(item.model, []).append(item)
    _warn_many_files(project, items, result.warnings)
    with hold(project, items):
        transaction.finish_interrupted(project, IMPORT_TRANSACTION)  # an import cut short is finished before the checks see half of it
        _check_targets(project, result)
        _write(project, result)
    return result


def _upstream_options(values: str | Sequence[str] | None) -> dict[str, str]:
    """``--upstream`` values: ``URL`` (key '') or ``COMPONENT=URL``."""
    result: dict[str, str] = {}
    for value in [values] if isinstance(values, str) else values or []:
        key, eq, url = value.partition("=")
        if not (eq and COMPONENT_RE.match(key) and url):
            key, url = "", value
        if key in result and result[key] != url:
            raise ImportBranchError(f"--upstream given twice for {'component ' + key if key else 'every component'}: {result[key]} and {url}")
        result[key] = url
    return result


def _remote_url(repo: git.Repo, remote: str) -> str:
    url = (repo.config_get(f"remote.{remote}.url") or "").strip()
    if url:
        return url
    if os.path.exists(remote):
        return os.path.abspath(remote)
    return remote


def _manifest_urls(project: Project) -> dict[str, list[str]]:
    """Component key -> upstream URLs the manifests give it (a broken manifest is skipped here; validate reports it)."""
    from zmr.model.manifest import manifest_paths

    urls: dict[str, list[str]] = {}
    for path in manifest_paths(project.root):
        manifest, _ = parse_manifest(path, project.root)
        for comp in manifest.components.values() if manifest else ():
            if comp.upstream not in urls.setdefault(comp.key, []):
                urls[comp.key].append(comp.upstream)
    return urls


def _read_branch(run: _Run, name: str) -> Imported:
    repo = run.repo
    short, ref, tip = _resolve(repo, name, run.remote, run.remote_url)
    count = repo.count(tip, max_count=MAX_COMMITS + 1)
    if count > MAX_COMMITS:
        raise ImportBranchError(
            f"{name}: has more than {counted(MAX_COMMITS, 'commit')}; not a release branch", details=["import branches in the two-commit or snapshot layout"]
        )
    if repo.rev_list(["--merges", tip]):
        raise ImportBranchError(f"{name}: has merge commits; a release branch is linear", details=["import branches in the two-commit or snapshot layout"])
    commits = repo.rev_list(["--topo-order", "--reverse", tip])
    root = repo.commit_info(commits[0])
    head = repo.commit_info(tip)
    head_trailers = head.trailers()
    model_name = run.model or head_trailers.get("Zmr-Model") or (short.split("/", 1)[1] if "/" in short else None)
    key = head_trailers.get("Zmr-Component") or short.split("/", 1)[0]
    if not model_name or not MODEL_RE.match(model_name):
        raise ImportBranchError(f"{name}: cannot tell the model from the branch name", details=["pass --model NAME"])
    if not COMPONENT_RE.match(key):
        raise ImportBranchError(
            f"{name}: {key!r} is not a valid component key", details=["name the branch <component>/<model> with a component key of [a-z0-9][a-z0-9-]*"]
        )
    single = len(commits) == 1
    if not single and (run.base or run.find_base):
        raise ImportBranchError(
            f"{name}: --base and --find-base are for branches of a single snapshot commit; this one has {counted(len(commits), 'commit')}",
            details=["its first commit is the upstream snapshot: drop the option"],
        )
    if single:
        url, pin, found_by, notes = _snapshot_base(run, name, key, root, ref)
    else:
        url, pin, found_by = _pin_of_snapshot(run, name, key, root, ref)
        notes = []
    mirror = run.cache.for_upstream(url, run.project.root, name).ensure([pin])
    mrepo = mirror.repo
    _bring_branch(run, mrepo, ref, tip)
    upstream_tree = mrepo.tree_of(pin)
    if single:
        release, layout = "snapshot", "snapshot"
        diff = commit_diff(mrepo, pin, tip)
        steps = [(_meta(root), diff)] if diff else []
    else:
        release, layout = "two-commit", "two-commit" if len(commits) == 2 else "per-commit"
        steps = []
        for oid in commits[1:]:
            info = mrepo.commit_info(oid)
            diff = commit_diff(mrepo, info.parents[0], oid)
            if diff:
                steps.append((_meta(info), diff))
            else:
                run.warnings.append(f"{name}: commit {oid[:12]} changes nothing; left out")
    patches: list[tuple[str, bytes]] = []
    for position, (meta, diff) in enumerate(steps, start=1):
        base = patch_name(position, meta.subject)
        patch_file = base
        n = 1
        while any(patch_file == existing for existing, _ in patches):
            n += 1
            patch_file = base.removesuffix(".patch") + f"-{n}.patch"
        patches.append((patch_file, format_mail(meta, diff)))
    item = Imported(model_name, key, short, tip, url, pin, release, layout, patches, found_by, notes)
    _check_rebuilds(run.project, mrepo, item, upstream_tree, repo.tree_of(tip))
    return item


def _bring_branch(run: _Run, mrepo: git.Repo, ref: str, tip: str) -> None:
    """The branch's objects go into the mirror, where the upstream tree is: diffs and checks run there."""
    if not mrepo.has_object(tip, "commit"):
        if run.remote and run.remote_url:
            mrepo.fetch(run.remote_url, [ref])
        else:  # the project's own branch
            mrepo.fetch(str(run.repo.git_dir), [ref], own_source=True)


# -- which upstream commit -----------------------------------------------------------------------


def _urls_for(run: _Run, key: str, message: str, named: Named | None = None) -> list[str]:
    """Where to look for the upstream: --upstream alone, else the message's URLs, then the manifests'."""
    given = run.upstreams.get(key) or run.upstreams.get("")
    if given:
        return [given]
    urls = [named.url] if named is not None and named.url else []
    urls += named_urls(message) + run.known_urls.get(key, [])
    return list(dict.fromkeys(urls))


def _pin_of_snapshot(run: _Run, name: str, key: str, root: git.CommitInfo, ref: str) -> tuple[str, str, str]:
    """(URL, commit, how found) of the upstream commit whose tree the snapshot *root* is."""
    if run.commit:
        urls = _urls_for(run, key, root.message)
        if not urls:
            raise ImportBranchError(f"{name}: --commit {run.commit[:12]} given, but no upstream repository", details=["pass --upstream URL too"])
        mirror = run.cache.for_upstream(urls[0], run.project.root, name).ensure([run.commit])
        tree = mirror.repo.tree_of(run.commit)
        if tree != root.tree:
            from zmr.ops.verify import changed_paths

            raise ImportBranchError(
                f"{name}: the snapshot tree of {root.oid[:12]} differs from {urls[0]} at {run.commit}",
                details=[
                    f"differing paths: {changed_paths(mirror.repo, tree, run.repo, root.tree)}",
                    "check --upstream/--commit (or the trailers): the snapshot must be the unmodified upstream tree",
                ],
            )
        return urls[0], run.commit, "--commit"
    named = named_commits(root.message)
    if not named:
        raise ImportBranchError(
            f"{name}: the snapshot commit {root.oid[:12]} does not name its upstream (no commit id in its message, no Zmr-Upstream-Commit trailer)",
            details=["pass --upstream URL --commit SHA (the upstream commit whose tree the snapshot is)"],
        )
    tried: list[str] = []
    for candidate in named:
        urls = _urls_for(run, key, root.message, candidate)
        if not urls:
            tried.append(f"{candidate.commit}: no upstream repository to look it up in")
        for url in urls:
            commits, why = _look_up(run, url, candidate.commit)
            if why:
                tried.append(f"{candidate.commit} in {url}: {why}")
            for full, mirror in commits:
                tree = mirror.repo.tree_of(full)
                if tree == root.tree:
                    return url, full, "trailer" if candidate.how == "trailer" else f"message ({candidate.how})"
                _bring_branch(run, mirror.repo, ref, root.oid)
                tried.append(f"{full[:12]} in {url}: tree differs from the snapshot ({_distance(mirror.repo, tree, root.tree)} paths differ)")
    details = [f"tried {line}" for line in tried]
    if not (run.upstreams.get(key) or run.upstreams.get("")):
        details.append("name the upstream with --upstream URL (where the snapshot came from), or --commit SHA with it")
    else:
        details.append("check --upstream, or pass --commit SHA (the upstream commit whose tree the snapshot is)")
    raise ImportBranchError(f"{name}: no upstream commit named in the message of snapshot {root.oid[:12]} has its tree", details=details)


def _look_up(run: _Run, url: str, commit: str) -> tuple[list[tuple[str, Mirror]], str]:
    """The commits *commit* (full or abbreviated) may be in *url*, or why none."""
    upstream = run.cache.for_upstream(url, run.project.root)
    if len(commit) in (40, 64):
        try:
            mirror = upstream.try_commit(commit)
        except (git.GitError, CacheError) as err:
            return [], f"cannot fetch ({err.message})"
        return ([(commit, mirror)], "") if mirror else ([], "no such commit")
    try:
        mirror = _history(run, upstream)
    except CacheError as err:
        return [], f"cannot fetch ({err.message})"
    found = [oid for oid in mirror.repo.commits_with_prefix(commit) if mirror.repo.has_object(oid, "commit")]
    return ([(oid, mirror) for oid in found], "" if found else "no commit with this abbreviated id")


def _history(run: _Run, upstream: Upstream) -> Mirror:
    if upstream.url not in run.histories:
        if run.progress:
            run.progress(f"fetching the history of {upstream.display}")
        run.histories[upstream.url] = upstream.ensure_history()
    return run.histories[upstream.url]


def _distance(repo: git.Repo, tree: str, other: str) -> int:
    from zmr.importing.findbase import tree_distances

    return tree_distances(repo, [tree], other)[0]


def _snapshot_base(run: _Run, name: str, key: str, root: git.CommitInfo, ref: str) -> tuple[str, str, str, list[str]]:
    """(URL, base commit, how found, notes) of a single snapshot commit (upstream tree plus changes)."""
    trailers = root.trailers()
    pin = run.commit or trailers.get("Zmr-Upstream-Commit")
    url = run.upstreams.get(key) or run.upstreams.get("") or trailers.get("Zmr-Upstream")
    if pin and url and not run.base and not run.find_base:
        if not FULL_OID_RE.match(pin):
            raise ImportBranchError(f"{name}: upstream commit {pin!r} is not a full commit id", details=["pass --commit with the 40-hex id"])
        return url, pin, "--commit" if run.commit else "trailer", []
    urls = _urls_for(run, key, root.message)
    if not urls:
        raise ImportBranchError(
            f"{name}: a single snapshot commit; zmr needs its upstream repository to find the base",
            details=["pass --upstream URL (and --base REV or --find-base)"],
        )
    url = urls[0]
    if run.base:
        if re.fullmatch(r"[0-9a-fA-F]{7,39}", run.base):
            commits, why = _look_up(run, url, run.base.lower())
            if len(commits) != 1:
                raise ImportBranchError(
                    f"--base {run.base}: {why or 'ambiguous in ' + url}",
                    details=[*(f"candidate {oid}" for oid, _ in commits), "give more digits, or the full id"],
                )
            return url, commits[0][0], "--base", []
        mirror, oid = run.cache.for_upstream(url, run.project.root, name).fetch_ref(run.base)
        return url, oid, "--base", []
    if run.find_base:
        from zmr.importing.findbase import find_base

        if run.progress:
            run.progress(f"{name}: looking for the base in {url}")
        mirror = _history(run, run.cache.for_upstream(url, run.project.root))
        _bring_branch(run, mirror.repo, ref, root.oid)
        search = find_base(mirror.repo, root.tree)
        notes = ["--find-base: closest upstream commits:", *[f"  {line}" for line in search.lines()]]
        best = search.best
        if best is None:
            raise ImportBranchError(
                f"{name}: --find-base found no unambiguous base in {url}" + ("" if search.candidates else " (no commits around the snapshot's date)"),
                details=[*notes, "pass --base REV (one of these, or another upstream commit)"],
            )
        return url, best.commit, "--find-base", notes
    for candidate in named_commits(root.message):
        for candidate_url in _urls_for(run, key, root.message, candidate):
            commits, _ = _look_up(run, candidate_url, candidate.commit)
            if len(commits) == 1:
                return candidate_url, commits[0][0], f"message ({candidate.how})", []
    raise ImportBranchError(
        f"{name}: a single snapshot commit ({root.oid[:12]}) that names no upstream commit",
        details=["give its base: --base REV (the upstream commit it was made from), or --find-base to search the upstream's history for the closest tree"],
    )


def _warn_many_files(project: Project, items: Sequence[Imported], warnings: list[str]) -> None:
    """A single snapshot's patch that touches far more files than the component's other series: probably a wrong base."""
    others: dict[str, int] = {}
    for item in items:
        if item.release == "two-commit":
            others[item.key] = max(others.get(item.key, 0), item.touched)
    for folder in sorted((project.root / "patches").glob("*/*")):
        if folder.is_dir():
            touched = sum(p.read_bytes().count(b"diff --git ") for p in folder.glob("*.patch"))
            others[folder.name] = max(others.get(folder.name, 0), touched)
    for item in items:
        if item.release != "snapshot" or item.found_by == "trailer":
            continue
        expected = others.get(item.key)
        limit = max(20, 3 * expected) if expected else MANY_FILES
        if item.touched > limit:
            seen = f"the other {item.key} series touch {expected} at most" if expected else f"more than {MANY_FILES}"
            warnings.append(
                f"{item.branch}: the patch from base {item.commit[:12]} touches {counted(item.touched, 'file')} ({seen}); "
                "a wrong base puts upstream changes into the series: check --base, or try --find-base"
            )


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
    full = repo.symbolic_full_name(name) if not name.startswith("refs/") else name
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


def _check_rebuilds(project: Project, repo: git.Repo, item: Imported, upstream_tree: str, tree: str) -> None:
    """Read the series back as build does (refusing what it refuses), apply it to the upstream tree, compare trees."""
    from zmr.ops.replay import ApplyError, apply_series

    with tempfile.TemporaryDirectory(prefix="zmr-import-") as tmp:
        folder = Path(tmp)
        for path, data in _series_files(folder, item).items():
            path.write_bytes(data)
        try:
            series = read_series(folder, item.folder)
        except ZmrError as err:
            raise ImportBranchError(
                f"{item.branch}: {err.message}", details=[*err.details, "zmr build would refuse this series; nothing was written"]
            ) from None
        component = Component(item.model, item.key, item.upstream, item.commit, item.branch, item.release, item.folder)
        try:
            built = apply_series(repo, component, upstream_tree, series.patches) if series.patches else upstream_tree
        except ApplyError as err:
            raise ImportBranchError(f"{item.branch}: the patch made from it does not apply ({err.message})", details=err.details[-4:]) from None
    if built != tree:
        raise ImportBranchError(
            f"{item.branch}: the series does not rebuild the branch's tree",
            details=["the branch may hold changes a text patch cannot carry (e.g. submodules); import it by hand"],
        )


def _series_files(folder: Path, item: Imported) -> dict[Path, bytes]:
    files = {folder / patch_file: data for patch_file, data in item.patches}
    files[folder / "series"] = (f"# imported by zmr import from {item.branch}\n" + "".join(f"{n}\n" for n, _ in item.patches)).encode()
    return files


def _check_targets(project: Project, result: ImportResult) -> None:
    for model, items in result.manifests.items():
        path = project.manifest_path(model)
        have: dict[str, str] = {}
        if path.exists():
            manifest, problems = parse_manifest(path, project.root, project.policy)
            if manifest is None or problems:
                raise ImportBranchError(
                    f"{manifest_file(model)} is not valid; zmr import adds components only to a valid manifest", details=[str(p) for p in problems]
                )
            have = {key: manifest_file(model) for key in manifest.components}
            result.added.add(model)
        keys: dict[str, str] = {}
        for item in items:
            if item.key in have:
                raise ImportBranchError(
                    f"{manifest_file(model)} already exists; zmr import never overwrites a manifest, and it has component {item.key!r} already",
                    details=[f"import {item.branch} under another --model, or remove component {item.key} from the manifest first"],
                )
            if item.key in keys:
                raise ImportBranchError(
                    f"{item.branch} and {keys[item.key]} would both be component {item.key!r} of {model}", details=["import them under different models"]
                )
            keys[item.key] = item.branch
            folder = project.root / item.folder
            if folder.exists() and any(folder.iterdir()):
                raise ImportBranchError(f"{item.folder} already exists and is not empty", details=["remove it (it belongs to no manifest), then import again"])


def _quote(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./][A-Za-z0-9_./:@+~-]*", value) and not re.fullmatch(r"(?i)(true|false|yes|no|on|off|null|~|[0-9.e+-]+)", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def component_lines(item: Imported) -> list[str]:
    """The component's block, indented as under ``components:`` in a new manifest (2 spaces)."""
    lines = [f"  {item.key}:", f"    upstream: {_quote(item.upstream)}", f"    commit: {item.commit}"]
    if not item.default_branch:
        lines.append(f"    branch: {_quote(item.branch)}")
    if item.release != "two-commit":
        lines.append(f"    release: {item.release}")
    return lines


def manifest_text(model: str, items: Sequence[Imported]) -> str:
    lines = [f"model: {model}", f"title: {_quote(model)}", "components:"]
    for item in items:
        lines += component_lines(item)
    return "\n".join(lines) + "\n"


def add_components(text: str, display: str, items: Sequence[Imported]) -> str:
    """*text* of a manifest with *items* inserted after its last component, indented like the others.

    Only lines are inserted: every byte of the file before and after stays
    as it was (comments, order, quoting).
    """
    node = yaml.compose(text)
    components = _value(node, "components") if isinstance(node, MappingNode) else None
    if not isinstance(components, MappingNode) or components.flow_style or not components.value:
        raise ImportBranchError(
            f"{display}: components is not a block mapping zmr can add to",
            details=["add the component by hand:", *[line for item in items for line in component_lines(item)]],
        )
    first_key, first_value = components.value[0]
    indent = first_key.start_mark.column
    step = 2
    if isinstance(first_value, MappingNode) and first_value.value and not first_value.flow_style:
        step = max(1, first_value.value[0][0].start_mark.column - indent)
    end = _last_line_end(components, text)
    block = "".join(
        " " * (indent + (len(line) - len(line.lstrip(" ")) - 2) // 2 * step) + line.lstrip(" ") + "\n" for item in items for line in component_lines(item)
    )
    if end == len(text) and not text.endswith("\n"):
        return text + "\n" + block
    return text[:end] + block + text[end:]


def _value(node: MappingNode, key: str) -> Node | None:
    for key_node, value in node.value:
        if isinstance(key_node, ScalarNode) and key_node.value == key:
            return cast(Node, value)
    return None


def _last_line_end(node: Node, text: str) -> int:
    """Index just after the line on which *node*'s last scalar ends (block mappings end at the next key)."""
    while isinstance(node, MappingNode) and node.value:
        node = node.value[-1][1]
    while hasattr(node, "value") and isinstance(node.value, list) and node.value:  # a list: its last item
        last = node.value[-1]
        node = last[1] if isinstance(last, tuple) else last
    newline = text.find("\n", node.end_mark.index)
    return len(text) if newline < 0 else newline + 1


def _write(project: Project, result: ImportResult) -> None:
    """Check each manifest by parsing it, then write series folders (renamed into place), then manifests.

    A failure after the first write (a branch name another model uses)
    removes the series folders again and restores the manifests.
    """
    from zmr.model.manifest import load_manifests

    texts: dict[str, str] = {}
    old: dict[str, bytes | None] = {}
    for model, items in result.manifests.items():
        path = project.manifest_path(model)
        before = old[model] = path.read_bytes() if path.exists() else None
        text = add_components(before.decode("utf-8"), manifest_file(model), items) if before is not None else manifest_text(model, items)
        with tempfile.TemporaryDirectory(prefix="zmr-import-") as tmp:
            probe = Path(tmp) / f"{model}.yaml"
            probe.write_text(text)
            manifest, problems = parse_manifest(probe, project.root)
        if problems or manifest is None or any(item.key not in manifest.components for item in items):
            raise ImportBranchError(f"{manifest_file(model)} would be invalid", details=[str(p).replace(str(probe), manifest_file(model)) for p in problems])
        texts[model] = text
    files: dict[Path, bytes] = {}
    for model, items in result.manifests.items():
        for item in items:
            if item.patches:
                files.update(_series_files(project.root / item.folder, item))
        files[project.manifest_path(model)] = texts[model].encode()
    with transaction.begin(project, IMPORT_TRANSACTION) as txn:  # every series and manifest, or none
        for path, data in files.items():
            txn.write(path, data)
    try:
        load_manifests(project.root, list(result.manifests), project.policy)  # branch names across models
    except ZmrError:
        with transaction.begin(project, IMPORT_TRANSACTION) as txn:  # undone as a whole, too
            for path in files:
                txn.remove(path)
            for model, before in old.items():
                if before is not None:
                    txn.write(project.manifest_path(model), before)
        raise
