"""Move a series to a new upstream commit (``zmr rebase``), and find patches that landed upstream.

Pipeline of ``zmr rebase MODEL -c COMP --onto REV``::

    REV ──Cache.fetch_ref (history)──▶ new commit
    series ──build_chain on the old pin──▶ old commits ──patch-id──┐
    upstream old..new (commits touching the series' files) ─patch-id┴▶ patches already upstream
    pin only: the series' files unchanged between the pins, or every hunk applies where
        it was (one ``git apply`` of the whole series in a throwaway index), and no
        checkout: only the manifest's pin moves
    fast path: temporary index in the mirror holding just the series' files, new pin + each patch in order:
        patch-id upstream, or applied diff empty, or reverse-applies → dropped (and reported)
        applies → committed;   does not apply → slow path from this patch on
    slow path: the checkout at (new pin + patches so far), then ``git cherry-pick`` of each
        remaining old commit (3-way); a conflict stops with the files in conflict;
        ``--continue`` commits the resolution and goes on
    finish: export into the series (byte-stable), the manifest's ``commit:`` value edited
        in place, the checkout (if any) moved to the result; an ``Outcome`` (zmr/cli/rebase.py renders the report).

State of a rebase under way lives in ``.zmr/rebase/<model>-<component>/`` of
the zmr repository (git-ignored): ``state.json`` (pins, the old commits, what
was dropped, what is left, the phase) and copies of everything the rebase may
change (the manifest, every file of the series folder, the checkout's refs,
HEAD and ``.git/config``). It is written completely (temporary folder +
rename) before anything else changes, and ``state.json`` is replaced
atomically after each step, so an interrupted run is resumed by
``--continue`` or undone by ``--abort``.

``upstreamed`` is the read-only part: the same patch-id comparison, plus a
trial replay that notices patches which reverse-apply on REV.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from zmr import git
from zmr.cache import Cache, resolve_upstream
from zmr.errors import ZmrError
from zmr.manifest import Component, parse_manifest
from zmr.files import atomic_write
from zmr.patchfile import CommitMeta, diff_tree_args
from zmr.project import Project
from zmr.series import Patch, Series, read_series
from zmr import workspace
from zmr.workspace import Replayer, TempIndex, build_chain

STATE_VERSION = 1
MAX_SEARCH = 300  # upstream commits tried when looking for the one that contains a patch

Progress = Callable[[str], None]


class RebaseError(ZmrError):
    """A rebase cannot start or go on."""


# -- upstream detection ----------------------------------------------------------------------


def resolve_rev(cache: Cache, url: str, rev: str, display: str) -> tuple[git.Repo, str]:
    """The mirror and the commit id of *rev* (full or abbreviated id, tag or branch), with history."""
    if re.fullmatch(r"[0-9a-f]{4,39}", rev):
        mirror = cache.ensure_history(url, display=display)
        oid = mirror.repo.resolve(rev)
        if oid is None:
            raise RebaseError(f"{display}: no upstream commit {rev!r}", details=["give a full commit id, a tag or a branch of the upstream"])
        return mirror.repo, oid
    mirror, oid = cache.fetch_ref(url, rev, display=display)
    return mirror.repo, oid


def patch_ids(repo: git.Repo, commits: Sequence[str]) -> dict[str, str]:
    """``git patch-id --stable`` of each commit's diff: commit → patch id."""
    if not commits:
        return {}
    diff = repo.run(diff_tree_args("--stdin"), input=("\n".join(commits) + "\n").encode()).stdout
    out = repo.run(["patch-id", "--stable"], input=diff).stdout.decode()
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
    proc = repo.run(["cat-file", "blob", ref], check=False)
    if proc.returncode == 0:
        kept = dict(line.split(" ", 1) for line in proc.stdout.decode("ascii", "replace").splitlines() if line.count(" ") == 1)
        if set(kept) == set(chain) and all(pid == "-" or git.FULL_OID_RE.fullmatch(pid) for pid in kept.values()):
            return {c: pid for c, pid in kept.items() if pid != "-"}  # "-": the commit changes nothing
    ids = patch_ids(repo, chain)
    blob = repo.out(["hash-object", "-w", "--stdin"], input="".join(f"{c} {ids.get(c, '-')}\n" for c in chain).encode())
    repo.run(["update-ref", ref, blob])
    return ids


def files_unchanged(repo: git.Repo, old: str, new: str, paths: Sequence[str]) -> bool:
    """True when every path is the same (or as absent) in *new* as in *old*, and can still be created there.

    Then a series touching only *paths* applies to *new* exactly as to *old*
    (a file *new* puts where the series puts a folder is the one way it could not).
    """
    if paths and repo.run(["--literal-pathspecs", "diff-tree", "--quiet", "-r", old, new, "--", *paths], check=False).returncode != 0:
        return False
    return workspace.paths_fit(repo, new, paths)


