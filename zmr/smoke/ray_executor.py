"""``zmr smoke --executor ray``: each smoke test runs as a Ray task on a cluster.

Driver side (``RayExecutor``)::

    staging folder ── trees/<model>/<component>-<commit12>/   one detached worktree per release commit
                   └─ repo/                                  the repository's files (not ignored, no .git),
                                                             only when a model-level test runs
    ray.init(runtime_env={working_dir: staging, py_modules: [zmr]})   (or --shared-dir: no upload)
    one task per test: num_cpus / num_gpus / memory / custom resources from ``resources:``,
    max_retries=0 (a smoke test is not retried behind the user's back)

Worker side (``remote_entry``): copy the trees (and the repository) the test
needs from the staged copy into a task-private folder, so every test gets a
clean tree even when tasks share a node; run the command with
``zmr.infra.procgroup.run_command`` -- the task itself enforces the timeout by killing
the process group --; return status, timing, the log (its last 16 MiB) and
the files the test wrote to ``$ZMR_ARTIFACTS`` (up to 64 MiB). The driver
writes them into the same artifacts folder as the local executor, so
``--json``, ``--junit`` and ``--record`` are the same.

Shipping. Without ``--shared-dir`` the staging folder is Ray's job-level
``working_dir`` (uploaded once per run; ``.git`` excluded; ``.gitignore``
files of upstream trees are *not* applied, a tree is what the commit holds).
Ray caps a package at 512 MiB (its gRPC message limit); a larger staging is
refused with a pointer to ``--shared-dir DIR``: a folder every node mounts at
the same path, where the staging folder is made instead and read in place.
The ``zmr`` package goes along as a ``py_modules`` entry, so workers need
Ray and Python, not zmr.

A task whose worker dies (killed, out of memory, node lost) comes back as a
Ray error and is reported with status ``error``; a test whose resources no
node of the cluster has is reported as ``error`` (unschedulable) instead of
waiting forever. Ctrl-C cancels the tasks (each kills its process group) and
disconnects.

Ray is imported only here, and only when this executor runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zmr.infra.errors import ZmrError
from zmr.infra.procgroup import ERROR, kill_grace, run_command
from zmr.smoke.runner import MISMATCH_SUFFIX, Events, Job, Result, SignalsNoted, Worktrees, collect_mismatch, iso, smoke_environment

if TYPE_CHECKING:  # pragma: no cover
    from zmr.model.project import Project

RAY_HINT = "pip install 'zmr[ray]'"
LOG_LIMIT = 16 << 20
ARTIFACTS_LIMIT = 64 << 20
DEFAULT_PACKAGE_LIMIT = 512 << 20
TASK_PREFIX = "zmr-smoke-task-"
_WORKER_DIED = ("WorkerCrashedError", "ActorDiedError", "NodeDiedError", "ActorUnavailableError", "LocalRayletDiedError")


def import_ray() -> Any:
    """The ``ray`` module, or exit 2 saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ZmrError(
            "--executor ray needs Ray, which is not installed here",
            details=[f"install the extra: {RAY_HINT}", f"(import ray: {exc})"],
        ) from None
    return ray


# -- driver side ------------------------------------------------------------------------------


