#!/usr/bin/env python3
"""`zmr smoke` interrupted many times under CPU load: does every SIGINT (or SIGTERM) end it, cleanly, in bounded time? (issue #36)

    python scripts/interrupt_stress.py --runs 30                    # SIGINT once the test reports it runs, plus 0-0.5 s
    python scripts/interrupt_stress.py --runs 30 --when random      # SIGINT at a random moment from 0 to 4 s after start
    python scripts/interrupt_stress.py --runs 30 --load 0           # without the busy loops

Each run copies a project with the `slow` model of tests/smoke/test_smoke.py
(its `wait` test writes its pid, then waits forever), starts `python -m zmr
smoke slow --only wait` with the interpreter this script runs on, sends the
signal, and waits --limit seconds. A run fails when zmr is still there then
(its threads' stacks, dumped by faulthandler on SIGABRT, are printed), exits
with another status than 130 (143 for SIGTERM; a signal before zmr's own
code runs may end Python by the signal itself: -2 or -15), or leaves the
test's processes or its worktree behind. ``--load N`` runs N Python busy
loops meanwhile (default: one per core).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "smoke"))

from conftest import git, make_patch, make_project, make_upstream  # noqa: E402
from test_smoke import SLOW  # noqa: E402


# A signal while Python itself starts (its `site` module, before the first line of zmr runs) ends it with a traceback
# and exit status 1: no program written in Python can answer that one, and nothing was started yet. Counted apart.
STARTUP = "during Python's own start-up"


def _busy() -> None:
    while True:
        pass


def _template(base: Path) -> Path:
    rollout = make_upstream(base / "rollout-up")
    project = make_project(base / "project")
    pin = rollout.commits[1]
    model_py = rollout.file_at(pin, "src/model.py") + "\n"
    r1 = make_patch(rollout, pin, {"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split size in matmul")
    project.series("slow", "rollout", [("0001-fixed-split.patch", r1)])
    project.write("manifests/slow.yaml", SLOW.format(rollout=rollout.path, rollout_pin=pin))
    project.commit_all("models")
    return project.root


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def one_run(template: Path, folder: Path, sig: int, when: str, limit: float, rng: random.Random) -> tuple[str, float]:
    """'' when the run ended as it should; else what went wrong. Also the seconds from the signal to the exit."""
    root = folder / "project"
    shutil.copytree(template, root, symlinks=True)
    (folder / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "ZMR_"))}
    env.update({"HOME": str(folder / "home"), "ZMR_CACHE": str(folder / "cache"), "ZMR_SMOKE_KILL_GRACE": "5", "PYTHONFAULTHANDLER": "1"})
    state = Path(git("rev-parse", "--path-format=absolute", "--git-dir", cwd=root)) / "zmr/smoke/slow"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "zmr", "smoke", "slow", "--only", "wait"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid_file = state / "wait.pid"
    if when == "ready":
        while not (pid_file.exists() and pid_file.read_text().strip()) and proc.poll() is None and time.monotonic() < started + limit:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.5))
    else:
        time.sleep(rng.uniform(0, 4.0))
    if proc.poll() is not None:
        return f"exited {proc.returncode} before the signal: {proc.communicate()[1].decode()[-400:]}", 0.0
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        _out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack on stderr
        _out, err = proc.communicate()
        return f"still running {limit:.0f} s after the signal; its stacks:\n{err.decode()[-6000:]}", time.monotonic() - sent
    took = time.monotonic() - sent
    # 130: interrupted; SIGTERM while the tests run is reported as an interrupt too, and as 143 (terminated) before they run.
    expected = {130} if sig == signal.SIGINT else {130, 143}
    early = -sig  # Python itself ended by the signal, before zmr's code ran: nothing was started yet
    text = err.decode()
    if proc.returncode not in (*expected, early):
        if "<frozen site>" in text and "zmr/__main__.py" not in text and "zmr/cli" not in text:
            return f"{STARTUP}: exit {proc.returncode}", took
        return f"exit {proc.returncode}: {text[-800:]}", took
    if proc.returncode == early and pid_file.exists():
        return f"exit {proc.returncode} (ended by the signal) after the test had started: {text[-400:]}", took
    if pid_file.exists() and pid_file.read_text().strip():
        pid = int(pid_file.read_text())
        until = time.monotonic() + 10
        while not _gone(pid) and time.monotonic() < until:
            time.sleep(0.05)
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
            return "the test's process outlived zmr", took
    trees = [line for line in git("worktree", "list", "--porcelain", cwd=root).splitlines() if line.startswith("worktree ")][1:]
    if trees:
        return f"worktrees left: {trees}", took
    return "", took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--when", choices=["ready", "random"], default="ready")
    parser.add_argument("--signal", choices=["INT", "TERM"], default="INT")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy loops meanwhile")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds zmr has to exit after the signal")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        del os.environ[key]
    sig = getattr(signal, f"SIG{options.signal}")
    rng = random.Random(options.seed)
    burners = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(options.load)]
    for burner in burners:
        burner.start()
    failures: list[int] = []
    startup: list[int] = []
    times: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="zmr-interrupt-") as tmp:
            template = _template(Path(tmp) / "template")
            for run in range(1, options.runs + 1):
                folder = Path(tmp) / f"run-{run}"
                folder.mkdir()
                what, took = one_run(template, folder, sig, options.when, options.limit, rng)
                times.append(took)
                verdict = "ok" if not what else "not zmr's" if what.startswith(STARTUP) else "FAILED"
                print(f"run {run:3}: {verdict} ({took:.2f} s after the signal){': ' + what if what else ''}", flush=True)
                if what.startswith(STARTUP):
                    startup.append(run)
                elif what:
                    failures.append(run)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        for burner in burners:
            burner.terminate()
    times.sort()
    early = f" ({len(startup)} signalled {STARTUP}, not counted)" if startup else ""
    print(f"{options.runs} runs, {len(failures)} failed{early}; exit after the signal: median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
