#!/usr/bin/env python3
"""The test suite's time and branch coverage: with the CLI in-process, with every call a subprocess, and at an older commit.

Arms (``--arms``, default all four):

- ``parallel``: the suite as README's test command runs it: ``-n auto --dist
  worksteal`` (pytest-xdist, a worker per core), the CLI in-process;
- ``in-process``: the same tests one after the other (tests/conftest.py's ``zmr`` calls
  ``zmr.cli.main`` in the test's process);
- ``subprocess``: the same tests with every ``zmr(...)`` a ``python -m zmr``
  subprocess (``ZMR_TEST_SUBPROCESS=1`` asks conftest for exactly that);
- ``baseline``: the suite of ``--baseline`` (default c0d7227, before #49 moved
  the CLI in-process), in a ``git clone --shared`` of this repository at that
  commit, its own ``zmr`` first on ``PYTHONPATH``; test files it lacks are left out.

Each run is a fresh ``pytest -q -p no:cacheprovider`` process, started with
no bytecode of the repository's own modules (as on a fresh clone; the suite
writes bytecode next to the sources, which a second run would find); the arms run
one after the other, ``--repeat`` times, the order rotating each repetition.
Per run: wall time, CPU time (user + system of pytest and every process it
waited for: git, zmr subprocesses), the load average before and after (others'
work on the machine shows there, and in wall time far more than in CPU
time), tests passed/failed. Ratios (parallel over baseline and over
in-process, in-process over subprocess and over baseline, subprocess over
baseline) are taken within one repetition, then their median. The CPU time
of a parallel run is its workers' too: the same work, spread over the cores.
``--coverage`` adds one more run per arm, under coverage.py, for its branch
coverage of the arm's ``zmr/`` (subprocesses included: ``patch =
subprocess``); those runs are not timed against each other (coverage slows
a process's start, so it would weigh on the subprocess arms). ``--timeout`` ends a run (its
whole process group) after that many seconds: the run is reported as timed
out and its figures are not compared.

``--repeat 0 --coverage`` runs the coverage runs alone (branch coverage does
not depend on how busy the machine is, so they may run beside other work).
Writes ``--out``/``--name``.{json,md} (default results-tests).

    python scripts/bench_tests.py --coverage --repeat 1                       # the whole suite, four arms: long
    python scripts/bench_tests.py --arms parallel,in-process,baseline --repeat 2   # the whole suite, timed
    python scripts/bench_tests.py --coverage --timeout 1800 tests/test_export.py tests/test_rebase.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("parallel", "in-process", "subprocess", "baseline")
PARALLEL = ("-n", "auto", "--dist", "worksteal")  # README's test command
PAIRS = (("parallel", "baseline"), ("parallel", "in-process"), ("in-process", "subprocess"), ("in-process", "baseline"), ("subprocess", "baseline"))
DEFAULT_BASELINE = "c0d7227"  # the last commit before the CLI ran in-process in the tests (#49)
_COUNT = re.compile(r"(\d+) (passed|failed|error|errors|skipped)\b")


def _coverage_rc(folder: Path, source: Path) -> Path:
    rc = folder / "coveragerc"
    rc.write_text(f"[run]\nbranch = true\nparallel = true\npatch = subprocess\nsource = {source}\ndata_file = {folder / '.coverage'}\n")
    return rc


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _coverage_totals(rc: Path, cwd: Path, env: dict[str, str], folder: Path) -> dict[str, object]:
    subprocess.run([sys.executable, "-m", "coverage", "combine", f"--rcfile={rc}"], cwd=cwd, env=env, capture_output=True)
    out = folder / "coverage.json"
    subprocess.run([sys.executable, "-m", "coverage", "json", f"--rcfile={rc}", "-o", str(out)], cwd=cwd, env=env, capture_output=True)
    try:
        totals = json.loads(out.read_text())["totals"]
    except (OSError, ValueError, KeyError):
        return {"branch_coverage_pct": None, "line_coverage_pct": None}
    branches = totals.get("num_branches") or 0
    return {
        "branch_coverage_pct": round(100 * totals["covered_branches"] / branches, 2) if branches else None,
        "line_coverage_pct": round(100 * totals["covered_lines"] / totals["num_statements"], 2) if totals.get("num_statements") else None,
        "branches": branches,
        "covered_branches": totals.get("covered_branches"),
    }


def _baseline_checkout(rev: str, parent: Path) -> Path:
    clone = parent / "baseline"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--detach", rev], check=True)
    return clone


def run_arm(arm: str, files: list[str], coverage: bool, timeout: float | None, baseline: Path | None) -> dict[str, object]:
    root = baseline if arm == "baseline" else ROOT
    assert root is not None
    env = {k: v for k, v in os.environ.items() if k not in ("ZMR_TEST_SUBPROCESS", "COVERAGE_RCFILE")}
    if arm == "subprocess":
        env["ZMR_TEST_SUBPROCESS"] = "1"
    if arm == "baseline":
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])  # its zmr, not the installed one
    present = [f for f in files if (root / f).exists()]
    result: dict[str, object] = {"arm": arm, "files": present, "missing": [f for f in files if f not in present]}
    if root == ROOT:
        result["bytecode_removed"] = _cold(root)
    with tempfile.TemporaryDirectory(prefix=f"bench-tests-{arm}-") as tmp:
        pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *(PARALLEL if arm == "parallel" else ()), *present]
        command = [sys.executable, *pytest]
        if coverage:
            rc = _coverage_rc(Path(tmp), root / "zmr")
            command = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", *pytest]
            env["COVERAGE_RCFILE"] = str(rc)
        load_before = os.getloadavg()
        cpu_before = _children_cpu()
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            timed_out = True
        wall = time.monotonic() - started
        cpu = _children_cpu() - cpu_before
        load_after = os.getloadavg()
        # pytest's summary line (a warning printed at exit, e.g. coverage's in the xdist main process, may follow it)
        tail = [line for line in output.strip().splitlines() if _COUNT.search(line) and " in " in line][-1:] or [""]
        counts = {kind.rstrip("s") if kind != "passed" else kind: int(n) for n, kind in _COUNT.findall(tail[0])}
        result |= {
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after],
            "exit": proc.returncode,
            "timed_out": timed_out,
            "summary": tail[0],
            "failures": [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))],  # -ra's short summary
            "passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0) + counts.get("error", 0),
        }
        if coverage and not timed_out:
            result |= _coverage_totals(rc, root, env, Path(tmp))
    return result


def _cold(root: Path) -> int:
    """The bytecode of the repository's own modules removed (``__pycache__`` folders that git ignores, in the folders it
    tracks): every run starts as on a fresh clone, as CI's does, not from a previous run's compiled tests and zmr (the
    suite writes bytecode next to the sources). How many folders went."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.decode().split("\0")
    folders = {(root / name).parent for name in tracked if name.endswith(".py")}
    removed = 0
    for folder in sorted(folders):
        cache = folder / "__pycache__"
        if cache.is_dir() and not cache.is_symlink():
            for pyc in cache.glob("*.pyc"):
                pyc.unlink()
            with contextlib.suppress(OSError):
                cache.rmdir()
            removed += 1
    return removed


