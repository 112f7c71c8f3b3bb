"""Smoke tests: run the declared commands in clean trees of the built release branches.

Pipeline of ``zmr smoke`` (docs/reference.md §2.3 ``smoke:`` keys, §9)::

    manifests ──select──▶ jobs (one per test) ──compute, build if stale──▶ commit per component
        ──executor (local threads | Ray tasks)──▶ results
        ──▶ summary, --json, --junit FILE, --record (cases/<model>/evidence/smoke-<test>.json)

Jobs. A component test (``components.<c>.smoke``) runs with cwd = a tree of
that component's release branch; a model test (top-level ``smoke:``) gets one
tree per component it ``needs`` and runs with cwd = the repository root. A
job's id is ``<component>.<name>`` or ``<name>``; its log is
``$ZMR_ARTIFACTS/<id>.log`` and its evidence ``smoke-<id>.json``.

Trees. Every tree is a detached ``git worktree`` of the release *commit*
(never the branch name, so a concurrent build cannot change what runs),
made in a private temporary folder, fresh for each job, and removed when the
job ends -- also on Ctrl-C or SIGTERM. The user's checkout, index and
branches are never touched; only git's worktree bookkeeping gains entries for
the duration of a run.

Processes. A test's ``run:`` goes through ``zmr.infra.procgroup.run_command``:
``/bin/sh -c RUN`` in its own process group, output to the log, stdin closed;
on timeout or cancel the whole group is ended (SIGTERM, then SIGKILL after
``ZMR_SMOKE_KILL_GRACE`` seconds, default 10), and so are processes a test
leaves behind.

Executors. ``run`` takes the executor that runs the jobs: ``LocalExecutor``
(threads here) or ``zmr.smoke.ray_executor.RayExecutor`` (Ray tasks); the caller (the
CLI) chooses and builds it. Both satisfy ``Executor``.

Environment of a test: the caller's, without git variables that would
redirect git inside a tree, with the directory of the running interpreter
first on ``PATH``; then the test's ``env:``; then the reserved ``ZMR_*``
variables (``ZMR_MODEL``, ``ZMR_TEST``, ``ZMR_EXECUTOR``, ``ZMR_ARTIFACTS``,
``ZMR_TREE_<COMPONENT>`` and ``ZMR_COMMIT_<COMPONENT>`` per tree, and for
component tests ``ZMR_COMPONENT``, ``ZMR_TREE``, ``ZMR_COMMIT``).

Mismatch metrics. A test may write ``zmr mismatch --json`` reports as
``*.mismatch.json`` under ``$ZMR_ARTIFACTS``; those created or changed while
it ran are attached to its result. When tests of one model run in parallel,
name them ``<test id>.<anything>.mismatch.json`` or put them in
``$ZMR_ARTIFACTS/<test id>/`` so each is claimed by its own test.

This module imports only the standard library and small zmr modules
(``errors``, ``files``, ``procgroup``) at import time: Ray workers import it
for ``smoke_environment`` and need nothing else. It never imports
``zmr.smoke.ray_executor``; that module imports this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypedDict
from xml.etree import ElementTree as ET

from zmr.infra.errors import ZmrError
from zmr.infra.files import MAX_JSON_BYTES, FileRefused, atomic_write, parse_json, read_repo_file
from zmr.infra import reports
from zmr.infra.git import Progress
from zmr.infra.procgroup import ERROR, FAILED, PASSED, STATUSES, TIMEOUT, kill_grace, run_command

if TYPE_CHECKING:  # pragma: no cover
    from zmr.infra import git
    from zmr.infra.cache import Cache
    from zmr.model.manifest import Component, Manifest, SmokeTest
    from zmr.model.project import Project

SCHEMA_VERSION = 1
EXECUTORS = ("local", "ray")
MISMATCH_SUFFIX = ".mismatch.json"
EVIDENCE_PREFIX = "smoke-"
# JUnit: how much of a log goes into <system-out> and into a failure's text.
JUNIT_LOG_BYTES = 1 << 20
TAIL_LINES = 50
# Inherited variables that would point git inside a tree at another repository.
_GIT_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)
_RESERVED_PREFIXES = ("ZMR_TREE_", "ZMR_COMMIT_")
_RESERVED = ("ZMR_MODEL", "ZMR_TEST", "ZMR_EXECUTOR", "ZMR_ARTIFACTS", "ZMR_COMPONENT", "ZMR_TREE", "ZMR_COMMIT")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class Interrupted(ZmrError):
    """Ctrl-C or SIGTERM stopped the run; its tests were killed and its trees removed."""

    exit_code = 130


# -- data model ------------------------------------------------------------------------


class TreeJson(TypedDict):
    """A tree a test ran in: the component's release branch and its tip when the run started, the upstream as the
    manifest writes it and the pinned upstream commit."""

    component: str
    branch: str
    commit: str
    upstream: str
    upstream_commit: str


class MismatchMetricsJson(TypedDict):
    """A ``zmr mismatch --json`` report a test wrote (*file*, under its artifacts): its keys as the file has them (the
    file is the test's: zmr passes them on unjudged)."""

    file: str
    schema_version: Any
    verdict: Any
    bitwise_equal: Any
    overall: dict[str, Any]


class SmokeRecordJson(TypedDict):
    """One smoke test's result, host-independent (what ``--record`` writes, after its ``schema_version`` and ``kind``):
    the test, the component it belongs to (null: a model test) and those whose trees it got, their branches and
    commits, what ran and with what, the status (passed, failed, timeout, error) and exit code (null: none), when and
    how long, the mismatch reports it wrote, the zmr version."""

    model: str
    test: str
    id: str
    component: str | None
    components: list[str]
    branches: dict[str, str]
    commits: dict[str, str]
    key: str
    trees: list[TreeJson]
    run: str
    timeout: float
    resources: dict[str, float]
    env: dict[str, str]
    status: str
    exit_code: int | None
    message: str
    start: str
    duration: float
    executor: str
    mismatch: list[MismatchMetricsJson]
    zmr_version: str


class SmokeTestJson(SmokeRecordJson):
    """A test's result in ``zmr smoke --json``: the record, its JUnit class name, its log (null: none) and notes."""

    classname: str
    log: str | None
    notes: list[str]


class SmokeJson(TypedDict):
    """``ok``: every test passed; the executor, when the run started and how long it took, the count per status (and
    ``total``), the branches this run built, the artifacts folder per model, the evidence files written, every test."""

    ok: bool
    executor: str
    start: str
    duration: float
    counts: dict[str, int]
    built: list[str]
    artifacts: dict[str, str]
    evidence: list[str]
    tests: list[SmokeTestJson]


@dataclass(frozen=True)
class Tree:
    """The release commit a job's tree is made from (one per needed component)."""

    component: str
    branch: str
    commit: str  # the release branch's tip when the run started
    upstream: str  # as written in the manifest
    pin: str  # the pinned upstream commit

    def to_json(self) -> TreeJson:
        return {"component": self.component, "branch": self.branch, "commit": self.commit, "upstream": self.upstream, "upstream_commit": self.pin}


@dataclass(frozen=True)
class Job:
    """One smoke test to run: its manifest entry and the trees it gets."""

    model: str
    test: SmokeTest
    component: str | None  # set for component tests
    needs: tuple[str, ...]  # components whose trees the test gets
    trees: tuple[Tree, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.component}.{self.test.name}" if self.component else self.test.name

    @property
    def classname(self) -> str:
        return f"{self.model}.{self.component}" if self.component else self.model

    @property
    def label(self) -> str:
        return f"{self.model}/{self.id}"

    @property
    def commits(self) -> dict[str, str]:
        return {t.component: t.commit for t in self.trees}

    @property
    def key(self) -> str:
        """What a result is keyed by: the commit id of each tree it ran on."""
        return ",".join(f"{t.component}@{t.commit}" for t in sorted(self.trees, key=lambda t: t.component))

    @property
    def resources(self) -> dict[str, float]:
        return dict(self.test.resources)


@dataclass
class Result:
    """A finished job, as reported and recorded."""

    job: Job
    status: str
    exit_code: int | None
    start: str  # UTC ISO 8601
    duration: float
    message: str
    executor: str
    log: Path | None = None
    mismatch: list[MismatchMetricsJson] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == PASSED

    def record(self) -> dict[str, Any]:
        """The host-independent record ``--record`` writes: ``schema_version``, ``kind``, then `fields`."""
        return {"schema_version": SCHEMA_VERSION, "kind": "zmr-smoke", **self.fields()}

    def fields(self) -> SmokeRecordJson:
        """The record's keys, which ``--json`` lists too."""
        job = self.job
        return {
            "model": job.model,
            "test": job.test.name,
            "id": job.id,
            "component": job.component,
            "components": list(job.needs),
            "branches": {t.component: t.branch for t in job.trees},
            "commits": job.commits,
            "key": job.key,
            "trees": [t.to_json() for t in job.trees],
            "run": job.test.run,
            "timeout": job.test.timeout,
            "resources": job.resources,
            "env": dict(job.test.env),
            "status": self.status,
            "exit_code": self.exit_code,
            "message": self.message,
            "start": self.start,
            "duration": round(self.duration, 3),
            "executor": self.executor,
            "mismatch": self.mismatch,
            "zmr_version": _zmr_version(),
        }


@dataclass
class Report(reports.Report):
    """Every result of one ``zmr smoke`` run, in job order."""

    results: list[Result]
    executor: str
    start: str
    duration: float
    artifacts: dict[str, Path] = field(default_factory=dict)  # model -> folder
    built: list[str] = field(default_factory=list)  # branches built by this run
    evidence: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for r in self.results:
            counts[r.status] += 1
        counts["total"] = len(self.results)
        return counts

    schema_version = SCHEMA_VERSION

    def to_json(self) -> SmokeJson:
        tests: list[SmokeTestJson] = [
            {**r.fields(), "classname": r.job.classname, "log": str(r.log) if r.log else None, "notes": r.notes} for r in self.results
        ]
        return {
            "ok": self.ok,
            "executor": self.executor,
            "start": self.start,
            "duration": round(self.duration, 3),
            "counts": self.counts(),
            "built": self.built,
            "artifacts": {m: str(p) for m, p in self.artifacts.items()},
            "evidence": [str(p) for p in self.evidence],
            "tests": tests,
        }

    def failed(self) -> bool:
        """The check failed: a test did not pass (`zmr smoke` exits 1)."""
        return any(not r.ok for r in self.results)

    def reason(self) -> str:
        """Why it failed, in one line ('' when all passed); `details` has a line per test that did not pass."""
        bad = [r for r in self.results if not r.ok]
        if not bad:
            return ""
        counts = self.counts()
        what = ", ".join(f"{counts[s]} {s}" for s in (FAILED, TIMEOUT, ERROR) if counts[s])
        return f"{len(bad)} of {len(self.results)} smoke test{'s' if len(self.results) != 1 else ''} did not pass ({what})"

    def details(self) -> list[str]:
        return [f"{r.status:7} {r.job.label}: {r.message}" + (f" (log: {r.log})" if r.log else "") for r in self.results if not r.ok]


# -- selecting jobs ----------------------------------------------------------------------


def select(manifests: Sequence[Manifest], components: Sequence[str] | None = None, only: Sequence[str] | None = None) -> list[Job]:
    """The jobs of *manifests*, filtered.

    ``components``: only the tests of these components, and the model tests
    whose ``needs`` all lie among them. ``only``: tests whose name or id is
    listed; a name that matches nothing is an error.
    """
    jobs: list[Job] = []
    wanted = set(components or ())
    for manifest in manifests:
        if wanted and len(manifests) == 1:
            for key in wanted:
                manifest.component(key)  # raises naming the known components
        model_jobs = []
        for comp in manifest.components.values():
            if wanted and comp.key not in wanted:
                continue
            for test in comp.smoke:
                model_jobs.append(Job(manifest.model, test, comp.key, (comp.key,)))
        for test in manifest.smoke:
            if wanted and not set(test.needs) <= wanted:
                continue
            model_jobs.append(Job(manifest.model, test, None, tuple(test.needs)))
        seen: dict[str, Job] = {}
        for job in model_jobs:
            if job.id in seen:
                raise ZmrError(
                    f"{manifest.path.name}: smoke test id {job.id!r} is used twice (model test {job.test.name!r} and component test {seen[job.id].id!r})",
                    details=["rename the model-level test; ids name logs and evidence files"],
                )
            seen[job.id] = job
        jobs.extend(model_jobs)
    if wanted and not any(c in m.components for m in manifests for c in wanted):
        raise ZmrError(f"no component named {', '.join(sorted(wanted))} in the selected models")
    if only:
        names = set(only)
        unknown = sorted(n for n in names if not any(n in (j.test.name, j.id) for j in jobs))
        if unknown:
            known = ", ".join(sorted({j.id for j in jobs})) or "none"
            raise ZmrError(f"no smoke test named {', '.join(repr(n) for n in unknown)} in the selection", details=[f"tests: {known}"])
        jobs = [j for j in jobs if j.test.name in names or j.id in names]
    return jobs


# -- building what the jobs need -----------------------------------------------------------


def prepare(
    project: Project, manifests: Sequence[Manifest], jobs: Sequence[Job], *, build: bool = True, cache: Cache | None = None, progress: Progress | None = None
) -> tuple[list[Job], list[str]]:
    """Make sure every needed release branch is built and current; give each job its trees.

    A branch is current when it points at what ``zmr.ops.build.compute`` gives for
    the manifest and series as they are now. Stale or missing branches are
    built with ``zmr.ops.build.build`` (all in one transaction), or, with
    ``build=False``, refused (exit 2). Returns (jobs with trees, branches built).
    """
    import zmr.ops.build
    from zmr.infra.cache import Cache

    by_model = {m.model: m for m in manifests}
    needed: dict[tuple[str, str], Component] = {}
    for job in jobs:
        for key in job.needs:
            needed[(job.model, key)] = by_model[job.model].components[key]
    if not needed:
        return list(jobs), []
    cache = cache or Cache()
    repo = project.repo
    tips: dict[tuple[str, str], str] = {}
    stale: list[tuple[Component, str | None]] = []
    for ident, comp in needed.items():
        rel = zmr.ops.build.compute(project, comp, cache, progress)
        tips[ident] = rel.tip
        current = repo.ref_value(rel.ref)
        if current != rel.tip:
            stale.append((comp, current))
    built: list[str] = []
    if stale:
        if not build:
            lines = [
                f"{comp.branch}: {'missing' if cur is None else f'at {cur[:12]}, the manifest and series give {tips[(comp.model, comp.key)][:12]}'}"
                for comp, cur in stale
            ]
            models = sorted({comp.model for comp, _ in stale})
            raise ZmrError(
                f"{len(stale)} release branch{'es are' if len(stale) != 1 else ' is'} not built or out of date, and --no-build was given",
                details=[*lines, f"run `zmr build {' '.join(models)}` first, or drop --no-build"],
            )
        updates = zmr.ops.build.build(project, [comp for comp, _ in stale], cache, progress)
        built = [u.branch for u in updates if u.status != "unchanged"]
    result = []
    for job in jobs:
        manifest = by_model[job.model]
        trees = []
        for key in job.needs:
            comp = manifest.components[key]
            trees.append(Tree(key, comp.branch, tips[(job.model, key)], comp.upstream, comp.commit))
        result.append(Job(job.model, job.test, job.component, job.needs, tuple(trees)))
    return result, built


# -- trees ------------------------------------------------------------------------------------


def _worktree_add(repo: git.Repo, path: Path, commit: str) -> None:
    # --detach: no branch is created or checked out; the tree is the commit's.
    repo.worktree_add(path, commit, hint="the tree of a smoke test could not be created")


def _worktree_remove(repo: git.Repo, path: Path) -> bool:
    return repo.worktree_remove(path)


def _worktree_paths(repo: git.Repo) -> list[Path]:
    return [Path(tree["worktree"]) for tree in repo.worktrees()]


class Worktrees:
    """Detached worktrees under one private folder; ``close`` removes every one of them.

    ``git worktree add`` calls are serialised: git names each worktree's
    bookkeeping entry after the folder's base name and two concurrent adds
    could race for it.
    """

    def __init__(self, repo: git.Repo, root: Path):
        self.repo = repo
        self.root = root
        self._lock = threading.Lock()
        self._paths: set[Path] = set()

    def add(self, commit: str, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._paths.add(path)
            _worktree_add(self.repo, path, commit)
        return path

    def remove(self, path: Path) -> None:
        with self._lock:
            if path in self._paths:
                _worktree_remove(self.repo, path)
                self._paths.discard(path)
        _rmtree(path)

    def close(self) -> None:
        for path in sorted(self._paths):
            self.remove(path)
        roots = {self.root, self.root.resolve()}
        _rmtree(self.root)
        # An entry whose add was interrupted half-way: its folder is gone now, prune it.
        if any(_is_within(p, r) for p in _worktree_paths(self.repo) for r in roots):
            self.repo.worktree_prune()


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _rmtree(path: Path) -> None:
    def onerror(func: Callable[[str], object], name: str, _exc: object) -> None:
        # A test may leave read-only folders behind; make them writable and retry.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), stat.S_IRWXU)
            os.chmod(name, stat.S_IRWXU)
            func(name)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=onerror)


# -- a test's environment ----------------------------------------------------------------------


def smoke_environment(
    base: Mapping[str, str],
    *,
    model: str,
    test_id: str,
    executor: str,
    artifacts: str,
    trees: Mapping[str, str],
    commits: Mapping[str, str],
    component: str | None,
    extra: Iterable[tuple[str, str]] = (),
    python: str | None = None,
) -> dict[str, str]:
    """The environment a test runs with (see the module doc for the layers)."""
    env = {k: v for k, v in base.items() if k not in _GIT_REDIRECTS and k not in _RESERVED and not k.startswith(_RESERVED_PREFIXES)}
    bindir = os.path.dirname(python or sys.executable)
    env["PATH"] = bindir + (os.pathsep + env["PATH"] if env.get("PATH") else "")
    env.update(dict(extra))
    env.update({"ZMR_MODEL": model, "ZMR_TEST": test_id, "ZMR_EXECUTOR": executor, "ZMR_ARTIFACTS": artifacts})
    for key, path in trees.items():
        env[f"ZMR_TREE_{env_key(key)}"] = path
        env[f"ZMR_COMMIT_{env_key(key)}"] = commits[key]
    if component is not None:
        env.update({"ZMR_COMPONENT": component, "ZMR_TREE": trees[component], "ZMR_COMMIT": commits[component]})
    return env


def env_key(component: str) -> str:
    """``trainer-megatron`` -> ``TRAINER_MEGATRON`` (for ``ZMR_TREE_<COMPONENT>``)."""
    return component.upper().replace("-", "_")


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# -- mismatch reports ---------------------------------------------------------------------------


def scan_mismatch(folder: Path) -> dict[str, tuple[int, int, int]]:
    """``*.mismatch.json`` under *folder*: relative path -> (mtime_ns, size, inode)."""
    result: dict[str, tuple[int, int, int]] = {}
    if not folder.is_dir():
        return result
    for path in folder.rglob(f"*{MISMATCH_SUFFIX}"):
        with contextlib.suppress(OSError):
            st = path.stat()
            if stat.S_ISREG(st.st_mode):
                result[path.relative_to(folder).as_posix()] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return result


def read_mismatch(path: Path, rel: str, root: Path | None = None) -> tuple[MismatchMetricsJson | None, str]:
    """The metrics of a ``zmr mismatch --json`` report (a regular file inside *root*, if given), or (None, why not)."""
    try:
        data = parse_json(read_repo_file(root, path, limit=MAX_JSON_BYTES, what="mismatch report", display=rel).decode("utf-8"))
    except FileRefused as refused:
        return None, f"{rel}: {refused.reason}"
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"{rel}: not readable as JSON ({exc.__class__.__name__})"
    if not isinstance(data, dict) or "schema_version" not in data or not isinstance(data.get("overall"), dict):
        return None, f"{rel}: not a `zmr mismatch --json` report (no schema_version and overall)"
    return {
        "file": rel,
        "schema_version": data["schema_version"],
        "verdict": data.get("verdict"),
        "bitwise_equal": data.get("bitwise_equal"),
        "overall": data["overall"],
    }, ""


def claimant(rel: str, ids: Iterable[str]) -> str | None:
    """The test id a mismatch file names (``<id>/...`` or ``<id>.<...>``), longest first."""
    best = None
    for ident in ids:
        if rel.startswith((ident + "/", ident + ".")) and (best is None or len(ident) > len(best)):
            best = ident
    return best


def collect_mismatch(folder: Path, rels: Iterable[str]) -> tuple[list[MismatchMetricsJson], list[str]]:
    found: list[MismatchMetricsJson] = []
    notes: list[str] = []
    for rel in sorted(rels):
        metrics, why = read_mismatch(folder / rel, rel, folder)
        if metrics is None:
            notes.append(why)
        else:
            found.append(metrics)
    return found, notes


# -- executors -------------------------------------------------------------------------------------


Events = Callable[[str, Job, "Result | None"], None]


def _no_events(kind: str, job: Job, result: Result | None) -> None:
    pass


class Executor(Protocol):
    """Runs jobs and reports a result for each, in job order; emits start/finish *events*."""

    name: str  # "local" | "ray": goes into every result and report

    def run(self, jobs: Sequence[Job], artifacts: Mapping[str, Path], events: Events) -> list[Result]: ...


class SignalsNoted:
    """SIGINT, SIGTERM and SIGHUP only noted while the jobs run (in the main thread); `check` raises KeyboardInterrupt for one that came.

    The wait for the jobs (`concurrent.futures.wait`) takes each job's lock;
    a KeyboardInterrupt raised by Python's own handler at an unlucky line of
    it leaves a lock taken, the job cannot report its end, and the clean-up's
    wait for the jobs never ends: a Ctrl-C that went unanswered (issue #36;
    tests/smoke/test_smoke.py sends the signal at each line of the wait). So
    the handlers here set a field, nothing else (no lock, nothing to leave
    half done), and the loop looks at it every 0.2 s, where an interrupt
    leaves nothing behind. The handlers that were there go back as soon as a
    signal is acted on, so a second Ctrl-C cuts the clean-up short.
    """

    def __init__(self) -> None:
        self.noted: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "SignalsNoted":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # under nohup: stays ignored
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, frame: object) -> None:
        self.noted = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)  # None: one set outside Python
        self._previous.clear()

    def check(self) -> None:
        if self.noted is not None:
            self.__exit__()
            raise KeyboardInterrupt


