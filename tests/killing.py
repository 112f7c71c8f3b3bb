"""The kill harness (issue #36): every writing command SIGKILLed at chosen fault points, then recovered by the next zmr commands.

A scenario builds a real fixture (an upstream, a zmr project, a checkout,
a cache, a remote: all under one folder), runs its command once
uninterrupted to learn its fault points (``ZMR_TEST_KILL_LOG``, see
zmr/infra/faults.py) and the state it reaches, then, for each kill point N:

1. puts the folder back as it was before the command (a byte copy);
2. runs the command with ``ZMR_TEST_KILL=N``: zmr SIGKILLs itself at its
   N-th fault point (a git process about to start, a file written or
   renamed, a step of a transaction);
3. runs ``zmr list`` (the next zmr command, whatever it is: it must exit 0,
   and say ``finished now`` or ``undone now`` when a journal was left);
4. runs the command again; when that refuses (a rebase or merge the kill
   left in progress), it follows the first ``zmr ...`` command the message
   names, literally, and runs the command again (at most three times);
5. checks the state equals the uninterrupted run's: the project's files,
   its branches, the checkout's tree, commits and cleanliness, the remote's
   branches. So nothing the user had is lost (their commits are in the
   series the uninterrupted run writes) and no half-written file survives.

Kills anywhere (issue #47.10): ``run_random`` kills the command at a seeded
random instant instead, by SIGKILL or SIGHUP to its whole process group (zmr
and the git it runs: inside a cherry-pick too, between any two of git's own
writes), then checks steps 3 to 5 the same way. The instants are drawn from
the time between the first fault point of the uninterrupted run and its end.

The killed command, and the uninterrupted runs that log its fault points
or time it, run as processes of their own (``run_zmr``); the commands of
steps 3 and 4, and those that build a fixture, run the CLI's `main` in this
process (``run_here``): what they are tested for is on disk.

Used by tests/test_kill_harness.py (a few points per command, seeded) and
scripts/kill_harness.py (every point, or more seeds).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from conftest import _in_process, git, make_project, make_upstream, simple_model

_PROBE = ["list"]


def environment(env: dict[str, str], extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a command of the harness runs with: this process's environment without ZMR_REPO, git's variables and the test
    hooks, then the fixture's *env* and *extra*."""
    full = {k: v for k, v in os.environ.items() if k != "ZMR_REPO" and not k.startswith(("GIT_", "ZMR_TEST_"))}
    full.update(env)
    full.update(extra or {})
    return full


def run_zmr(args: list[str], cwd: Path, env: dict[str, str], extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a process of its own: the one that is killed, and the uninterrupted run that is its reference."""
    return subprocess.run([sys.executable, "-m", "zmr", *args], cwd=cwd, env=environment(env, extra), capture_output=True, text=True, timeout=300)


def run_here(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A command whose process is not what is tested (one that builds a fixture; after a kill, ``zmr list``, the rerun and
    the advice followed): the CLI's `main` in this process, with the environment `run_zmr` gives a process (conftest's
    in-process runner: its folder, environment and streams as a process has them). What the commands after a kill are
    tested for is what they make of the state the killed process left, which is all on disk; a fresh interpreter for
    each was most of the harness's CPU."""
    return _in_process(list(args), cwd, environment(env), None)


@dataclass
class Fixture:
    """What a scenario built: where to run, the command, and what its snapshot reads."""

    base: Path
    cwd: Path
    args: list[str]
    env: dict[str, str]
    code: int = 0  # the exit status of an uninterrupted run
    done: str | None = None  # a rerun refusing with this (a regex) means the killed run had finished
    remote: Path | None = None


@dataclass
class Scenario:
    name: str
    build: Callable[[Path], Fixture]


@dataclass
class Trial:
    point: int
    name: str
    killed: bool
    recovered: str  # what the next command said: "finished", "undone" or ""
    steps: list[str] = field(default_factory=list)


def snapshot(fx: Fixture) -> dict[str, object]:
    """What the user sees: project files (not .git/, work/ or staged copies), branches and tags, the checkout, the remote's branches."""
    root = fx.cwd
    files: dict[str, bytes] = {}
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] in (".git", "work") or not path.is_file() or path.name.endswith((".zmr-stage", ".zmr-tmp")):
                continue
            files[rel.as_posix()] = path.read_bytes()
    state: dict[str, object] = {"files": files}
    if (root / ".git").exists():
        state["refs"] = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags", cwd=root)
    for co in sorted((root / "work").glob("*/*")) if (root / "work").is_dir() else []:
        if not (co / ".git").exists():
            continue
        state[f"checkout {co.relative_to(root)}"] = (
            git("rev-parse", "HEAD^{tree}", cwd=co),
            git("log", "--format=%s%n%b", "zmr/base..HEAD", cwd=co),
            git("rev-parse", "zmr/base", cwd=co),
            git("status", "--porcelain", "--untracked-files=all", cwd=co),
        )
    if fx.remote is not None:
        state["remote"] = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", cwd=fx.remote)
    return state