class RayExecutor:
    """Runs jobs as Ray tasks; reports like ``LocalExecutor``."""

    name = "ray"

    def __init__(
        self,
        project: Project,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        shared_dir: Path | None = None,
        jobs: int | None = None,
        progress: Callable[[str], None] | None = None,
        grace: float | None = None,
    ) -> None:
        if address is not None and num_cpus is not None:
            raise ZmrError("--ray-cpus sizes a local Ray instance; it cannot be used with --ray-address")
        self.project = project
        self.address = address
        self.num_cpus = num_cpus
        self.shared_dir = shared_dir
        self.limit = jobs or 0  # 0: as many as the cluster schedules
        self.progress = progress or (lambda message: None)
        self.grace = kill_grace() if grace is None else grace

    def run(self, jobs: Sequence[Job], artifacts: Mapping[str, Path], events: Events) -> list[Result]:
        ray = import_ray()
        if self.shared_dir is not None:
            self.shared_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="zmr-smoke-", dir=self.shared_dir)).resolve()
        else:
            staging = Path(tempfile.mkdtemp(prefix="zmr-smoke-ray-"))
        trees = Worktrees(self.project.repo, staging)
        try:
            layout = self._stage(jobs, trees, staging)
            # Ray prints cluster messages ("(raylet) A worker died ...") on stdout, where
            # --json goes: send them to stderr while connected.
            with contextlib.redirect_stdout(sys.stderr):
                self._connect(ray, staging)
                try:
                    return self._run(ray, jobs, layout, staging, artifacts, events)
                finally:
                    with contextlib.suppress(Exception):
                        ray.shutdown()
        finally:
            trees.close()

    # staging ------------------------------------------------------------------------------
    def _stage(self, jobs: Sequence[Job], trees: Worktrees, staging: Path) -> dict[str, Any]:
        repo_needed = any(job.component is None for job in jobs)
        if repo_needed:
            self.progress("copying the repository for model-level tests")
            copy_repository(self.project, staging / "repo", skip=staging)
        made: dict[tuple[str, str, str], str] = {}
        for job in jobs:
            for tree in job.trees:
                ident = (job.model, tree.component, tree.commit)
                if ident not in made:
                    self.progress(f"{job.model}/{tree.component}: tree of {tree.commit[:12]}")
                    rel = f"trees/{job.model}/{tree.component}-{tree.commit[:12]}"
                    trees.add(tree.commit, "trees", job.model, f"{tree.component}-{tree.commit[:12]}")
                    made[ident] = rel
        return {"repo": "repo" if repo_needed else None, "trees": made}

    def _connect(self, ray: Any, staging: Path) -> None:
        import zmr

        runtime_env: dict[str, Any] = {"py_modules": [os.path.dirname(os.path.abspath(zmr.__file__))], "excludes": [".git", "__pycache__"]}
        if self.shared_dir is None:
            size = staged_size(staging)
            limit = package_limit()
            if size > limit:
                self.progress(f"staging is {size >> 20} MiB before compression; Ray's limit is {limit >> 20} MiB")
            runtime_env["working_dir"] = str(staging)
        kwargs: dict[str, Any] = {"runtime_env": runtime_env, "log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": True}
        where = self.address or os.environ.get("RAY_ADDRESS")
        if where:
            kwargs["address"] = where
        else:
            kwargs.update(address="local", num_cpus=self.num_cpus or os.cpu_count() or 1, include_dashboard=False)
        self.progress(f"connecting to Ray at {where}" if where else "starting a local Ray instance")
        # Upstream trees' .gitignore files must not drop tracked files from the package.
        previous = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE")
        os.environ["RAY_RUNTIME_ENV_IGNORE_GITIGNORE"] = "1"
        try:
            ray.init(**kwargs)
        except Exception as exc:  # noqa: BLE001 - ray raises many kinds here
            with contextlib.suppress(Exception):
                ray.shutdown()
            text = str(exc)
            if "size" in text.lower() and ("package" in text.lower() or "exceeds" in text.lower()):
                raise ZmrError(
                    f"the trees are too large to ship with Ray's runtime environment ({staged_size(staging) >> 20} MiB, limit {package_limit() >> 20} MiB)",
                    details=[
                        "put them on a filesystem every node mounts: --shared-dir DIR",
                        f"ray: {text.splitlines()[0] if text else exc.__class__.__name__}",
                    ],
                ) from None
            raise ZmrError(
                f"cannot {'connect to Ray at ' + where if where else 'start a local Ray instance'}: {text.splitlines()[0] if text else exc.__class__.__name__}",
                details=["check --ray-address (host:port of the head node, or `auto`) and that the cluster runs the same Ray version"],
            ) from None
        finally:
            if previous is None:
                os.environ.pop("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", None)
            else:
                os.environ["RAY_RUNTIME_ENV_IGNORE_GITIGNORE"] = previous

    # scheduling ---------------------------------------------------------------------------
    def _run(self, ray: Any, jobs: Sequence[Job], layout: dict[str, Any], staging: Path, artifacts: Mapping[str, Path], events: Events) -> list[Result]:
        task = ray.remote(max_retries=0)(remote_entry)
        cluster = {k: float(v) for k, v in ray.cluster_resources().items()}
        results: list[Result | None] = [None] * len(jobs)
        queue = []
        for index, job in enumerate(jobs):
            options = task_options(job)
            missing = unschedulable(options["request"], cluster)
            if missing:
                events("start", job, None)
                results[index] = self._error(job, artifacts[job.model], f"unschedulable: {missing}", "")
                events("finish", job, results[index])
                continue
            spec = {
                "model": job.model,
                "id": job.id,
                "component": job.component,
                "run": job.test.run,
                "timeout": job.test.timeout,
                "env": list(job.test.env),
                "commits": job.commits,
                "trees": {t.component: layout["trees"][(job.model, t.component, t.commit)] for t in job.trees},
                "repo": layout["repo"] if job.component is None else None,
                "base": str(staging) if self.shared_dir is not None else None,
                "grace": self.grace,
            }
            queue.append((index, job, spec, options["ray"]))
        running: dict[Any, tuple[int, Job, float]] = {}
        limit = self.limit or len(queue) or 1
        signals = SignalsNoted()  # a Ctrl-C acted on between waits, never inside ray.wait (as the local executor does)
        try:
            with signals:
                while queue or running:
                    signals.check()
                    while queue and len(running) < limit:
                        index, job, spec, opts = queue.pop(0)
                        ref = task.options(name=f"zmr-smoke:{job.label}", **opts).remote(spec)
                        running[ref] = (index, job, time.time())
                        events("start", job, None)
                    ready, _ = ray.wait(list(running), num_returns=1, timeout=0.2)
                    for ref in ready:
                        index, job, submitted = running.pop(ref)
                        results[index] = self._collect(ray, ref, job, submitted, artifacts[job.model])
                        events("finish", job, results[index])
            signals.check()
        except BaseException:
            for ref in running:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=False)
            # Each task kills its process group when cancelled; give them a moment.
            with contextlib.suppress(BaseException):
                ray.wait(list(running), num_returns=len(running), timeout=self.grace + 5)
            raise
        return [r if r is not None else Result(jobs[i], ERROR, None, iso(time.time()), 0.0, "not run", self.name) for i, r in enumerate(results)]

    def _collect(self, ray: Any, ref: Any, job: Job, submitted: float, folder: Path) -> Result:
        try:
            value = ray.get(ref)
        except ray.exceptions.RayError as exc:
            return self._error(job, folder, describe_ray_error(exc), str(exc), submitted)
        log = folder / f"{job.id}.log"
        log.write_bytes(value["log"])
        written = []
        notes = list(value.get("notes", []))
        for rel, data in value["artifacts"]:
            target = safe_join(folder, rel)
            if target is None:
                notes.append(f"{rel}: unsafe artifact path, not written")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(rel)
        mismatch, more = collect_mismatch(folder, [rel for rel in written if rel.endswith(MISMATCH_SUFFIX)])
        return Result(
            job, value["status"], value["exit_code"], iso(value["started"]), value["duration"], value["message"], self.name, log, mismatch, notes + more
        )

    def _error(self, job: Job, folder: Path, message: str, details: str, submitted: float | None = None) -> Result:
        log = folder / f"{job.id}.log"
        log.write_text(f"zmr: error: {message}\n" + (details.rstrip("\n") + "\n" if details else ""), encoding="utf-8")
        started = submitted if submitted is not None else time.time()
        return Result(job, ERROR, None, iso(started), max(0.0, time.time() - started) if submitted else 0.0, message, self.name, log)


