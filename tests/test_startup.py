"""A command's start-up: what a fresh `zmr` process imports, and its CPU time against Python's own start (issue #50.4:
typer 0.29 brought pydantic into every command, +100 ms of CPU to `zmr list` and to a completion TAB).

These run zmr as a process: what is imported is a question about a fresh interpreter. scripts/bench_startup.py
measures the same commands against git, ruff and pre-commit (benchmarks/results-startup.md).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, simple_model, state_dir

# Never on the way to a listing, a help page or a completion: pydantic (typer 0.29's conversions), numpy (the
# `evidence` extra: mismatch and locate alone), rich (tables on a terminal alone), click (typer 0.26+ has its own copy),
# and what the other commands bring; importlib.resources (importlib.abc's classes bring it: zmr's moved-modules finder
# does without them); email (its parsers and writers, with socket and random: a patch's author and date are read
# on first use, and a listing never asks).
HEAVY = ("pydantic", "numpy", "rich", "click", "jsonschema", "torch", "safetensors", "ray", "importlib.resources", "email")
TAB = {"_ZMR_COMPLETE": "complete_bash", "COMP_WORDS": "zmr build ", "COMP_CWORD": "2"}
PROBE = (
    "{before}\nimport sys, json\nfrom zmr.cli import main\n"
    "code = main(sys.argv[1:])\nsys.stdout.flush()\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\nsys.exit(code)"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    env.update(PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def _imported(cwd, *args: str, env: dict[str, str] | None = None, before: str = "") -> tuple[str, set[str]]:
    """zmr's output and the modules imported when it ends (*before*: Python run first, in the same process)."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(before=before), *args], cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, set(json.loads(done.stderr.splitlines()[-1]))


def test_list_help_status_version_and_completion_import_nothing_heavy(project, upstream):
    simple_model(project, upstream)
    cases = {
        "list": _imported(project.root, "list"),
        "--help": _imported(project.root, "--help"),
        "build --help": _imported(project.root, "build", "--help"),
        "status": _imported(project.root, "status"),
        "-V": _imported(project.root, "-V"),
        "build <TAB>": _imported(project.root, env=_env(**TAB)),
    }
    assert "toy" in cases["list"][0] and "toy" in cases["build <TAB>"][0].split()  # each did its work
    for what, (_, modules) in cases.items():
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
        assert not heavy, f"zmr {what} imports {heavy}"
    assert "typer" in cases["list"][1]  # the probe sees imports at all


def test_opening_a_project_imports_recovery_and_migration_only_when_there_is_something_to_recover_or_migrate(project, upstream):
    """Every command opens the project (zmr.ops.recovery.open_project): where no write was cut short and no older zmr's
    `.zmr/` is left (nearly always), neither the journal machinery nor the migration is imported; a journal left, or a
    `.zmr/`, brings them, and the journal is undone as before."""
    simple_model(project, upstream)
    machinery = {"zmr.infra.transaction", "zmr.ops.legacy"}
    assert not machinery & _imported(project.root, "list")[1]
    journal = state_dir(project.root) / "transactions/update/toy/rollout.json"  # a name with folders, as a rebase's
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"version": 1, "phase": "staging", "dirs": [], "files": [], "remove": []}))
    listed, modules = _imported(project.root, "list")
    assert "toy" in listed and "zmr.infra.transaction" in modules and "zmr.ops.legacy" not in modules
    assert not journal.exists()  # undone: what a SIGKILL before the commit point leaves
    (project.root / ".zmr").mkdir()
    assert "zmr.ops.legacy" in _imported(project.root, "list")[1]