def file_sets(repo: git.Repo, commits: Sequence[str]) -> dict[str, frozenset[str]]:
    """The paths each commit changes (against its first parent): commit → paths."""
    if not commits:
        return {}
    raw = repo.run(["diff-tree", "--stdin", "-r", "-z", "--raw", "--no-renames"], input=("\n".join(commits) + "\n").encode()).stdout
    tokens = raw.decode("utf-8", "surrogateescape").split("\0")
    result: dict[str, set[str]] = {}
    current: set[str] = set()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith(":"):  # ":<modes> <ids> <status>", then the path
            current.add(tokens[i + 1])
            i += 2
            continue
        if token:
            current = result.setdefault(token.strip(), set())
        i += 1
    return {commit: frozenset(result.get(commit, ())) for commit in commits}


def upstream_commits(repo: git.Repo, old: str, new: str, paths: Sequence[str]) -> list[str]:
    """Non-merge commits of old..new that touch *paths*, oldest first."""
    if not paths:
        return []
    return repo.rev_list(["--no-merges", "--full-history", "--reverse", "--topo-order", new, "--not", old, "--", *paths])


def upstream_patch_ids(repo: git.Repo, old: str, new: str, paths: Sequence[str], shapes: set[frozenset[str]] | None = None) -> dict[str, str]:
    """patch id → the oldest upstream commit of old..new with that patch id.

    A patch id covers the names of the files a diff touches, so only an
    upstream commit that changes exactly the files of one of *shapes* (the
    series' patches) can match: only those are diffed (git's own patch-id
    comparison skips by file names first for the same reason).
    """
    commits = upstream_commits(repo, old, new, paths)
    if shapes is not None and commits:
        changed = file_sets(repo, commits)
        commits = [c for c in commits if changed[c] in shapes]
    ids = patch_ids(repo, commits)
    result: dict[str, str] = {}
    for commit in commits:
        if commit in ids:
            result.setdefault(ids[commit], commit)
    return result


def containing_commit(repo: git.Repo, old: str, new: str, patch: Patch, paths: Sequence[str]) -> str | None:
    """The first upstream commit of old..new on whose tree *patch* reverse-applies (and no longer applies)."""
    candidates = upstream_commits(repo, old, new, paths)[:MAX_SEARCH]
    with TempIndex(repo) as index:
        for commit in candidates:
            index.read_tree(repo.tree_of(commit))
            if index.apply(patch, reverse=True, check=True).returncode == 0 and index.apply(patch, check=True).returncode != 0:
                return commit
    return None


def _subject(repo: git.Repo, commit: str | None) -> str:
    if not commit or not repo.has_object(commit, "commit"):
        return ""
    return CommitMeta.for_commit(repo.commit_info(commit)).subject


@dataclass
class Dropped:
    """A patch left out because upstream has it; *upstream* names the commit, when found."""

    name: str
    subject: str
    method: str  # patch-id | reverse-apply | empty | resolved-empty | skipped
    upstream: str | None = None
    upstream_subject: str = ""


# -- upstreamed ----------------------------------------------------------------------------


@dataclass
class UpstreamedReport:
    component: Component
    rev: str
    rev_commit: str
    patches: int
    upstreamed: list[Dropped] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "model": self.component.model,
            "component": self.component.key,
            "pin": self.component.commit,
            "rev": self.rev,
            "rev_commit": self.rev_commit,
            "patches": self.patches,
            "upstreamed": [
                {"name": d.name, "subject": d.subject, "upstream_commit": d.upstream, "upstream_subject": d.upstream_subject, "method": d.method} for d in self.upstreamed
            ],
            "conflicts": self.conflicts,
        }


def _inputs(project: Project, component: Component, cache: Cache | None) -> tuple[Cache, str, str, Series]:
    """What upstreamed and rebase both start from: the cache, the upstream URL, its label, the series."""
    cache = cache or Cache()
    url = resolve_upstream(component.upstream, project.root)
    return cache, url, f"{component.label} ({component.upstream})", read_series(project.root / component.patches, component.patches)


def upstreamed(project: Project, component: Component, rev: str | None, cache: Cache | None = None, progress: Progress | None = None) -> UpstreamedReport:
    """Patches of the series already in upstream between the pin and *rev* (default: ``track``)."""
    rev = rev or component.track
    if not rev:
        raise RebaseError(
            f"{component.label}: no upstream revision to compare with",
            details=[f"pass --rev REV, or add `track: <branch>` to the component in manifests/{component.model}.yaml"],
        )
    cache, url, display, series = _inputs(project, component, cache)
    if progress:
        progress(f"{component.label}: fetching {rev}")
    cache.ensure(url, [component.commit], display=display)
    repo, new = resolve_rev(cache, url, rev, display)
    report = UpstreamedReport(component, rev, new, len(series.patches))
    if not series.patches:
        return report
    chain = build_chain(repo, component, component.commit, series.patches)
    chain_files = file_sets(repo, chain)
    paths = sorted(set().union(*chain_files.values()))
    pids = chain_patch_ids(repo, chain)
    upstream = upstream_patch_ids(repo, component.commit, new, paths, set(chain_files.values()))
    with Replayer(repo, new, paths) as replay:
        for patch, commit in zip(series.patches, chain):
            hit = upstream.get(pids.get(commit, ""))
            if hit:
                report.upstreamed.append(Dropped(patch.name, patch.subject, "patch-id", hit, _subject(repo, hit)))
                continue
            ok, _ = replay.try_apply(patch)
            if ok:
                continue
            if replay.reverse_applies(patch):
                found = containing_commit(repo, component.commit, new, patch, sorted(chain_files[commit]))
                report.upstreamed.append(Dropped(patch.name, patch.subject, "reverse-apply", found, _subject(repo, found)))
            else:
                report.conflicts.append(patch.name)
    return report


