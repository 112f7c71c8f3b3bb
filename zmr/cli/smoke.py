"""`zmr smoke`: run the declared smoke tests in clean trees of the built release branches.

Parses arguments, builds the executor (`zmr.smoke.runner.LocalExecutor`, or
`zmr.smoke.ray_executor.RayExecutor` for `--executor ray`) and renders; the work is
`zmr.smoke.runner`, imported inside the command so `zmr --help` loads neither rich's
live display nor Ray. On a terminal a live table shows each
test (running, elapsed, result); in CI or a pipe one quiet line per finished
test goes to stderr. Then a summary table (stdout, or nothing with `--json`,
which prints the report there instead), `--junit FILE`, `--record`.
"""

import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from zmr.cli.options import All, Components, Json, Models, find_project
from zmr.cli.render import console, live_stderr, print_report, quiet, table
from zmr.infra.errors import CheckFailed

if TYPE_CHECKING:  # pragma: no cover
    from zmr.smoke.runner import Job, Report, Result

_MARK = {"passed": "PASS", "failed": "FAIL", "timeout": "TIME", "error": "ERR "}
_STYLE = {"passed": "green", "failed": "red", "timeout": "magenta", "error": "red", "running": "yellow", "queued": "dim"}


def smoke(
    models: Models = None,
    all_models: All = False,
    components: Components = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", metavar="NAME", help="Only these tests: a name, or <component>.<name> (repeatable).", show_default=False)
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Run up to N tests at once (local default 1; Ray default: as many as the cluster schedules).",
            show_default=False,
        ),
    ] = None,
    no_build: Annotated[bool, typer.Option("--no-build", help="Refuse (exit 2) instead of building release branches that are missing or stale.")] = False,
    artifacts: Annotated[
        Path | None,
        typer.Option("--artifacts", metavar="DIR", help="Logs and test outputs go to DIR/<model>/ (default .git/zmr/smoke/<model>/).", show_default=False),
    ] = None,
    json_out: Json = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write a JUnit XML report (GitHub Actions, GitLab).", show_default=False)
    ] = None,
    record: Annotated[bool, typer.Option("--record", help="Write each result to cases/<model>/evidence/smoke-<test>.json.")] = False,
    executor: Annotated[
        str, typer.Option("--executor", metavar="local|ray", help="Run tests as local processes, or as Ray tasks (pip install 'zmr[ray]').")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", metavar="ADDR", help="Ray cluster to use (host:port or auto; default: $RAY_ADDRESS, else a local instance).", show_default=False
        ),
    ] = None,
    ray_cpus: Annotated[
        int | None, typer.Option("--ray-cpus", min=1, metavar="N", help="CPUs of the local Ray instance (default: all).", show_default=False)
    ] = None,
    shared_dir: Annotated[
        Path | None,
        typer.Option(
            "--shared-dir", metavar="DIR", help="Stage trees in DIR, mounted at the same path on every Ray node, instead of uploading them.", show_default=False
        ),
    ] = None,
) -> None:
    """Run the declared smoke tests in clean trees of the release branches. Exit 1 if any fails."""
    import zmr.smoke.runner
    from zmr.infra.errors import ZmrError
    from zmr.model import selection

    options = zmr.smoke.runner.Options(
        models=list(models or []),
        all_models=selection.acts_on_all(models, all_models, writes=True),
        components=list(components or []),
        only=list(only or []),
        build=not no_build,
        artifacts=artifacts.resolve() if artifacts is not None else None,
        record=record,
    )
    project = find_project()
    if executor not in zmr.smoke.runner.EXECUTORS:
        raise ZmrError(f"unknown executor {executor!r}", details=[f"use one of: {', '.join(zmr.smoke.runner.EXECUTORS)}"])
    if executor == "ray":
        import zmr.smoke.ray_executor

        zmr.smoke.ray_executor.import_ray()  # exit 2 early when ray is not installed
    elif shared_dir is not None or ray_address is not None or ray_cpus is not None:
        raise ZmrError("--ray-address, --ray-cpus and --shared-dir only apply to --executor ray")
    try:
        with _View() as view:
            if executor == "ray":
                runner: zmr.smoke.runner.Executor = zmr.smoke.ray_executor.RayExecutor(
                    project,
                    address=ray_address,
                    num_cpus=ray_cpus,
                    shared_dir=shared_dir.resolve() if shared_dir is not None else None,
                    jobs=jobs,
                    progress=view.progress,
                )
            else:
                runner = zmr.smoke.runner.LocalExecutor(project, jobs or 1)
            report = zmr.smoke.runner.run(project, options, runner, events=view.event, progress=view.progress)
    except KeyboardInterrupt:
        # Raised as a zmr error: typer would turn a KeyboardInterrupt into exit status 0 here.
        raise zmr.smoke.runner.Interrupted("interrupted: the running smoke tests were stopped and their trees removed") from None
    if junit is not None:
        zmr.smoke.runner.write_junit(report, junit)
    if json_out:
        print_report(report)
    else:
        _summary(report, project.root)
    if junit is not None and not json_out:
        print(f"JUnit report: {junit}")
    if not report.results:
        print("zmr: no smoke tests in the selection", file=sys.stderr)
    if report.failed():
        raise CheckFailed(report.reason(), details=report.details())