def task_options(job: Job) -> dict[str, Any]:
    """Ray options from a test's ``resources:`` (CPU, GPU, memory in bytes, anything else custom)."""
    request = {"CPU": 1.0}
    request.update(job.resources)
    opts: dict[str, Any] = {"num_cpus": request["CPU"]}
    custom = {}
    for key, value in request.items():
        if key == "CPU":
            continue
        if key == "GPU":
            opts["num_gpus"] = value
        elif key == "memory":
            opts["memory"] = value
        else:
            custom[key] = value
    if custom:
        opts["resources"] = custom
    return {"ray": opts, "request": {k: v for k, v in request.items() if v}}


def unschedulable(request: Mapping[str, float], cluster: Mapping[str, float]) -> str:
    """Why no node of *cluster* can ever run a task asking for *request* ('' when one can)."""
    short = [f"{k}: {v:g} (the cluster has {cluster.get(k, 0):g})" for k, v in request.items() if v > cluster.get(k, 0.0) + 1e-9]
    return ", ".join(short)


def describe_ray_error(exc: BaseException) -> str:
    names = {cls.__name__ for cls in type(exc).__mro__}
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if names & set(_WORKER_DIED):
        return f"Ray worker died ({type(exc).__name__}): {first}"
    if "OutOfMemoryError" in names:
        return f"killed by Ray's memory monitor: {first}"
    if "TaskCancelledError" in names:
        return "cancelled"
    if "RuntimeEnvSetupError" in names:
        return f"Ray could not set up the runtime environment: {first}"
    return f"{type(exc).__name__}: {first}"