# -- rebase: state ------------------------------------------------------------------------------


def state_dir(project: Project, component: Component) -> Path:
    return project.root / ".zmr" / "rebase" / f"{component.model}-{component.key}"


def _load(project: Project, component: Component) -> dict:
    folder = state_dir(project, component)
    path = folder / "state.json"
    if not path.is_file():
        raise RebaseError(f"{component.label}: no rebase in progress", details=[f"start one with `zmr rebase {component.model} -c {component.key} --onto REV`"])
    state = json.loads(path.read_text())
    if state.get("version") != STATE_VERSION:
        raise RebaseError(f"{path}: written by another zmr version", details=["finish the rebase with that version, or delete the folder"])
    return state


def _save(project: Project, component: Component, state: dict) -> None:
    atomic_write(state_dir(project, component) / "state.json", json.dumps(state, indent=1).encode())


def _snapshot(project: Project, component: Component, state: dict, co: workspace.Checkout | None, co_path: Path) -> None:
    """Save everything a rebase may change, then state.json, into the state folder in one rename."""
    final = state_dir(project, component)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # an interrupted start changed nothing else
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        manifest = _manifest_path(project, component)
        shutil.copyfile(manifest, tmp / "manifest.orig")
        folder = project.root / component.patches
        files = []
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    rel = path.relative_to(folder).as_posix()
                    target = tmp / "series" / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
                    files.append(rel)
        journal = workspace.journal_path(project, component)
        checkout = {"path": str(co_path), "existed": co is not None}
        if co is not None:
            shutil.copyfile(co.git_dir / "config", tmp / "checkout-config")
            symref = co.repo.run(["symbolic-ref", "--quiet", "HEAD"], check=False)
            checkout["head"] = symref.stdout.decode().strip() if symref.returncode == 0 else (co.head() or "")
            checkout["head_symbolic"] = symref.returncode == 0
            checkout["refs"] = co.repo.refs("refs/")
        state["saved"] = {"series_files": files, "journal_existed": journal.exists(), "checkout": checkout}
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _manifest_path(project: Project, component: Component) -> Path:
    return project.root / "manifests" / f"{component.model}.yaml"


def set_pin(project: Project, component: Component, old: str, new: str) -> None:
    """Edit just the text of the ``commit:`` value (its line from the manifest), atomically."""
    path = _manifest_path(project, component)
    display = f"manifests/{component.model}.yaml"
    data = path.read_bytes()
    lines = data.split(b"\n")
    index = component.commit_line - 1
    line = lines[index] if 0 <= index < len(lines) else b""
    if line.count(new.encode()) == 1 and old.encode() not in line:
        return  # done already (an interrupted finish)
    if line.count(old.encode()) != 1:
        raise RebaseError(
            f"{display}:{component.commit_line}: expected the pin {old} on this line",
            details=[
                f"the manifest changed during the rebase; set components.{component.key}.commit to {new} by hand and run --continue",
                "or undo the whole rebase with --abort",
            ],
        )
    lines[index] = line.replace(old.encode(), new.encode())
    atomic_write(path, b"\n".join(lines))
    manifest, problems = parse_manifest(path, project.root)
    if problems or manifest is None or manifest.components[component.key].commit != new:
        atomic_write(path, data)
        raise RebaseError(f"{display}: could not update the pin", details=[str(p) for p in problems] or ["the edited file did not read back; it is unchanged"])


def pick_component(project: Project, model: str, keys: Sequence[str] | None, in_progress: bool = False) -> Component:
    """The one component a rebase acts on: -c, the model's only one, or (with *in_progress*) the one being rebased."""
    manifest = project.manifests([model])[0]
    if not keys and in_progress:
        going = [c for c in manifest.components.values() if (state_dir(project, c) / "state.json").is_file()]
        if len(going) == 1:
            return going[0]
    if keys and len(keys) > 1:
        raise RebaseError("rebase one component at a time", details=[f"e.g. zmr rebase {model} -c {keys[0]} ..."])
    if keys:
        return manifest.component(keys[0])
    if len(manifest.components) == 1:
        return next(iter(manifest.components.values()))
    raise RebaseError(f"model {model!r} has several components; name one with -c", details=[f"components: {', '.join(manifest.components)}"])