class LocalExecutor:
    """Runs jobs as local processes, up to *jobs* at a time, each in fresh worktrees."""

    name = "local"

    def __init__(self, project: Project, jobs: int = 1, grace: float | None = None):
        self.project = project
        self.limit = max(1, jobs)
        self.grace = kill_grace() if grace is None else grace

    def run(self, jobs: Sequence[Job], artifacts: Mapping[str, Path], events: Events = _no_events) -> list[Result]:
        repo = self.project.repo
        root = Path(tempfile.mkdtemp(prefix="zmr-smoke-"))
        trees = Worktrees(repo, root)
        cancel = threading.Event()
        ids = {m: [j.id for j in jobs if j.model == m] for m in artifacts}
        pool = ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="zmr-smoke")
        futures: dict[Future[Result], int] = {}
        results: list[Result | None] = [None] * len(jobs)
        signals = SignalsNoted()
        try:
            with signals:
                for index, job in enumerate(jobs):
                    futures[pool.submit(self._one, index, job, artifacts[job.model], trees, cancel, events, ids[job.model])] = index
                pending = set(futures)
                while pending:
                    signals.check()
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for future in done:
                        results[futures[future]] = future.result()
            signals.check()  # one that came after the last look, before the handlers went back
        except BaseException:
            cancel.set()  # each running job kills its process group and returns
            raise
        finally:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
            finally:
                trees.close()  # also when a second Ctrl-C cuts the wait short
        return [r for r in results if r is not None]

    def _one(self, index: int, job: Job, folder: Path, trees: Worktrees, cancel: threading.Event, events: Events, ids: Sequence[str]) -> Result:
        if cancel.is_set():
            return Result(job, ERROR, None, iso(time.time()), 0.0, "cancelled", self.name)
        events("start", job, None)
        paths: dict[str, Path] = {}
        log = folder / f"{job.id}.log"
        try:
            for tree in job.trees:
                paths[tree.component] = trees.add(tree.commit, f"{index:03d}-{job.id}", tree.component)
            env = smoke_environment(
                os.environ,
                model=job.model,
                test_id=job.id,
                executor=self.name,
                artifacts=str(folder),
                trees={k: str(p) for k, p in paths.items()},
                commits=job.commits,
                component=job.component,
                extra=job.test.env,
            )
            cwd = paths[job.component] if job.component else self.project.root
            before = scan_mismatch(folder)
            outcome = run_command(job.test.run, cwd=cwd, env=env, timeout=job.test.timeout, log_path=log, cancel=cancel, grace=self.grace)
            after = scan_mismatch(folder)
        except ZmrError as err:
            with contextlib.suppress(OSError):
                log.write_text(f"zmr: {err}\n")
            result = Result(job, ERROR, None, iso(time.time()), 0.0, str(err).splitlines()[0], self.name, log)
            events("finish", job, result)
            return result
        finally:
            for path in paths.values():
                trees.remove(path)
        changed = {rel for rel, meta in after.items() if before.get(rel) != meta}
        mine = {rel for rel in changed if claimant(rel, ids) in (None, job.id)}
        mismatch, notes = collect_mismatch(folder, mine)
        if outcome.status != PASSED:
            notes.extend(missing_extra(log))
        result = Result(job, outcome.status, outcome.exit_code, iso(outcome.started), outcome.duration, outcome.message, self.name, log, mismatch, notes)
        events("finish", job, result)
        return result