def _show(what: str, r: dict[str, object]) -> None:
    cov = f"  branch cov. {r['branch_coverage_pct']} %" if "branch_coverage_pct" in r else ""
    load = f"load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}"  # type: ignore[index]
    print(f"{what} {r['arm']:10s} {r['wall_s']:8.1f} s wall {r['cpu_s']:8.1f} s CPU  {load}{cov}  {r['summary']}", flush=True)


def _ratio(runs: dict[str, dict[str, object]], arm: str, base: str, key: str) -> float | None:
    a, b = runs.get(arm), runs.get(base)
    if not a or not b or a["timed_out"] or b["timed_out"]:
        return None
    return round(float(a[key]) / float(b[key]), 3)  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files or folders, relative to the repository root (default: the whole suite, tests/)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)} (default: all)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help=f"the commit whose suite the baseline arm runs (default {DEFAULT_BASELINE})")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--coverage", action="store_true", help="measure branch coverage of zmr/ in every arm (pip install coverage)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds a run may take; then it is ended and reported as timed out")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--name", default="results-tests", help="the results files' name in --out (default results-tests)")
    parser.add_argument("--note", default="", help="a sentence for the results file: why this subset, what else ran on the machine")
    args = parser.parse_args()
    files = args.files or ["tests"]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := sorted(set(arms) - set(ARMS)):
        parser.error(f"unknown arm {unknown[0]!r}; the arms are {', '.join(ARMS)}")
    reps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as tmp:
        baseline = _baseline_checkout(args.baseline, Path(tmp)) if "baseline" in arms else None
        for rep in range(args.repeat):
            order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
            runs: dict[str, dict[str, object]] = {}
            for arm in order:
                runs[arm] = r = run_arm(arm, files, False, args.timeout, baseline)
                _show(f"rep {rep + 1}", r)
            ratios = {f"{arm}/{base} {key}": _ratio(runs, arm, base, key) for arm, base in PAIRS for key in ("wall_s", "cpu_s") if arm in runs and base in runs}
            for name, value in ratios.items():
                print(f"rep {rep + 1} ratio {name}: {value}", flush=True)
            reps.append({"rep": rep + 1, "order": order, "ratios": ratios, "runs": runs})
        covered: dict[str, dict[str, object]] = {}
        if args.coverage:
            for arm in arms:
                covered[arm] = r = run_arm(arm, files, True, args.timeout, baseline)
                _show("coverage", r)
    medians = {}
    for name in reps[0]["ratios"] if reps else []:
        values = [r["ratios"][name] for r in reps if r["ratios"][name] is not None]
        medians[name] = round(statistics.median(values), 3) if values else None
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    data = {
        "files": files,
        "arms": arms,
        "baseline": args.baseline if "baseline" in arms else None,
        "repeat": args.repeat,
        "coverage": args.coverage,
        "timeout_s": args.timeout,
        "note": args.note,
        "machine": machine,
        "median_ratios": medians,
        "reps": reps,
        "coverage_runs": covered,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text(_markdown(data))
    failed = any(r["exit"] != 0 or r["timed_out"] for r in [*(r for rep in reps for r in rep["runs"].values()), *covered.values()])
    if failed:
        print("a run failed or timed out: see its summary; its ratios are not comparable", file=sys.stderr)
    return 1 if failed else 0


def _markdown(data: dict[str, Any]) -> str:
    lines = [
        "# The test suite: on every core, one test after the other (the CLI in-process, or a subprocess per call), and the suite"
        " before (scripts/bench_tests.py)",
        "",
        f"{data['machine']}; files: {' '.join(data['files'])}; arms: {', '.join(data['arms'])}"
        + (f" (baseline: the suite at {data['baseline']})" if data["baseline"] else "")
        + f"; {data['repeat']} repetition(s), the order rotating"
        + (f"; timeout {data['timeout_s']:g} s per run" if data["timeout_s"] else "")
        + ".",
        "CPU time is user + system of pytest and every process it waited for; the load average (1 min) before and after each"
        " run says how busy the machine was (others' work slows wall time far more than CPU time).",
        *([data["note"]] if data.get("note") else []),
        "",
        "| rep | arm | wall | CPU | load before → after | tests |",
        "| ---: | --- | ---: | ---: | --- | --- |",
    ]

    def tests(r: dict[str, Any]) -> str:
        return f"{r['passed']} passed" + (f", {r['failed']} failed" if r["failed"] else "") + (" (timed out)" if r["timed_out"] else "")

    for rep in data["reps"]:
        for arm, r in rep["runs"].items():
            lines.append(f"| {rep['rep']} | {arm} | {r['wall_s']} s | {r['cpu_s']} s | {r['load_before'][0]} → {r['load_after'][0]} | {tests(r)} |")
    if data["coverage_runs"]:
        lines += [
            "",
            "Coverage of each arm's zmr/ (coverage.py, branch = true, subprocesses measured), one run each under coverage:",
            "",
            "| arm | branch coverage | branches covered | line coverage | tests | wall under coverage | load before → after |",
            "| --- | ---: | ---: | ---: | --- | ---: | --- |",
        ]
        for arm, r in data["coverage_runs"].items():
            bc = f"{r['branch_coverage_pct']} %" if r.get("branch_coverage_pct") is not None else "–"
            lc = f"{r['line_coverage_pct']} %" if r.get("line_coverage_pct") is not None else "–"
            counted = f"{r.get('covered_branches')} of {r.get('branches')}"
            lines.append(f"| {arm} | {bc} | {counted} | {lc} | {tests(r)} | {r['wall_s']} s | {r['load_before'][0]} → {r['load_after'][0]} |")
    lines += ["", "| ratio | " + " | ".join(f"rep {rep['rep']}" for rep in data["reps"]) + " | median |", "| --- |" + " ---: |" * (len(data["reps"]) + 1)]
    for name, median in data["median_ratios"].items():
        lines.append(f"| {name} | " + " | ".join(str(rep["ratios"][name]) for rep in data["reps"]) + f" | {median} |")
    missing = {arm: r["missing"] for rep in data["reps"] for arm, r in rep["runs"].items() if r["missing"]}
    missing |= {arm: r["missing"] for arm, r in data["coverage_runs"].items() if r["missing"]}
    for arm, names in missing.items():
        lines.append(f"\n{arm}: not in its suite, left out: {' '.join(names)}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