# -- rebase: results -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """A finished rebase: what happened to each patch."""

    component: Component
    old: str
    new: str
    rev: str
    upstream: str
    upstream_count: int
    kept: list[tuple[str, str, str]] = field(default_factory=list)  # (name, subject, note)
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (name, subject, range-diff)
    added: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    path: str = "fast"  # pin-only (nothing to replay) | fast (in memory) | checkout (after conflicts)
    already: bool = False

    def to_json(self) -> dict:
        return {
            "status": "done",
            "model": self.component.model,
            "component": self.component.key,
            "old": self.old,
            "new": self.new,
            "rev": self.rev,
            "path": self.path,
            "kept": [{"name": n, "subject": s, "note": note} for n, s, note in self.kept],
            "changed": [{"name": n, "subject": s, "range_diff": d} for n, s, d in self.changed],
            "added": [{"name": n, "subject": s} for n, s in self.added],
            "dropped": [asdict(d) for d in self.dropped],
        }


@dataclass
class Stopped:
    """A rebase halted on a conflict, in the checkout."""

    component: Component
    name: str
    subject: str
    files: list[str]
    checkout: str
    new: str
    remaining: int
    dropped: list[Dropped] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "status": "stopped",
            "model": self.component.model,
            "component": self.component.key,
            "patch": self.name,
            "subject": self.subject,
            "files": self.files,
            "checkout": self.checkout,
            "remaining": self.remaining,
            "dropped": [asdict(d) for d in self.dropped],
        }


# -- rebase: start --------------------------------------------------------------------------------


def start(project: Project, component: Component, rev: str, cache: Cache | None = None, checkout_dir: Path | None = None, progress: Progress | None = None) -> Outcome | Stopped:
    """Replay the series onto *rev*; in memory when every patch applies."""
    folder = state_dir(project, component)
    if (folder / "state.json").is_file():
        raise RebaseError(
            f"{component.label}: a rebase is already in progress",
            details=[f"go on with `zmr rebase {component.model} -c {component.key} --continue`, or undo it with `--abort`"],
        )
    cache, url, display, series = _inputs(project, component, cache)
    old = component.commit
    co_path = workspace.checkout_path(project, component, checkout_dir)
    co = workspace.open_checkout(co_path)
    if co is not None:
        workspace.check_identity(co, component)
        workspace.check_not_half_refreshed(co, component)
        problems = workspace.dirty(co) + workspace.sync_state(project, component, co)[1]
        if problems:
            raise RebaseError(
                f"{workspace.show_path(project, co_path)}: the checkout has work that is not in the series",
                details=[*problems, f"export it first (`zmr export {component.model} -c {component.key}`), or discard it (`zmr checkout ... --force`)"],
            )
    if progress:
        progress(f"{component.label}: fetching {rev}")
    cache.ensure(url, [old], display=display)
    repo, new = resolve_rev(cache, url, rev, display)
    if new == old:
        return Outcome(component, old, new, rev, component.upstream, 0, already=True)
    if progress:
        progress(f"{component.label}: replaying {len(series.patches)} patches on {new[:12]}")
    files = workspace.patch_file_sets(repo, series.patches)
    if co is None and _files_stand(repo, series, old, new, files):
        return _pin_only(project, component, repo, series, old, new, rev)
    old_chain = build_chain(repo, component, old, series.patches, files)
    chain_files = file_sets(repo, old_chain)
    paths = sorted(set().union(*chain_files.values()))
    upstream = upstream_patch_ids(repo, old, new, paths, set(chain_files.values()))
    # No upstream commit changes the same files as a patch: nothing can have landed, no ids to compare.
    pids = chain_patch_ids(repo, old_chain) if upstream else {}
    dropped: list[Dropped] = []
    made: list[tuple[str, bool | None]] = []  # per commit of the replay: its patch; applied at an offset (None: unknown)
    conflict_at = None
    if co is None and not any(upstream.get(pids.get(c, "")) for c in old_chain) and workspace.series_applies(repo, new, series.patches, paths, in_place=True):
        # Every hunk applies where it was: a replay would commit these patches and export the same bytes.
        return _pin_only(project, component, repo, series, old, new, rev)
    hits = [upstream.get(pids.get(commit, "")) for commit in old_chain]
    batched: dict[int, bool | None] = {}  # patch index → moved, for patches applied along with an earlier one
    with Replayer(repo, new, paths) as replay:
        for i, (patch, commit) in enumerate(zip(series.patches, old_chain)):
            if hits[i]:
                dropped.append(Dropped(patch.name, patch.subject, "patch-id", hits[i], _subject(repo, hits[i])))
                continue
            files: frozenset[str] | None = chain_files[commit]
            if i in batched:
                ok, moved = True, batched.pop(i)
            else:
                # The patches from here that change files none of the others change go in one git apply.
                run = workspace.disjoint_run([chain_files[c] for c in old_chain], i, lambda j: not hits[j] and series.patches[j].strip == patch.strip)
                moved_each = replay.apply_together([series.patches[j] for j in run], [chain_files[old_chain[j]] for j in run]) if len(run) > 1 else None
                if moved_each is not None:
                    batched = dict(zip(run[1:], moved_each[1:]))
                    ok, moved = True, moved_each[0]
                else:
                    files = None
                    ok, _ = replay.try_apply(patch, verbose=True)
                    moved = replay.moved
            if ok:
                if not replay.changed(files):
                    found = containing_commit(repo, old, new, patch, sorted(chain_files[commit]))
                    dropped.append(Dropped(patch.name, patch.subject, "empty", found, _subject(repo, found)))
                else:
                    replay.commit(patch, files)
                    made.append((patch.name, moved))
                continue
            if replay.reverse_applies(patch):
                found = containing_commit(repo, old, new, patch, sorted(chain_files[commit]))
                dropped.append(Dropped(patch.name, patch.subject, "reverse-apply", found, _subject(repo, found)))
                continue
            conflict_at = i
            break
        partial = replay.tip
        replayed = [[commit, name, moved] for commit, (name, moved) in zip(replay.commits, made)]
    state = {
        "version": STATE_VERSION,
        "model": component.model,
        "component": component.key,
        "old": old,
        "new": new,
        "rev": rev,
        "url": url,
        "old_chain": old_chain,
        "names": [p.name for p in series.patches],
        "subjects": [p.subject for p in series.patches],
        "dropped": [asdict(d) for d in dropped],
        "upstream_count": int(repo.out(["rev-list", "--count", new, "--not", old])),
    }
    if conflict_at is None:
        state.update({"phase": "finalize", "path": "fast", "new_tip": partial, "replayed": replayed})
        _snapshot(project, component, state, co, co_path)
        return _finalize(project, component, state, cache, progress)
    later = [j for j in range(conflict_at + 1, len(series.patches)) if upstream.get(pids.get(old_chain[j], ""))]
    for j in later:
        hit = upstream[pids[old_chain[j]]]
        state["dropped"].append(asdict(Dropped(series.patches[j].name, series.patches[j].subject, "patch-id", hit, _subject(repo, hit))))
    state.update(
        {
            "phase": "picking",
            "path": "checkout",
            "partial": partial,
            "prepared": False,
            "remaining": [j for j in range(conflict_at, len(series.patches)) if j not in later],
            "stopped": None,
        }
    )
    _snapshot(project, component, state, co, co_path)
    return _run(project, component, state, cache, progress)