def missing_extra(log: Path, tail_bytes: int = 65536) -> list[str]:
    """What a failed test's log says is not installed, and which of zmr's extras installs it (``.[demo]``: torch...)."""
    from importlib import metadata

    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - tail_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    missing = sorted(set(re.findall(r"ModuleNotFoundError: No module named '([A-Za-z0-9_]+)", text)))
    if not missing:
        return []
    extras: dict[str, list[str]] = {}  # package → the extras that install it
    contents: dict[str, set[str]] = {}  # extra → the packages it installs
    try:
        for requirement in metadata.requires("zmr") or []:
            name = re.match(r"[A-Za-z0-9._-]+", requirement)
            extra = re.search(r"extra\s*==\s*[\"']([^\"']+)", requirement)
            if name and extra:
                package = name.group(0).lower().replace("-", "_")
                if extra.group(1) not in extras.setdefault(package, []):
                    extras[package].append(extra.group(1))
                contents.setdefault(extra.group(1), set()).add(package)
    except metadata.PackageNotFoundError:
        pass
    notes = []
    for module in missing:
        # Of the extras that have it, not one that holds another of them whole: `demo` is `zmr[evidence]` and torch
        # (the build backend writes evidence's numpy into demo too), and numpy is the `evidence` extra's.
        which = [e for e in extras.get(module.lower(), []) if not any(contents[other] < contents[e] for other in extras[module.lower()])]
        if which:
            notes.append(f"{module} is not installed: it comes with zmr's extra {which[0]} (pip install -e '.[{which[0]}]' in zmr's checkout)")
        else:
            notes.append(f"{module} is not installed in the environment the test ran in")
    return notes


