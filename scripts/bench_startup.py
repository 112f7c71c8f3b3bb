#!/usr/bin/env python3
"""Start-up of zmr's commands against other command-line tools a developer runs, interleaved in one run (issue #50.4).

Each round runs every command once, in the same order: `python -c pass` (the interpreter's own start), `git
--version`, `ruff --version` (a native binary), `pre-commit --version` (a Python CLI), then `zmr -V`, `zmr --help`,
`zmr list`, `zmr status` and a completion TAB (`zmr build <TAB>` through the shell protocol: `_ZMR_COMPLETE=
complete_bash`, `COMP_WORDS`, `COMP_CWORD`), in the bundled example (this repository). Per command: the median over
the rounds of its CPU time (user + system of the process and the processes it waited for: `resource.getrusage`
of this script's children, before and after) and of its wall time; the ratios are of medians of the same run.

zmr and the Python tools run from the virtual environment of the Python that runs this script (its `bin/`), with
their bytecode cached as an installed zmr has it: `PYTHONDONTWRITEBYTECODE` is unset (an editable install otherwise
compiles every module of zmr on every run) and one warm-up round goes first. CPU time is what to compare on a
shared machine: wall time waits for the other processes on its cores.

    .venv/bin/python scripts/bench_startup.py                # 21 rounds; writes benchmarks/results-startup.{json,md}
    .venv/bin/python scripts/bench_startup.py --rounds 5 --out /tmp/startup
    PATH=.venv/bin:$PATH /tmp/typer29/bin/python scripts/bench_startup.py --label typer-0.29   # zmr installed there too
    git worktree add /tmp/zmr-main main && .venv/bin/python scripts/bench_startup.py --baseline /tmp/zmr-main

--baseline DIR adds rows for `zmr --help` and `zmr list` run from the zmr source in DIR (PYTHONPATH=DIR, the same
interpreter and packages), in the same rounds: a change against its baseline, as a ratio of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TAB = {"_ZMR_COMPLETE": "complete_bash", "COMP_WORDS": "zmr build ", "COMP_CWORD": "2"}


def commands(baseline: Path | None = None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Label → (argv, extra environment), in the order of each round; *baseline*: a zmr source folder whose `zmr --help` and
    `zmr list` run too (the console script puts its own folder first on sys.path, then PYTHONPATH, then the installed zmr)."""

    def tool(name: str, hint: str) -> str:
        found = BIN / name if (BIN / name).exists() else shutil.which(name)
        if not found:
            sys.exit(f"bench_startup: {name} not found next to {sys.executable} nor on PATH: {hint}")
        return str(found)

    zmr = tool("zmr", "pip install -e . in this virtual environment")
    if baseline is not None and not (baseline / "zmr" / "__init__.py").is_file():
        sys.exit(f"bench_startup: {baseline} holds no zmr/__init__.py: give a checkout of zmr (git worktree add DIR main)")
    at_baseline = {"PYTHONPATH": str(baseline.resolve())} if baseline is not None else {}
    return {
        "python -c pass": ([sys.executable, "-c", "pass"], {}),
        "git --version": ([tool("git", "install git"), "--version"], {}),
        "ruff --version": ([tool("ruff", "pip install -e '.[lint]'"), "--version"], {}),
        "pre-commit --version": ([tool("pre-commit", "pip install pre-commit"), "--version"], {}),
        "zmr -V": ([zmr, "-V"], {}),
        "zmr --help": ([zmr, "--help"], {}),
        "zmr list": ([zmr, "list"], {}),
        "zmr status": ([zmr, "status"], {}),
        "zmr build <TAB>": ([zmr], TAB),
        **({"zmr --help (baseline)": ([zmr, "--help"], at_baseline), "zmr list (baseline)": ([zmr, "list"], at_baseline)} if at_baseline else {}),
    }


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run; a failure stops the bench (a fast error is no start-up)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or (argv[1:] == [] and not done.stdout.strip()):
        sys.exit(f"bench_startup: {' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds (default 21)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks", help="folder for results-startup.{json,md}")
    parser.add_argument("--baseline", type=Path, help="a zmr source folder (e.g. a worktree of main): its `zmr --help` and `zmr list` in the same rounds")
    parser.add_argument("--label", default="", help="results-startup-LABEL.{json,md}: another environment's run (e.g. typer-0.29)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and k not in TAB and not k.startswith("ZMR_")}
    table = commands(args.baseline)
    load_before = os.getloadavg()
    for argv, extra in table.values():  # warm-up: bytecode written, files in the page cache
        run_once(argv, {**env, **extra})
    samples: dict[str, dict[str, list[float]]] = {label: {"cpu": [], "wall": []} for label in table}
    for _ in range(args.rounds):
        for label, (argv, extra) in table.items():
            cpu, wall = run_once(argv, {**env, **extra})
            samples[label]["cpu"].append(cpu)
            samples[label]["wall"].append(wall)
    load_after = os.getloadavg()
    medians = {label: {kind: statistics.median(values) for kind, values in s.items()} for label, s in samples.items()}
    baselines = ["python -c pass", "git --version", "ruff --version", "pre-commit --version", "zmr --help"]
    ratios = {
        label: {f"cpu_over[{base}]": round(m["cpu"] / medians[base]["cpu"], 2) if medians[base]["cpu"] else None for base in baselines}
        for label, m in medians.items()
    }
    machine = {
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load_average_1min": [round(load_before[0], 1), round(load_after[0], 1)],
        "typer": version("typer"),
        "rich": version("rich"),
        "PyYAML": version("PyYAML"),
        "pydantic": version("pydantic"),
        "zmr": version("zmr"),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    result = {
        "rounds": args.rounds,
        "machine": machine,
        "median_ms": {label: {kind: round(1000 * v, 1) for kind, v in m.items()} for label, m in medians.items()},
        "ratios": ratios,
        "samples_ms": {label: {kind: [round(1000 * v, 1) for v in values] for kind, values in s.items()} for label, s in samples.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "results-startup" + (f"-{args.label}" if args.label else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Start-up: zmr's commands against git, ruff and pre-commit" + (f" ({args.label})" if args.label else ""),
        "",
        f"`scripts/bench_startup.py --rounds {args.rounds}{' --label ' + args.label if args.label else ''}"
        f"{' --baseline ' + str(args.baseline) if args.baseline else ''}`: {args.rounds} interleaved rounds after one",
        "warm-up round, medians; CPU is",
        "user + system of the command and of the processes it waited for (git, for `zmr list` and `zmr status`). Python",
        f"{machine['python']}, {machine['cores']} cores (load average {machine['load_average_1min'][0]} before, {machine['load_average_1min'][1]} after: "
        "a machine shared with other work, so compare CPU, and ratios of one run),",
        f"typer {machine['typer']}, rich {machine['rich']}, PyYAML {machine['PyYAML']}, pydantic {machine['pydantic']}; {machine['date']}.",
        "",
        "| command | CPU ms | wall ms | " + " | ".join(f"CPU / `{base}`" for base in baselines) + " |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, m in medians.items():
        r = ratios[label]
        cells = [f"{r[f'cpu_over[{base}]']:.2f}" if r[f"cpu_over[{base}]"] is not None else "-" for base in baselines]
        lines.append(f"| `{label}` | {1000 * m['cpu']:.0f} | {1000 * m['wall']:.0f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "What each row runs: `zmr build <TAB>` is bash's completion request (`_ZMR_COMPLETE=complete_bash COMP_WORDS='zmr build '",
        "COMP_CWORD=2 zmr`), which lists the bundled models; `zmr list` and `zmr status` read the bundled example (2 models,",
        "45 patches). The samples of every run are in results-startup.json.",
        "",
    ]
    if args.baseline:
        ratio = {what: medians[f"zmr {what}"]["cpu"] / medians[f"zmr {what} (baseline)"]["cpu"] for what in ("--help", "list")}
        lines[-1:] = [
            f"The `(baseline)` rows run the zmr source in {args.baseline} (PYTHONPATH; the same interpreter and packages), in the same",
            f"rounds: CPU of this zmr over the baseline's, `zmr list` {ratio['list']:.2f}, `zmr --help` {ratio['--help']:.2f}.",
            "",
        ]
    (args.out / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