def _files_stand(repo: git.Repo, series: Series, old: str, new: str, files: list[frozenset[str]] | None) -> bool:
    """The series' files (*files*: each patch's) are byte for byte as they were, and the series applies to the old pin:
    so it applies to the new one exactly as it did (checked without building its commits: a first rebase needs none)."""
    if files is None:
        return False
    paths = sorted(set().union(*files))
    if not files_unchanged(repo, old, new, paths):
        return False
    if workspace.kept_chain(repo, old, series.patches) is not None:
        return True  # it applied when its commits were made
    return workspace.series_applies(repo, old, series.patches, paths)


def _pin_only(project: Project, component: Component, repo: git.Repo, series: Series, old: str, new: str, rev: str) -> Outcome:
    set_pin(project, _reload(project, component), old, new)
    count = int(repo.out(["rev-list", "--count", new, "--not", old]))
    kept = [(p.name, p.subject, "") for p in series.patches]
    return Outcome(component, old, new, rev, component.upstream, count, kept=kept, path="pin-only")


def _checkout_of(state: dict) -> Path:
    return Path(state["saved"]["checkout"]["path"])


def _prepare(project: Project, component: Component, state: dict, cache: Cache) -> workspace.Checkout:
    """The checkout at the new pin with the patches replayed so far; the old commits fetched for cherry-pick."""
    path = _checkout_of(state)
    mirror = cache.mirror_for(state["url"])
    branch = workspace.branch_name(component)
    config = workspace.config_values(project, component, branch)
    config["zmr.pin"] = state["new"]
    extra = [state["old_chain"][-1]] if state["old_chain"] else []
    co = workspace.open_checkout(path)
    if co is None:
        workspace.create_checkout(path, mirror.path, branch, state["new"], state["partial"], config, extra=extra)
        co = workspace.open_checkout(path)
        assert co is not None
    else:
        workspace.refresh(co, mirror.path, branch, state["new"], state["partial"], config, clean=False, extra_objects=extra)
    state["prepared"] = True
    _save(project, component, state)
    return co


