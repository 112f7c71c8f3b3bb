#!/usr/bin/env python3
"""The test suite with the CLI in-process (tests/conftest.py's ``zmr``) against every call a subprocess, interleaved.

The baseline is the suite as it ran before the CLI ran in-process: each
``zmr(...)`` of a test a ``python -m zmr`` subprocess (``ZMR_TEST_SUBPROCESS=1``
asks conftest for exactly that). The two arms run the same test files, one
after the other, ``--repeat`` times, alternating which goes first; each run
is a fresh ``pytest -q -p no:cacheprovider`` process. With ``--coverage``,
each run is measured by coverage.py with branch coverage, subprocesses
included (coverage's ``patch = subprocess``), so the subprocess arm's zmr
processes count as the in-process arm's calls do; the script prints each
arm's branch coverage of zmr/ next to its time.

Prints, per repetition, both wall times and their ratio (in-process over
subprocess), then the median ratio; writes ``--out``/results-tests.{json,md}.

    python scripts/bench_tests.py tests/test_export.py tests/test_rebase.py
    python scripts/bench_tests.py --coverage --repeat 1        # the whole suite: long
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"in-process": {}, "subprocess": {"ZMR_TEST_SUBPROCESS": "1"}}
_PASSED = re.compile(r"(\d+) passed")
_TOTAL = re.compile(r"^TOTAL\s.*?(\d+(?:\.\d+)?)%\s*$", re.M)


def _coverage_rc(folder: Path) -> Path:
    rc = folder / "coveragerc"
    rc.write_text(f"[run]\nbranch = true\nparallel = true\npatch = subprocess\nsource = {ROOT / 'zmr'}\ndata_file = {folder / '.coverage'}\n")
    return rc


def run_arm(arm: str, files: list[str], coverage: bool) -> dict[str, object]:
    env = {**os.environ, **ARMS[arm]}
    with tempfile.TemporaryDirectory(prefix=f"bench-tests-{arm}-") as tmp:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
        if coverage:
            rc = _coverage_rc(Path(tmp))
            command = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
            env["COVERAGE_RCFILE"] = str(rc)
        started = time.monotonic()
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        tail = proc.stdout.strip().splitlines()[-1:] or [""]
        passed = _PASSED.search(tail[0])
        result: dict[str, object] = {
            "arm": arm,
            "wall_s": round(wall, 2),
            "exit": proc.returncode,
            "summary": tail[0],
            "passed": int(passed.group(1)) if passed else 0,
        }
        if coverage:
            subprocess.run([sys.executable, "-m", "coverage", "combine", f"--rcfile={rc}"], cwd=ROOT, env=env, capture_output=True)
            report = subprocess.run([sys.executable, "-m", "coverage", "report", f"--rcfile={rc}"], cwd=ROOT, env=env, capture_output=True, text=True)
            total = _TOTAL.search(report.stdout)
            result["branch_coverage_pct"] = float(total.group(1)) if total else None
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files or folders (default: the whole suite, tests/)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--coverage", action="store_true", help="measure branch coverage of zmr/ in both arms (pip install coverage)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args()
    files = args.files or ["tests"]
    runs = []
    for rep in range(args.repeat):
        order = ["in-process", "subprocess"] if rep % 2 == 0 else ["subprocess", "in-process"]
        pair = {arm: run_arm(arm, files, args.coverage) for arm in order}
        for arm in order:
            print(f"rep {rep + 1} {arm:10s} {pair[arm]['wall_s']:8.1f} s  {pair[arm]['summary']}", flush=True)
        if any(pair[arm]["exit"] != 0 for arm in order):
            print("a run failed: its figures are not comparable", file=sys.stderr)
            return 1
        ratio = float(pair["in-process"]["wall_s"]) / float(pair["subprocess"]["wall_s"])  # type: ignore[arg-type]
        print(f"rep {rep + 1} ratio in-process / subprocess: {ratio:.3f}", flush=True)
        runs.append({"rep": rep + 1, "ratio": round(ratio, 3), **{arm: pair[arm] for arm in order}})
    median = statistics.median(r["ratio"] for r in runs)
    print(f"median ratio in-process / subprocess over {len(runs)} repetitions: {median:.3f}")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    data = {"files": files, "repeat": args.repeat, "coverage": args.coverage, "machine": machine, "median_ratio": median, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results-tests.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# The suite with the CLI in-process against a subprocess per call (scripts/bench_tests.py)",
        "",
        f"{machine}; files: {' '.join(files)}; interleaved, {args.repeat} repetitions.",
        "",
        "| rep | in-process | subprocess | ratio |" + (" branch cov. in-process | branch cov. subprocess |" if args.coverage else ""),
        "| ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if args.coverage else ""),
    ]
    for r in runs:
        row = f"| {r['rep']} | {r['in-process']['wall_s']} s | {r['subprocess']['wall_s']} s | {r['ratio']} |"
        if args.coverage:
            row += f" {r['in-process'].get('branch_coverage_pct')} % | {r['subprocess'].get('branch_coverage_pct')} % |"
        lines.append(row)
    lines += ["", f"Median ratio: {median:.3f}."]
    (args.out / "results-tests.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