def _advice(stderr: str) -> list[str] | None:
    """The first ``zmr ...`` command in backticks in the detail lines of the error (what to do), not in its headline (what is wrong)."""
    details = "\n".join(line for line in stderr.splitlines() if line.startswith("  "))
    for command in re.findall(r"`([^`]+)`", details):
        if command.startswith("zmr "):
            return shlex.split(command)[1:]
    return None


def _check_output(where: str, result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr and result.returncode != 3 and result.returncode >= 0, f"{where}: exit {result.returncode}\n{result.stderr}"


def converge(fx: Fixture) -> tuple[str, list[str]]:
    """Steps 3 and 4 of the module docstring; what the next command said, and the commands run."""
    steps = []
    said = ""
    if (fx.cwd / ".git").exists():
        probe = run_here(_PROBE, fx.cwd, fx.env)
        _check_output("zmr list after the kill", probe)
        if (fx.cwd / "manifests").is_dir():
            assert probe.returncode == 0, probe.stderr
        found = re.search(r"half-written change \([^)]*\): (finished|undone) now", probe.stderr)
        said = found.group(1) if found else ""
        steps.append("list")
    for _ in range(4):
        rerun = run_here(fx.args, fx.cwd, fx.env)
        _check_output(f"rerun of zmr {' '.join(fx.args)}", rerun)
        steps.append(" ".join(fx.args) + f" -> {rerun.returncode}")
        own = re.search(r": (finished|undone) now: (?:zmr's|the lock)", rerun.stderr)  # its own work in a checkout, finished or undone (#47.10)
        said = said or (own.group(1) if own else "")
        if rerun.returncode == fx.code or (fx.done is not None and re.search(fx.done, rerun.stderr)):
            return said, steps
        advised = _advice(rerun.stderr)
        assert advised is not None, f"zmr {' '.join(fx.args)} refused with no command to run:\n{rerun.stderr}"
        followed = run_here(advised, fx.cwd, fx.env)
        _check_output(f"advised zmr {' '.join(advised)}", followed)
        steps.append(" ".join(advised) + f" -> {followed.returncode}")
    raise AssertionError(f"zmr {' '.join(fx.args)} did not converge: {steps}\n{rerun.stderr}\nzmr {' '.join(advised)}:\n{followed.stderr}")


def run_scenario(scenario: Scenario, folder: Path, pick: Callable[[list[str]], list[int]]) -> tuple[int, list[Trial]]:
    """Build the fixture in *folder*, learn the fault points, and try the kill points *pick* chooses from them (1-based)."""
    base = folder / scenario.name
    fx = scenario.build(base)
    pristine = folder / f"{scenario.name}.pristine"
    shutil.copytree(base, pristine, symlinks=True)
    log = folder / f"{scenario.name}.points"
    first = run_zmr(fx.args, fx.cwd, fx.env, {"ZMR_TEST_KILL_LOG": str(log)})
    assert first.returncode == fx.code, f"{scenario.name}: the uninterrupted run: exit {first.returncode}\n{first.stderr}"
    points = log.read_text().splitlines()
    expected = snapshot(fx)
    trials = []
    for point in pick(points):
        shutil.rmtree(base)
        shutil.copytree(pristine, base, symlinks=True)
        killed = run_zmr(fx.args, fx.cwd, fx.env, {"ZMR_TEST_KILL": str(point)})
        assert killed.returncode in (-signal.SIGKILL, fx.code), f"{scenario.name} at point {point}: exit {killed.returncode}\n{killed.stderr}"
        said, steps = converge(fx)
        now = snapshot(fx)
        where = f"{scenario.name}, killed at point {point} ({points[point - 1]}); then {steps}"
        assert now.keys() == expected.keys(), where
        for key in expected:
            assert now[key] == expected[key], f"{where}: {key} differs"
        trials.append(Trial(point, points[point - 1], killed.returncode == -signal.SIGKILL, said, steps))
    shutil.rmtree(pristine)
    return len(points), trials


@dataclass
class RandomTrial:
    seed: int
    signal: str  # SIGKILL or SIGHUP
    delay: float  # seconds after the start
    killed: bool  # False: the command had finished before the instant
    recovered: str
    steps: list[str] = field(default_factory=list)
    failed: str = ""  # what went wrong ("" when it converged to the uninterrupted run's state)


_RANDOM_SIGNALS = (signal.SIGKILL, signal.SIGHUP)


def _timed_run(fx: Fixture, log: Path) -> tuple[int, list[float], float]:
    """The uninterrupted run: (exit status, the second at which each fault point was reached, seconds in all)."""
    full = environment(fx.env, {KILL_LOG: str(log)})
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "zmr", *fx.args], cwd=fx.cwd, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times: list[float] = []
    while proc.poll() is None:
        seen = log.read_text().count("\n") if log.exists() else 0
        times += [time.monotonic() - started] * (seen - len(times))
        time.sleep(0.002)
    total = time.monotonic() - started
    seen = log.read_text().count("\n") if log.exists() else 0
    times += [total] * (seen - len(times))
    return proc.returncode, times, total