def _run(project: Project, component: Component, state: dict, cache: Cache, progress: Progress | None) -> Outcome | Stopped:
    co = workspace.open_checkout(_checkout_of(state)) if state.get("prepared") else None
    if co is None or (co.git_dir / workspace.REFRESH_MARKER).exists():
        if progress:
            progress(f"{component.label}: preparing the checkout for conflict resolution")
        co = _prepare(project, component, state, cache)
    while state["remaining"]:
        index = state["remaining"][0]
        commit = state["old_chain"][index]
        if progress:
            progress(f"{component.label}: cherry-picking {state['names'][index]}")
        state["stopped"] = {"index": index, "head_before": co.head(), "conflict": False, "files": []}
        _save(project, component, state)
        proc = co.repo.run(["cherry-pick", "--allow-empty-message", commit], check=False, env={"GIT_EDITOR": "true"})
        if proc.returncode == 0:
            state["remaining"].pop(0)
            state["stopped"] = None
            _save(project, component, state)
            continue
        files = _unmerged(co)
        if files:
            state["stopped"].update({"conflict": True, "files": files})
            _save(project, component, state)
            return Stopped(
                component,
                state["names"][index],
                state["subjects"][index],
                files,
                workspace.show_path(project, co.path),
                state["new"],
                len(state["remaining"]) - 1,
                [Dropped(**d) for d in state["dropped"]],
            )
        if (co.git_dir / "CHERRY_PICK_HEAD").exists() and co.repo.ok(["diff", "--cached", "--quiet"]):
            co.repo.run(["cherry-pick", "--skip"])
            _drop_current(project, component, state, cache, "empty")
            continue
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RebaseError(
            f"{component.label}: cherry-pick of {state['names'][index]} failed in {co.path}",
            details=[*err[-6:], f"fix the checkout, then `zmr rebase {component.model} -c {component.key} --continue` (or --abort)"],
        )
    return _finalize(project, component, state, cache, progress)


def _unmerged(co: workspace.Checkout) -> list[str]:
    out = co.repo.run(["diff", "--name-only", "--diff-filter=U", "-z"]).stdout.decode("utf-8", "surrogateescape")
    return sorted({p for p in out.split("\0") if p})


def _drop_current(project: Project, component: Component, state: dict, cache: Cache, method: str) -> None:
    index = state["remaining"].pop(0)
    repo = cache.mirror_for(state["url"]).repo
    patch = _old_patch(project, component, state, index)
    found = None
    if patch is not None and method in ("empty", "resolved-empty"):
        commit = state["old_chain"][index]
        found = containing_commit(repo, state["old"], state["new"], patch, sorted(file_sets(repo, [commit])[commit]))
    state["dropped"].append(asdict(Dropped(state["names"][index], state["subjects"][index], method, found, _subject(repo, found))))
    state["stopped"] = None
    _save(project, component, state)


def _old_patch(project: Project, component: Component, state: dict, index: int) -> Patch | None:
    """The patch as it was before the rebase (from the saved copy of the series)."""
    from zmr.series import load_patch

    path = state_dir(project, component) / "series" / state["names"][index]
    if not path.is_file():
        return None
    saved_series = state_dir(project, component) / "series" / "series"
    series_text = saved_series.read_text() if saved_series.is_file() else ""
    strip = 1
    for line in series_text.splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0] == state["names"][index]:
            strip = next((int(w[2:]) for w in words[1:] if re.fullmatch(r"-p\d+", w)), 1)
    return load_patch(path, state["names"][index], strip, state["names"][index])


# -- rebase: continue and abort --------------------------------------------------------------------


def resume(project: Project, component: Component, cache: Cache | None = None, progress: Progress | None = None) -> Outcome | Stopped:
    """``--continue``: take the engineer's resolution, replay the rest, finish."""
    cache = cache or Cache()
    state = _load(project, component)
    if state["phase"] == "finalize":
        return _finalize(project, component, state, cache, progress)
    stopped = state.get("stopped")
    if stopped and state.get("prepared"):
        co = workspace.open_checkout(_checkout_of(state))
        if co is None:
            raise RebaseError(f"{_checkout_of(state)}: the checkout of the rebase is gone", details=[f"undo the rebase with `zmr rebase {component.model} -c {component.key} --abort`"])
        index = stopped["index"]
        commit = state["old_chain"][index]
        where = workspace.show_path(project, co.path)
        if (co.git_dir / "CHERRY_PICK_HEAD").exists():
            files = _unmerged(co)
            if files:
                raise RebaseError(
                    f"{where}: conflicts in {', '.join(files)} are not resolved yet",
                    details=["edit the files, `git add` them, then run --continue again"],
                )
            marked = [f for f in stopped.get("files", []) if _has_markers(co.path / f)]
            if marked:
                raise RebaseError(f"{where}: conflict markers left in {', '.join(marked)}", details=["remove them, `git add` the files, then run --continue again"])
            unstaged = co.repo.run(["diff", "--name-only", "-z"]).stdout.decode("utf-8", "surrogateescape").split("\0")
            unstaged = [f for f in unstaged if f]
            if unstaged:
                raise RebaseError(f"{where}: changes not staged in {', '.join(unstaged)}", details=["`git add` them (or `git checkout -- FILE` to drop them), then run --continue again"])
            if co.repo.ok(["diff", "--cached", "--quiet"]):
                co.repo.run(["cherry-pick", "--skip"])
                _drop_current(project, component, state, cache, "resolved-empty")
            else:
                co.repo.run(["commit", "--quiet", "--no-verify", "--cleanup=verbatim", "-C", commit])
                state["remaining"].pop(0)
                state["stopped"] = None
                _save(project, component, state)
        elif workspace.dirty(co, untracked_files=False):
            raise RebaseError(f"{where}: the working tree is not clean", details=[*workspace.dirty(co, untracked_files=False), "commit or drop those changes, then run --continue again"])
        elif co.head() != stopped["head_before"]:
            state["remaining"].pop(0)  # the engineer committed the resolution (git cherry-pick --continue / git commit)
            state["stopped"] = None
            _save(project, component, state)
        elif stopped.get("conflict"):
            _drop_current(project, component, state, cache, "skipped")
        # else: interrupted before the cherry-pick ran: it runs again below.
    return _run(project, component, state, cache, progress)