def safe_join(folder: Path, rel: str) -> Path | None:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        return None
    return folder.joinpath(*parts)


def package_limit() -> int:
    try:
        from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE

        return int(GCS_STORAGE_MAX_SIZE)
    except Exception:  # noqa: BLE001 - a private constant; fall back to Ray's documented limit
        return DEFAULT_PACKAGE_LIMIT


def staged_size(folder: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name == ".git":
                continue
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def copy_repository(project: Project, target: Path, skip: Path | None = None) -> None:
    """The repository's files as the user sees them (tracked and untracked, not ignored), without .git."""
    text = project.repo.ls_files(["-z", "--cached", "--others", "--exclude-standard"]).stdout.decode("utf-8", "surrogateescape")
    root = project.root
    skip_rel = None
    if skip is not None:
        with contextlib.suppress(ValueError):
            skip_rel = skip.resolve().relative_to(root.resolve())
    for rel in sorted(set(filter(None, text.split("\0")))):
        if skip_rel is not None and (Path(rel) == skip_rel or skip_rel in Path(rel).parents):
            continue
        source = root / rel
        dest = target / rel
        if not os.path.lexists(source) or source.is_dir() and not source.is_symlink():
            continue  # deleted in the checkout, or a submodule
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), dest)
            continue
        try:
            os.link(source, dest)  # nobody writes to the staged copy: workers copy it again
        except OSError:
            shutil.copy2(source, dest)


# -- worker side ----------------------------------------------------------------------------------


def remote_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs on a Ray worker: private copies of the trees, the command, the log and artifacts back."""
    base = spec["base"] or os.getcwd()  # the unpacked working_dir is the task's cwd
    # Task folders live in Ray's unpacked package (garbage-collected by Ray), or, with a
    # shared dir, in the node's temp folder; a folder whose worker died is swept later.
    parent = tempfile.gettempdir() if spec["base"] else base
    _sweep(parent)
    work = tempfile.mkdtemp(prefix=f"{TASK_PREFIX}{os.getpid()}-", dir=parent)
    try:
        ignore = shutil.ignore_patterns(".git")
        trees = {}
        for component, rel in spec["trees"].items():
            dest = os.path.join(work, "trees", component)
            shutil.copytree(os.path.join(base, rel), dest, symlinks=True, ignore=ignore)
            trees[component] = dest
        cwd = trees.get(spec["component"]) if spec["component"] else None
        if spec["repo"]:
            cwd = os.path.join(work, "repo")
            shutil.copytree(os.path.join(base, spec["repo"]), cwd, symlinks=True, ignore=ignore)
        artifacts = os.path.join(work, "artifacts")
        os.makedirs(artifacts)
        env = smoke_environment(
            os.environ,
            model=spec["model"],
            test_id=spec["id"],
            executor="ray",
            artifacts=artifacts,
            trees=trees,
            commits=spec["commits"],
            component=spec["component"],
            extra=spec["env"],
            python=sys.executable,
        )
        log = os.path.join(work, "output.log")
        outcome = run_command(spec["run"], cwd=cwd, env=env, timeout=spec["timeout"], log_path=log, grace=spec["grace"])
        files, notes = _gather(artifacts)
        return {
            "status": outcome.status,
            "exit_code": outcome.exit_code,
            "started": outcome.started,
            "duration": outcome.duration,
            "message": outcome.message,
            "log": _tail(log, LOG_LIMIT),
            "artifacts": files,
            "notes": notes,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sweep(parent: str) -> None:
    """Remove task folders left by workers that died (their pid is in the name)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(TASK_PREFIX):
            continue
        pid = name[len(TASK_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:
            pass  # alive, another user's


def _tail(path: str, limit: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - limit))
        data = handle.read()
    if size > limit:
        data = f"[zmr: the first {size - limit} bytes of this log stayed on the worker]\n".encode() + data
    return data


def _gather(folder: str) -> tuple[list[tuple[str, bytes]], list[str]]:
    files: list[tuple[str, bytes]] = []
    notes: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if total + size > ARTIFACTS_LIMIT:
                notes.append(f"{rel}: not brought back ({size} bytes; the limit for all artifacts is {ARTIFACTS_LIMIT >> 20} MiB)")
                continue
            with open(path, "rb") as handle:
                files.append((rel, handle.read()))
            total += size
    return files, notes