KILL_LOG = "ZMR_TEST_KILL_LOG"


def hang_up_by_default() -> None:
    """A Popen preexec_fn: SIGHUP at its default action in the child, as a terminal's session has it. A test suite run
    under nohup (or a runner that ignores SIGHUP) hands its children SIGHUP ignored, and zmr keeps it so (it honours
    nohup): a test of what a hang-up does then saw none (exit 0, git's own death reported as zmr's error, a check not ended)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def kill_at_instant(fx: Fixture, delay: float, sig: int) -> tuple[int | None, str]:
    """Run the command, and *delay* seconds after its start send *sig* to its process group: its exit status, None when
    killed, and the end of what it wrote to stderr (a failed trial names it)."""
    full = environment(fx.env)
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nobody reads it while the command runs
        status = _killed(fx, full, delay, sig, stderr)
        stderr.seek(0)
        return status, stderr.read()[-2000:].decode("utf-8", "replace")


def _killed(fx: Fixture, full: dict[str, str], delay: float, sig: int, stderr: IO[bytes]) -> int | None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmr", *fx.args],
        cwd=fx.cwd,
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=hang_up_by_default,
    )
    try:
        proc.wait(timeout=delay)
        return proc.returncode
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, sig)  # zmr and the git processes it started: a CI runner's cancel, a closed terminal, the OOM killer
    except ProcessLookupError:
        pass
    proc.wait()
    # A git process that outlived zmr (it left the group) must not write after the kill: wait for the group to be gone.
    for _ in range(500):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    # Killed: by the signal (a SIGHUP before or after zmr's command too: its handler holds for the command only), or
    # (SIGHUP, which zmr handles as it does SIGTERM: its own work undone) exit 128 + SIGHUP.
    return None if proc.returncode in (-signal.SIGKILL, -signal.SIGHUP, 128 + signal.SIGHUP) else proc.returncode


def run_random(scenario: Scenario, folder: Path, seeds: list[int]) -> list[RandomTrial]:
    """Build the fixture in *folder*, time an uninterrupted run, then kill a run at a random instant per seed and check it converges.

    An instant is drawn between two consecutive fault points of the uninterrupted run (chosen at random, then a random
    point of the time between them): every step gets kills, however short, the git processes included; kills between
    the last point and the end, and of a run that finished first, are kept too (the run did its work: it must stay done).
    """
    base = folder / scenario.name
    fx = scenario.build(base)
    pristine = folder / f"{scenario.name}.pristine"
    shutil.copytree(base, pristine, symlinks=True)
    log = folder / f"{scenario.name}.timed-points"
    code, times, total = _timed_run(fx, log)
    assert code == fx.code, f"{scenario.name}: the uninterrupted run: exit {code}"
    # The timed run is slower (its log, the polling): its instants are scaled to a plain run's length.
    shutil.rmtree(base)
    shutil.copytree(pristine, base, symlinks=True)
    started = time.monotonic()
    assert run_zmr(fx.args, fx.cwd, fx.env).returncode == fx.code
    scale = min(1.0, (time.monotonic() - started) / total) if total else 1.0
    total *= scale
    marks = [t * scale for t in times] + [total]
    expected = snapshot(fx)
    trials = []
    for seed in seeds:
        rng = random.Random(f"{scenario.name}-{seed}")
        k = rng.randrange(len(marks) - 1) if len(marks) > 1 else 0
        delay = rng.uniform(marks[k], marks[k + 1]) if len(marks) > 1 else rng.uniform(0, total)
        sig = rng.choice(_RANDOM_SIGNALS)
        shutil.rmtree(base)
        shutil.copytree(pristine, base, symlinks=True)
        status, said = kill_at_instant(fx, delay, sig)
        trial = RandomTrial(seed, signal.Signals(sig).name, delay, status is None, "")
        where = f"{scenario.name}, {trial.signal} at {delay:.3f} s of {total:.3f} s (seed {seed})"
        try:
            assert status is None or status == fx.code, f"{where}: exit {status}; it said:\n{said}"
            trial.recovered, trial.steps = converge(fx)
            now = snapshot(fx)
            where += f"; then {trial.steps}"
            assert now.keys() == expected.keys(), where
            for key in expected:
                assert now[key] == expected[key], f"{where}: {key} differs:\n{now[key]!r}\nexpected\n{expected[key]!r}"
        except AssertionError as err:
            trial.failed = f"{where}: {err}" if not str(err).startswith(where) else str(err)
        trials.append(trial)
    shutil.rmtree(pristine)
    return trials


def sample(count: int, seed: int, always: tuple[str, ...] = ("commit-point",)) -> Callable[[list[str]], list[int]]:
    """*count* kill points chosen with *seed*, plus the first point of each kind in *always* (the transaction's commit point)."""

    def pick(points: list[str]) -> list[int]:
        chosen = {n for n, name in enumerate(points, start=1) if name in always and points.index(name) == n - 1}
        rng = random.Random(f"{seed}-{len(points)}")
        rest = [n for n in range(1, len(points) + 1) if n not in chosen]
        chosen.update(rng.sample(rest, min(count, len(rest))))
        return sorted(chosen)

    return pick


def every_point(points: list[str]) -> list[int]:
    return list(range(1, len(points) + 1))


# -- the scenarios: one per writing command --------------------------------------------------------------


def _project(base: Path, with_checkout: bool = True) -> tuple[Path, object, dict[str, str]]:
    env = {"ZMR_CACHE": str(base / "cache"), "HOME": str(base / "home")}
    (base / "home").mkdir(parents=True)
    upstream = make_upstream(base / "upstream")
    project = make_project(base / "project")
    project.write(".gitignore", "/work/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    if with_checkout:
        assert run_here(["checkout", "toy"], project.root, env).returncode == 0
    return project.root, upstream, env


def _commit(work: Path, name: str, text: str, subject: str) -> None:
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text(text)
    git("add", name, cwd=work)
    git("commit", "-q", "-m", subject, cwd=work)


def _export(base: Path) -> Fixture:
    root, _, env = _project(base)
    work = root / "work/toy/rollout"
    git("commit", "-q", "--amend", "-m", "Make matmul output contiguous (reworded)", cwd=work)
    for n in range(3):
        _commit(work, f"src/extra_{n}.py", f"value = {n}\n", f"Add extra module {n}")
    return Fixture(base, root, ["export", "toy"], env)


def _upstream_moves(upstream, conflict: bool) -> None:
    model_py = upstream.file_at(upstream.commits[-1], "src/model.py")
    if conflict:
        upstream.commit({"src/model.py": model_py.replace("line 10\n", "line 10 upstream\n")}, "Rework line 10")
    upstream.commit({"docs/guide.md": "guide v2\n"}, "Update the guide")


def _rebase(base: Path) -> Fixture:
    root, upstream, env = _project(base)
    _upstream_moves(upstream, conflict=False)
    return Fixture(base, root, ["rebase", "toy", "--onto", "main"], env)


def _stopped_rebase(base: Path) -> tuple[Path, dict[str, str]]:
    root, upstream, env = _project(base)
    _upstream_moves(upstream, conflict=True)
    stopped = run_here(["rebase", "toy", "--onto", "main"], root, env)
    assert stopped.returncode == 1, stopped.stderr
    return root, env


_NO_REBASE = r"no rebase (is )?in progress"


def _resolve(co: Path) -> None:
    text = (co / "src/model.py").read_text()
    (co / "src/model.py").write_text(re.sub(r"<<<<<<< [^\n]*\n.*?>>>>>>> [^\n]*\n", "line 10 upstream, fixed split\n", text, flags=re.S))
    git("add", "src/model.py", cwd=co)


def _rebase_continue(base: Path) -> Fixture:
    root, env = _stopped_rebase(base)
    _resolve(root / "work/toy/rollout")
    return Fixture(base, root, ["rebase", "toy", "--continue"], env, done=_NO_REBASE)


def _rebase_skip(base: Path) -> Fixture:
    root, env = _stopped_rebase(base)
    return Fixture(base, root, ["rebase", "toy", "--skip"], env, done=_NO_REBASE)


def _rebase_abort(base: Path) -> Fixture:
    root, env = _stopped_rebase(base)
    return Fixture(base, root, ["rebase", "toy", "--abort"], env, done=_NO_REBASE)


def _rebase_abort_written(base: Path) -> Fixture:
    """--abort of a rebase whose --continue was killed after writing its result (series and pin), before it forgot its state:
    the abort writes the series' files and the manifest back, in one transaction."""
    probe_root, probe_env = _stopped_rebase(base / "probe")
    _resolve(probe_root / "work/toy/rollout")
    log = base / "continue.points"
    assert run_zmr(["rebase", "toy", "--continue"], probe_root, probe_env, {"ZMR_TEST_KILL_LOG": str(log)}).returncode == 0
    points = log.read_text().splitlines()
    shutil.rmtree(base / "probe")
    log.unlink()
    root, env = _stopped_rebase(base / "real")
    _resolve(root / "work/toy/rollout")
    after = max(n for n, name in enumerate(points, start=1) if name in ("txn-rename", "txn-remove")) + 1  # the transaction done
    killed = run_zmr(["rebase", "toy", "--continue"], root, env, {"ZMR_TEST_KILL": str(after)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert b"line 10 upstream" in b"".join(p.read_bytes() for p in (root / "patches/toy/rollout").glob("*.patch")), "the series was written"
    return Fixture(base, root, ["rebase", "toy", "--abort"], env, done=_NO_REBASE)


def _update_apply(base: Path) -> Fixture:
    root, upstream, env = _project(base, with_checkout=False)
    for k in range(2):
        upstream.commit({f"docs/notes-{k}.md": f"note {k}\n"}, f"Add note {k}")
    return Fixture(base, root, ["update", "toy", "--apply"], env)


def _update_apply_3way(base: Path) -> Fixture:
    """Upstream edits a context line of 0001-fixed-split.patch: it no longer applies exactly, so the move cherry-picks in a checkout (3-way)."""
    root, upstream, env = _project(base)
    model_py = upstream.file_at(upstream.commits[-1], "src/model.py")
    upstream.commit({"src/model.py": model_py.replace("line 7\n", "line 7 upstream\n")}, "Rework line 7")
    return Fixture(base, root, ["update", "toy", "--apply"], env)


def _import(base: Path) -> Fixture:
    source, _, env = _project(base / "src", with_checkout=False)
    assert run_here(["build", "--all"], source, env).returncode == 0
    target = make_project(base / "target").root
    return Fixture(base, target, ["import", "rollout/toy", "--remote", str(source)], env, done=r"already exists")


def _new(base: Path) -> Fixture:
    env = {"ZMR_CACHE": str(base / "cache"), "HOME": str(base / "home")}
    (base / "home").mkdir(parents=True)
    upstream = make_upstream(base / "upstream")
    root = make_project(base / "project").root
    args = ["new", "qwen3", "-c", f"rollout={upstream.path}@{upstream.commits[1]}", "-c", f"trainer={upstream.path}@{upstream.commits[2]}"]
    return Fixture(base, root, args, env, done=r"has a component '\w+' already")


def _init(base: Path) -> Fixture:
    env = {"ZMR_CACHE": str(base / "cache"), "HOME": str(base / "home")}
    (base / "home").mkdir(parents=True)
    root = base / "repo"
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    return Fixture(base, root, ["init"], env)


def _publish(base: Path) -> Fixture:
    root, _, env = _project(base, with_checkout=False)
    remote = base / "remote.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote), cwd=root)
    assert run_here(["build", "toy"], root, env).returncode == 0
    return Fixture(base, root, ["publish", "toy"], env, remote=remote)


def _build(base: Path) -> Fixture:
    root, _, env = _project(base, with_checkout=False)
    return Fixture(base, root, ["build", "toy"], env)


def _checkout(base: Path) -> Fixture:
    root, _, env = _project(base, with_checkout=False)
    return Fixture(base, root, ["checkout", "toy"], env)


def _checkout_merge(base: Path) -> Fixture:
    """My checkout has a new commit; the repository's series gained a patch meanwhile (a colleague's, pulled)."""
    root, upstream, env = _project(base)
    work = root / "work/toy/rollout"
    _commit(work, "src/notes.md", "my notes\n", "Add my notes")
    scratch = base / "colleague"
    git("clone", "-q", str(root), str(scratch))
    assert run_here(["checkout", "toy"], scratch, env).returncode == 0
    _commit(scratch / "work/toy/rollout", "docs/theirs.md", "their doc\n", "Add their doc")
    assert run_here(["export", "toy"], scratch, env).returncode == 0
    git("add", "-A", "patches", cwd=scratch)
    git("commit", "-q", "-m", "colleague: their doc", cwd=scratch)
    git("pull", "-q", "--ff-only", str(scratch), "main", cwd=root)
    shutil.rmtree(scratch)
    return Fixture(base, root, ["checkout", "toy", "-c", "rollout", "--merge"], env)


SCENARIOS = [
    Scenario("export", _export),
    Scenario("rebase", _rebase),
    Scenario("rebase-continue", _rebase_continue),
    Scenario("rebase-skip", _rebase_skip),
    Scenario("rebase-abort", _rebase_abort),
    Scenario("rebase-abort-written", _rebase_abort_written),
    Scenario("update-apply", _update_apply),
    Scenario("update-apply-3way", _update_apply_3way),
    Scenario("import", _import),
    Scenario("new", _new),
    Scenario("init", _init),
    Scenario("publish", _publish),
    Scenario("build", _build),
    Scenario("checkout", _checkout),
    Scenario("checkout-merge", _checkout_merge),
]