def _summary(report: "Report", root: Path) -> None:
    if not report.results:
        return
    rows = []
    for r in report.results:
        commits = " ".join(f"{c}@{sha[:12]}" for c, sha in r.job.commits.items())
        rows.append([r.job.classname, r.job.test.name, r.status, f"{r.duration:.1f}s", commits, _relative(r.log, root)])
    table(["class", "test", "status", "time", "commits", "log"], rows, title="smoke tests")
    counts = report.counts()
    print(", ".join(f"{counts[s]} {s}" for s in ("passed", "failed", "timeout", "error") if counts[s] or s == "passed") + f" in {report.duration:.1f}s")
    for path in report.evidence:
        print(f"recorded {_relative(path, root)}")
    for note in dict.fromkeys(note for r in report.results if not r.ok for note in r.notes):
        print(f"note: {note}")


def _relative(path: Path | None, root: Path) -> str:
    if path is None:
        return ""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class _View:
    """The live table on a terminal; quiet lines on stderr elsewhere; neither with `zmr -q`."""

    def __init__(self) -> None:
        self.quiet = quiet()
        self.live_enabled = live_stderr() and not self.quiet
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, Any]] = {}
        self._status = "preparing"
        self._live: Any = None  # a rich Live while drawing on a terminal

    def __enter__(self) -> "_View":
        if self.live_enabled:
            from rich.live import Live

            self._live = Live(console=console(stderr=True), get_renderable=self._render, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            with self._lock:
                self._status = "interrupted" if exc and exc[0] is KeyboardInterrupt else "done"
            self._live.__exit__(*exc)

    def progress(self, message: str) -> None:
        with self._lock:
            self._status = message

    def event(self, kind: str, job: "Job", result: "Result | None") -> None:
        with self._lock:
            row = self._rows.setdefault(job.label, {"job": job, "state": "queued", "since": None, "result": None})
            if kind == "queued":
                self._status = "running"
            elif kind == "start":
                row["state"], row["since"] = "running", time.monotonic()
            elif kind == "finish" and result is not None:
                row["state"], row["result"] = result.status, result
        if kind == "finish" and result is not None and self._live is None and not self.quiet:
            line = f"{_MARK[result.status]} {job.label} ({result.duration:.1f}s)"
            if result.message:
                line += f": {result.message}"
            print(line, file=sys.stderr, flush=True)

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            rows = list(self._rows.values())
            status = self._status
        grid = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for header in ("", "test", "status", "time", "note"):
            grid.add_column(header)
        done = 0
        for row in rows:
            job, state, result = row["job"], row["state"], row["result"]
            if result is not None:
                done += 1
                elapsed = f"{result.duration:.1f}s"
                note = result.message
            elif row["since"] is not None:
                elapsed = f"{time.monotonic() - row['since']:.0f}s"
                note = f"timeout {job.test.timeout}s"
            else:
                elapsed, note = "", ""
            mark = {"queued": "·", "running": "▶"}.get(state, _MARK.get(state, "?").strip())
            grid.add_row(Text(mark, style=_STYLE.get(state, "")), job.label, Text(state, style=_STYLE.get(state, "")), elapsed, note)
        head = Text(f"zmr smoke: {status}" + (f" ({done}/{len(rows)} done)" if rows else ""), style="bold")
        return Group(head, grid) if rows else head