def test_the_command_runs_with_the_garbage_collector_on_and_what_the_import_made_frozen(project, upstream):
    """`zmr` and `python -m zmr` (zmr.__main__.run) import the CLI with the collector off and freeze what it made (it lives as
    long as the process); the command itself runs with the collector on: a long build or update makes garbage in cycles."""
    simple_model(project, upstream)
    probe = (
        "import gc, sys, zmr.cli\n"
        "command = zmr.cli.main\n"
        "zmr.cli.main = lambda: print(gc.isenabled(), gc.get_freeze_count() > 10000, file=sys.stderr) or command()\n"
        "from zmr.__main__ import run\nsys.exit(run())"
    )
    done = subprocess.run([sys.executable, "-c", probe, "list"], cwd=project.root, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "toy" in done.stdout, done.stderr
    assert done.stderr.splitlines()[0] == "True True"


def test_the_probe_sees_a_heavy_import(project, upstream):
    """The check above can fail: the same probe with numpy imported on the way (as `zmr mismatch` does) sees it."""
    pytest.importorskip("numpy")
    simple_model(project, upstream)
    assert "numpy" in _imported(project.root, "list", before="import numpy")[1]
    assert "numpy" not in _imported(project.root, "list")[1]


def _cpu(argv: list[str], cwd, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _bundled_example(tmp_path: Path) -> Path:
    """A copy of the bundled example (manifests/, patches/, upstreams/, zmr.yaml: 2 models, 45 patches), in a repository of its own."""
    root = tmp_path / "example"
    for folder in ("manifests", "patches", "upstreams"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    shutil.copy2(REPO_ROOT / "zmr.yaml", root / "zmr.yaml")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


# CPU over `python -c pass` (11-16 ms here: 2 cores, shared), the least of 15 interleaved rounds of each. `zmr list` in
# the bundled example, against issue #50.4's target of under 150 ms (scripts/bench_startup.py measures it: the console
# script, medians, benchmarks/results-startup.md). Run as here (`python -m zmr`, on the shared machine, also beside a
# parallel run of other tests), this code read 9.6-12.6 on Pythons 3.10-3.13 (dependency floors included; 3.12 the
# highest), c669534's (before the cuts of #50.4: email.utils, the journal machinery, patterns compiled at import, the
# collector walking the import) 11.7-14.1 in the same runs, zmr 0.2.0's 14.4-17.1 in earlier ones: the ratio moves about
# 10% from run to run, so the bound, 14, leaves this code that 10% for load and fails 0.2.0's code, and c669534's in its
# slower runs. A completion TAB (small project): 4.6-6.0 with typer 0.26-0.28, 19.5-21 with typer 0.29's pydantic
# (conversions built for every parameter of every command).
BOUNDS = {"list": 14, "tab": 12}


def test_list_and_completion_cost_a_bounded_multiple_of_pythons_own_start(project, upstream, tmp_path):
    simple_model(project, upstream)
    example = _bundled_example(tmp_path)
    runs = {
        "pass": ([sys.executable, "-c", "pass"], project.root, _env()),
        "list": ([sys.executable, "-m", "zmr", "list"], example, _env()),
        "tab": ([sys.executable, "-m", "zmr"], project.root, _env(**TAB)),
    }
    listed = subprocess.run(runs["list"][0], cwd=example, env=_env(), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "demo-moe" in listed.stdout, listed.stderr  # the bundled example, read whole
    for argv, cwd, env in runs.values():  # bytecode written
        _cpu(argv, cwd, env)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(15):  # interleaved: a busy moment weighs on every command alike
        for name, (argv, cwd, env) in runs.items():
            samples[name].append(_cpu(argv, cwd, env))
    # The least of each: others' work on the cores only ever adds CPU time (caches, frequency), so the least is the
    # command's own cost; a median moved with the load (one in five runs of 3.12 read 17.5 beside a parallel suite).
    base = min(samples["pass"])
    ratios = {name: min(s) / base for name, s in samples.items() if name != "pass"}
    print(f"CPU over `python -c pass` ({1000 * base:.0f} ms): {ratios}")
    assert all(ratios[name] < bound for name, bound in BOUNDS.items()), f"CPU over `python -c pass` ({1000 * base:.0f} ms): {ratios}"