# -- the whole run -------------------------------------------------------------------------------------


@dataclass
class Options:
    """What ``zmr smoke`` was asked to do (CLI flags, as data); how to run the jobs is the executor's."""

    models: list[str] = field(default_factory=list)
    all_models: bool = False
    components: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    build: bool = True
    artifacts: Path | None = None  # base folder; <base>/<model>/ per model
    record: bool = False


def artifacts_dir(project: Project, base: Path | None, model: str) -> Path:
    return base / model if base is not None else project.smoke_artifacts(model)


def run(project: Project, options: Options, executor: Executor, *, events: Events = _no_events, progress: Progress | None = None) -> Report:
    """Select, build, run on *executor*, and (with ``record``) write evidence. Raises nothing for failing tests."""
    if not options.models and not options.all_models:
        raise ZmrError("name one or more models, or pass --all", details=["`zmr list` shows the models"])
    manifests = project.manifests(None if options.all_models else options.models)
    jobs = select(manifests, options.components, options.only)
    started = time.time()
    clock = time.monotonic()
    if not jobs:
        return Report([], executor.name, iso(started), 0.0)
    if options.record:
        for model in sorted({job.model for job in jobs}):
            _evidence_folder(project, model)  # refused before anything runs, not after
    jobs, built = prepare(project, manifests, jobs, build=options.build, progress=progress)
    folders = {}
    for job in jobs:
        folder = artifacts_dir(project, options.artifacts, job.model)
        folder.mkdir(parents=True, exist_ok=True)
        folders[job.model] = folder
        with contextlib.suppress(FileNotFoundError):
            (folder / f"{job.id}.log").unlink()
    for job in jobs:
        events("queued", job, None)
    with _sigterm_as_interrupt():
        results = executor.run(jobs, folders, events)
    report = Report(results, executor.name, iso(started), time.monotonic() - clock, folders, built)
    if options.record:
        report.evidence = record(project, results)
    return report


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """CI cancels jobs with SIGTERM: treat it as Ctrl-C so trees and process groups are cleaned up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> NoReturn:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- reports ---------------------------------------------------------------------------------------------


def record(project: Project, results: Sequence[Result]) -> list[Path]:
    """Write ``cases/<model>/evidence/smoke-<id>.json`` per result (temp file, then rename)."""
    written = []
    for result in results:
        folder = _evidence_folder(project, result.job.model)
        folder.mkdir(parents=True, exist_ok=True)
        target = project.no_links(folder.relative_to(project.root) / f"{EVIDENCE_PREFIX}{result.job.id}.json", "smoke evidence")
        atomic_write(target, (json.dumps(result.record(), indent=2, allow_nan=False) + "\n").encode("utf-8"))
        written.append(target)
    return written


def _evidence_folder(project: Project, model: str) -> Path:
    """``cases/<model>/evidence``, refused when it (or a folder above it) is a symbolic link: records are written there."""
    return project.no_links(f"cases/{model}/evidence", "smoke evidence")


def log_tail(path: Path | None, limit: int = JUNIT_LOG_BYTES, lines: int | None = None) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if size > limit:
        text = f"[... {size - limit} bytes cut ...]\n" + text.split("\n", 1)[-1]
    if lines is not None:
        text = "\n".join(text.rstrip("\n").splitlines()[-lines:])
    return _XML_BAD.sub("\ufffd", text)


def junit_xml(report: Report) -> ET.ElementTree:
    """JUnit XML: one <testsuite> per model, <testcase name=test classname=model[.component]>.

    Failed and timed-out tests carry <failure>, errors (the test could not
    run, or its Ray worker died) <error>; both hold the log's last lines, and
    <system-out> the log itself. The attributes are those GitHub Actions
    reporters and GitLab read: tests, failures, errors, skipped, time.
    """
    root = ET.Element("testsuites", name="zmr smoke")
    totals = {"tests": 0, "failures": 0, "errors": 0, "time": 0.0}
    models: dict[str, list[Result]] = {}
    for result in report.results:
        models.setdefault(result.job.model, []).append(result)
    for index, (model, results) in enumerate(models.items()):
        failures = sum(r.status in (FAILED, TIMEOUT) for r in results)
        errors = sum(r.status == ERROR for r in results)
        seconds = sum(r.duration for r in results)
        first = min(r.start for r in results)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=model,
            tests=str(len(results)),
            failures=str(failures),
            errors=str(errors),
            skipped="0",
            time=f"{seconds:.3f}",
            timestamp=first.rstrip("Z")[:19],
            id=str(index),
            package=model,
            hostname="localhost",
        )
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="zmr.executor", value=report.executor)
        commits: dict[str, str] = {}
        for r in results:
            for t in r.job.trees:
                commits.setdefault(t.branch, t.commit)
        for branch, commit in sorted(commits.items()):
            ET.SubElement(props, "property", name=f"commit:{branch}", value=commit)
        for r in results:
            case = ET.SubElement(suite, "testcase", name=r.job.test.name, classname=r.job.classname, time=f"{r.duration:.3f}")
            if r.status != PASSED:
                tag = "error" if r.status == ERROR else "failure"
                element = ET.SubElement(case, tag, message=_XML_BAD.sub("\ufffd", r.message or r.status), type=r.status)
                element.text = log_tail(r.log, 64 * 1024, TAIL_LINES)
            out = ET.SubElement(case, "system-out")
            out.text = log_tail(r.log)
        totals["tests"] += len(results)
        totals["failures"] += failures
        totals["errors"] += errors
        totals["time"] += seconds
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", str(totals["errors"]))
    root.set("skipped", "0")
    root.set("time", f"{report.duration:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(report: Report, path: Path) -> None:
    root = junit_xml(report).getroot()
    assert root is not None  # junit_xml always builds a <testsuites> root
    atomic_write(path, ET.tostring(root, encoding="UTF-8", xml_declaration=True))


def _zmr_version() -> str:
    from zmr.model.source import version

    return version()