def _has_markers(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in data.split(b"\n"))


def abort(project: Project, component: Component) -> None:
    """Put pin, series and checkout back exactly as they were before the rebase started."""
    state = _load(project, component)
    folder = state_dir(project, component)
    saved = state["saved"]
    # The series folder: saved files back, files the rebase added removed.
    series_folder = project.root / component.patches
    saved_files = set(saved["series_files"])
    if series_folder.is_dir():
        for path in sorted(series_folder.rglob("*"), reverse=True):
            rel = path.relative_to(series_folder).as_posix()
            if path.is_file() and rel not in saved_files and (path.suffix in (".patch", ".diff") or path.name == "series"):
                path.unlink()
    for rel in saved_files:
        data = (folder / "series" / rel).read_bytes()
        target = series_folder / rel
        if not target.is_file() or target.read_bytes() != data:
            atomic_write(target, data)
    journal = workspace.journal_path(project, component)
    if journal.exists() and not saved["journal_existed"]:
        journal.unlink()
    manifest = _manifest_path(project, component)
    original = (folder / "manifest.orig").read_bytes()
    if manifest.read_bytes() != original:
        atomic_write(manifest, original)
    _restore_checkout(saved["checkout"], folder)
    shutil.rmtree(folder)


def _restore_checkout(saved: dict, folder: Path) -> None:
    path = Path(saved["path"])
    if not saved["existed"]:
        # Nothing was there when the rebase started: all of it is the rebase's (a half-deleted one too).
        if path.exists():
            shutil.rmtree(path)
        for stale in path.parent.glob(f".{path.name}.zmr-tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return
    co = workspace.open_checkout(path) if path.exists() else None
    if co is None:
        raise RebaseError(f"{path}: the checkout is gone; nothing to restore there", details=[f"delete {folder} to forget the rebase"])
    for args in (["cherry-pick", "--quit"], ["rebase", "--quit"], ["am", "--quit"]):
        co.repo.run(args, check=False)
    atomic_write(co.git_dir / "config", (folder / "checkout-config").read_bytes())
    current = co.repo.refs("refs/")
    wanted: dict[str, str] = saved["refs"]
    updates = [git.RefUpdate(ref, wanted.get(ref), current.get(ref)) for ref in sorted(set(current) | set(wanted)) if current.get(ref) != wanted.get(ref)]
    co.repo.update_refs(updates, "zmr rebase --abort")
    if saved.get("head_symbolic"):
        co.repo.run(["symbolic-ref", "HEAD", saved["head"]])
    elif saved.get("head"):
        co.repo.run(["update-ref", "--no-deref", "HEAD", saved["head"]])
    co.repo.run(["reset", "--quiet", "--hard", "HEAD"])
    marker = co.git_dir / workspace.REFRESH_MARKER
    if marker.exists():
        marker.unlink()


# -- rebase: finish -------------------------------------------------------------------------------


def _finalize(project: Project, component: Component, state: dict, cache: Cache, progress: Progress | None) -> Outcome:
    """Export the result into the series, move the pin, move the checkout, report."""
    if state["phase"] != "finalize":
        state["phase"] = "finalize"
        _save(project, component, state)
    old, new = state["old"], state["new"]
    mirror = cache.mirror_for(state["url"])
    folder = project.root / component.patches
    journal = workspace.journal_path(project, component)
    if progress:
        progress(f"{component.label}: writing the series")
    if state["path"] == "fast":
        repo = mirror.repo
        tip = state["new_tip"]
        made = [commit for commit, _, _ in state.get("replayed", [])]
        # The replay's own list, when it has one (a walk of new..tip can take long on a big history).
        commits = made if made and made[-1] == tip else repo.commits_between(new, tip)
        # A moved flag of None: git's report could not say; export replays that patch itself.
        replayed = {commit: (name, moved) for commit, name, moved in state.get("replayed", []) if moved is not None}
        plan = workspace.plan_export(repo, new, commits, folder, component.patches, journal, replayed)
    else:
        co = workspace.open_checkout(_checkout_of(state))
        if co is None:
            raise RebaseError(f"{_checkout_of(state)}: the checkout of the rebase is gone", details=[f"undo the rebase with `zmr rebase {component.model} -c {component.key} --abort`"])
        problems = workspace.dirty(co, untracked_files=False)
        if problems:
            raise RebaseError(f"{co.path}: the working tree is not clean", details=[*problems, f"commit or drop the changes, then `zmr rebase {component.model} -c {component.key} --continue`"])
        repo = co.repo
        tip = co.head() or new
        if not repo.ok(["merge-base", "--is-ancestor", new, tip]):
            raise RebaseError(f"{co.path}: HEAD is not on top of the new pin {new[:12]}", details=["reset the branch onto it, or --abort"])
        commits = workspace.list_commits(repo, new, tip, component.label)
        plan = workspace.plan_export(repo, new, commits, folder, component.patches, journal)
    if plan.changed or plan.pending:
        workspace.write_plan(plan, journal)
    fresh = _reload(project, component)
    set_pin(project, fresh, old, new)
    outcome = _outcome(component, state, repo, tip, plan)
    co = workspace.open_checkout(_checkout_of(state))
    if co is not None:
        config = {"zmr.pin": new}
        if state["path"] == "fast":
            branch = workspace.branch_name(component)
            full = workspace.config_values(project, component, branch)
            full["zmr.pin"] = new
            workspace.refresh(co, mirror.path, branch, new, tip, full, clean=False)
        else:
            co.set_config(config)
            co.repo.update_refs([git.RefUpdate(workspace.EXPORTED_REF, tip, co.exported())] if co.exported() != tip else [], "zmr rebase")
    shutil.rmtree(state_dir(project, component))
    return outcome


def _reload(project: Project, component: Component) -> Component:
    manifest, problems = parse_manifest(_manifest_path(project, component), project.root)
    if manifest is None or component.key not in manifest.components:
        raise RebaseError(f"manifests/{component.model}.yaml: no longer valid", details=[str(p) for p in problems] + ["fix it, then run --continue again"])
    return manifest.components[component.key]


def _outcome(component: Component, state: dict, repo: git.Repo, tip: str, plan: workspace.ExportPlan) -> Outcome:
    old, new = state["old"], state["new"]
    old_chain = state["old_chain"]
    dropped = [Dropped(**d) for d in state["dropped"]]
    dropped_names = {d.name for d in dropped}
    outcome = Outcome(component, old, new, state["rev"], component.upstream, state.get("upstream_count", 0), dropped=dropped, path=state["path"])
    by_subject = {}
    for name, subject, commit in zip(state["names"], state["subjects"], old_chain):
        if name not in dropped_names:
            by_subject.setdefault(subject, (name, commit))
    if state["path"] == "fast" and all(item.status in ("unchanged", "refreshed") for item in plan.patches):
        # Each commit is a patch of the series that applied as it is (git apply never fuzzes): the same change.
        same = {item.commit for item in plan.patches}
    else:
        old_ids = chain_patch_ids(repo, old_chain)
        new_ids = patch_ids(repo, [p.commit for p in plan.patches])
        old_by_pid = {old_ids.get(c): n for n, c in zip(state["names"], old_chain) if old_ids.get(c)}
        same = {item.commit for item in plan.patches if new_ids.get(item.commit) in old_by_pid}
    differs = old_chain and any(item.commit not in same for item in plan.patches)
    range_diff = _range_diff(repo, old, old_chain[-1], new, tip) if differs else {}
    for item in plan.patches:
        if item.commit in same:
            note = "refreshed: same change, new line numbers" if item.data is not None else ""
            outcome.kept.append((item.name, item.subject, note))
        elif item.old_name or item.subject in by_subject:
            outcome.changed.append((item.name, item.subject, range_diff.get(item.commit, "")))
        else:
            outcome.added.append((item.name, item.subject))
    return outcome


_RANGE_HEAD_RE = re.compile(r"^\s*(?:-|\d+):\s+(?:-+|[0-9a-f]+) [<>=!] \s*(?:-|\d+):\s+(-+|[0-9a-f]+) ")


def _range_diff(repo: git.Repo, old_base: str, old_tip: str, new_base: str, new_tip: str) -> dict[str, str]:
    """``git range-diff`` old series vs new series: new commit → its block of the output."""
    proc = repo.run(["range-diff", "--no-color", f"{old_base}..{old_tip}", f"{new_base}..{new_tip}"], check=False)
    if proc.returncode != 0:
        return {}
    blocks: dict[str, str] = {}
    current = None
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        match = _RANGE_HEAD_RE.match(line)
        if match:
            current = match.group(1) if not match.group(1).startswith("-") else None
            if current:
                blocks[current] = line + "\n"
            continue
        if current:
            blocks[current] += line + "\n"
    return blocks
