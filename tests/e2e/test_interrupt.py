"""Kill tests: SIGINT or SIGKILL at random moments of real runs, then check the invariants.

After every interruption: each release branch is absent or exactly the
expected commit (never half-moved), the repository passes `git fsck`, the
next run succeeds and verifies, and the cache holds no half-made mirror.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git, simple_model, state_dir, zmr

KILLS = int(os.environ.get("ZMR_KILL_ITERATIONS", "24"))


def _start(args, cwd, cache):
    return subprocess.Popen(
        [sys.executable, "-m", "zmr", *args], cwd=cwd, env={**os.environ, "ZMR_CACHE": str(cache)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )


def _interrupt(proc, delay: float, sig: int) -> int:
    time.sleep(delay)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)  # the whole group, as a terminal's Ctrl-C would
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    return proc.returncode


def test_build_and_fetch_survive_interruption_at_random_points(tmp_path, upstream):
    project_root = tmp_path / "project"
    from conftest import make_project

    project = make_project(project_root)
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    reference_cache = tmp_path / "reference-cache"
    started = time.perf_counter()
    assert zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(reference_cache)}).returncode == 0
    window = time.perf_counter() - started  # kills land within one cold run, however fast this machine is
    expected = {ref: oid for ref, oid in project.refs().items() if ref.startswith("refs/heads/rollout/")}
    assert len(expected) == 2
    rng = random.Random(20261129)
    outcomes = {"killed": 0, "finished": 0}
    for iteration in range(KILLS):
        for ref in expected:
            git("update-ref", "-d", ref, cwd=project.root)
        cache = tmp_path / f"cache-{iteration % 3}"  # some runs start cold, some warm
        command = ["build", "--all"] if iteration % 4 else ["fetch"]
        sig = signal.SIGKILL if iteration % 2 else signal.SIGINT
        code = _interrupt(_start(command, project.root, cache), rng.uniform(0.0, window), sig)
        outcomes["finished" if code == 0 else "killed"] += 1
        # Refs: absent or exactly right.
        for ref, oid in expected.items():
            assert project.ref(ref) in (None, oid), (iteration, ref)
        git("fsck", "--no-dangling", "--no-progress", cwd=project.root)
        # The next run recovers.
        result = zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)})
        assert result.returncode == 0, (iteration, result.stderr)
        assert {ref: project.ref(ref) for ref in expected} == expected
        assert not list((cache / "mirrors").glob(".tmp-*")), iteration
    # The random delays must really have hit runs in flight, not only finished ones.
    assert outcomes["killed"] >= KILLS // 3, outcomes


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_rebase_survives_interruption(tmp_path, upstream):
    """Kill `zmr rebase` (which also exports) mid-run: manifest and series are old or new, never half."""
    from conftest import make_project

    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    pin = simple_model(project, upstream)
    new_pin = upstream.commits[2]
    cache = tmp_path / "cache"
    env = {"ZMR_CACHE": str(cache)}
    manifest = project.root / "manifests/toy.yaml"
    series = project.root / "patches/toy/rollout"
    before = (manifest.read_bytes(), _tree_bytes(series))
    # The uninterrupted result, once, for comparison.
    started = time.perf_counter()
    assert zmr("rebase", "toy", "-c", "rollout", "--onto", new_pin, cwd=project.root, env=env).returncode == 0
    window = time.perf_counter() - started
    after = (manifest.read_bytes(), _tree_bytes(series))
    assert after != before
    rng = random.Random(7)
    state = state_dir(project.root) / "rebase" / "toy" / "rollout"
    stopped = 0
    for iteration in range(max(6, KILLS // 3)):
        # Back to the old pin and series, as committed.
        git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
        git("clean", "-qfd", "--", "patches", cwd=project.root)
        assert (manifest.read_bytes(), _tree_bytes(series)) == before
        proc = _start(["rebase", "toy", "-c", "rollout", "--onto", new_pin], project.root, cache)
        code = _interrupt(proc, rng.uniform(0.05, window), signal.SIGKILL if iteration % 2 else signal.SIGINT)
        stopped += code != 0
        now = (manifest.read_bytes(), _tree_bytes(series))
        if state.exists():
            # Interrupted in the middle: the saved state lets --abort restore every byte.
            result = zmr("rebase", "toy", "-c", "rollout", "--abort", cwd=project.root, env=env)
            assert result.returncode == 0, (iteration, result.stderr)
            assert (manifest.read_bytes(), _tree_bytes(series)) == before, iteration
        else:
            assert now in (before, after), iteration  # never a half-written manifest or series
            git("checkout", "-q", "--", "manifests", "patches", cwd=project.root)
            git("clean", "-qfd", "--", "patches", cwd=project.root)
        # From the old state, an uninterrupted rebase reaches the same result.
        result = zmr("rebase", "toy", "-c", "rollout", "--onto", new_pin, cwd=project.root, env=env)
        assert result.returncode == 0, (iteration, result.stderr)
        assert (manifest.read_bytes(), _tree_bytes(series)) == after, iteration
    assert stopped >= 2, stopped
    assert pin != new_pin


def test_publish_is_all_or_nothing_when_killed(tmp_path, upstream):
    from conftest import make_project

    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote), cwd=project.root)
    cache = tmp_path / "cache"
    assert zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)}).returncode == 0
    expected = {ref: oid for ref, oid in project.refs().items() if ref.startswith("refs/heads/rollout/")}
    rng = random.Random(11)
    for iteration in range(max(6, KILLS // 3)):
        for ref in expected:
            git("update-ref", "-d", ref, cwd=remote)
            git("update-ref", "-d", ref.replace("refs/heads/", "refs/remotes/origin/"), cwd=project.root, check=False)
        code = _interrupt(_start(["publish"], project.root, cache), rng.uniform(0.0, 1.0), signal.SIGKILL if iteration % 2 else signal.SIGINT)
        remote_refs = {ref: git("rev-parse", "--verify", "--quiet", ref, cwd=remote, check=False) or None for ref in expected}
        # One atomic push: every branch moved, or none did.
        assert set(remote_refs.values()) in ({None}, set(expected.values())), (iteration, code, remote_refs)
        result = zmr("publish", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)})
        assert result.returncode == 0, (iteration, result.stderr)
        assert {ref: git("rev-parse", ref, cwd=remote) for ref in expected} == expected


def test_export_survives_interruption(tmp_path, upstream):
    """Kill `zmr export` mid-run: every series file is the old or the new one, never a part."""
    from conftest import make_project

    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    cache = tmp_path / "cache"
    env = {"ZMR_CACHE": str(cache)}
    assert zmr("checkout", "toy", cwd=project.root, env=env).returncode == 0
    _record_before(project)
    work = project.root / "work/toy/rollout"
    git("commit", "-q", "--amend", "-m", "Make matmul output contiguous (reworded)\n\nWhy: stable strides for the kernels.", cwd=work)
    (work / "src/notes.md").write_text("notes\n")
    git("add", "src/notes.md", cwd=work)
    git("commit", "-q", "-m", "Add notes", cwd=work)
    series = project.root / "patches/toy/rollout"
    before = _tree_bytes(series)
    started = time.perf_counter()
    assert zmr("export", "toy", cwd=project.root, env=env).returncode == 0
    window = time.perf_counter() - started
    after = _tree_bytes(series)
    assert after != before and len(after) == len(before) + 1
    rng = random.Random(3)
    stopped = 0
    for iteration in range(max(6, KILLS // 3)):
        _reset_series(project)
        assert _tree_bytes(series) == before
        code = _interrupt(_start(["export", "toy"], project.root, cache), rng.uniform(0.05, window), signal.SIGKILL if iteration % 2 else signal.SIGINT)
        stopped += code != 0
        now = _tree_bytes(series)
        for name, data in now.items():
            assert data in (before.get(name), after.get(name)), (iteration, code, name)  # no partial file
        result = zmr("export", "toy", cwd=project.root, env=env)
        assert result.returncode == 0, (iteration, result.stderr)
        assert _tree_bytes(series) == after, iteration
    assert stopped >= 2, stopped


def _export_fixture(tmp_path, upstream, added: int):
    """A checkout with the first patch reworded and *added* new commits: an export that writes many files."""
    from conftest import make_project

    project = make_project(tmp_path / "project")
    project.write(".gitignore", "/work/\n/.zmr/\n")
    simple_model(project, upstream)
    project.commit_all("ignore work")
    env = {"ZMR_CACHE": str(tmp_path / "cache")}
    assert zmr("checkout", "toy", cwd=project.root, env=env).returncode == 0
    _record_before(project)
    work = project.root / "work/toy/rollout"
    git("commit", "-q", "--amend", "-m", "Make matmul output contiguous (reworded)", cwd=work)
    for n in range(added):
        (work / f"src/extra_{n}.py").write_text("".join(f"value_{n}_{i} = {i}\n" for i in range(200)))
        git("add", f"src/extra_{n}.py", cwd=work)
        git("commit", "-q", "-m", f"Add extra module {n}", cwd=work)
    return project, env


def _record_before(project) -> None:
    """Keep the checkout's record of the series it was made from (config ``zmr.series``), for ``_reset_series``."""
    (project.root.parent / "series-record").write_text(git("config", "zmr.series", cwd=project.root / "work/toy/rollout"))


def _reset_series(project) -> None:
    """The series as it was before the export, and the checkout's record of it (else export's three sides see a repository that moved)."""
    git("checkout", "-q", "--", "patches", cwd=project.root)
    git("clean", "-qfd", "--", "patches", cwd=project.root)
    git("config", "zmr.series", (project.root.parent / "series-record").read_text(), cwd=project.root / "work/toy/rollout")


def _points(project, env, args, log) -> list[str]:
    """The fault points (zmr.infra.faults) an uninterrupted run of *args* passes, in order."""
    log.unlink(missing_ok=True)
    result = zmr(*args, cwd=project.root, env={**env, "ZMR_TEST_KILL_LOG": str(log)})
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines()


@pytest.mark.parametrize("which", ["journal", "stage-write:last", "commit-point", "txn-rename:15"])
def test_export_killed_in_its_write_phase_converges(tmp_path, upstream, which):
    """SIGKILL at a chosen step of export's transaction: the series old or new, never half; the next command says which and the rerun converges."""
    project, env = _export_fixture(tmp_path, upstream, added=30)
    series = project.root / "patches/toy/rollout"
    journal = state_dir(project.root) / "transactions/export/toy/rollout.json"
    before = _tree_bytes(series)
    points = _points(project, env, ["export", "toy"], tmp_path / "points")
    after = _tree_bytes(series)
    assert len(after) == len(before) + 30 and "0002-contiguous.patch" not in after  # 30 added, one renamed
    _reset_series(project)
    assert _tree_bytes(series) == before and not journal.exists()
    name, _, nth = which.partition(":")
    at = [n for n, point in enumerate(points, start=1) if point == name]
    assert len(at) >= (15 if nth == "15" else 1), points
    kill_at = at[-1] if nth == "last" else at[int(nth or 1) - 1]
    killed = subprocess.run(
        [sys.executable, "-m", "zmr", "export", "toy"], cwd=project.root, env={**os.environ, **env, "ZMR_TEST_KILL": str(kill_at)},
        capture_output=True, text=True, timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    now = _tree_bytes(series)
    assert not [n for n in now if n.endswith(".zmr-stage")] or journal.exists()  # a staged copy only with its journal
    committed = name in ("commit-point", "txn-rename")
    assert journal.exists()
    shown = {n: d for n, d in now.items() if not n.endswith(".zmr-stage")}
    if not committed:
        assert shown == before  # before the commit point: not one file changed
    result = zmr("list", cwd=project.root, env=env)  # any command finishes (or undoes) it first, and says which
    assert result.returncode == 0, result.stderr
    assert f"(export/toy/rollout): {'finished' if committed else 'undone'} now" in result.stderr, result.stderr
    assert _tree_bytes(series) == (after if committed else before) and not journal.exists()
    rerun = zmr("export", "toy", cwd=project.root, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert _tree_bytes(series) == after  # the same names and bytes: no "-2.patch", no orphan, no staged copy


def test_export_stopped_by_a_full_disk_converges(tmp_path, upstream):
    """A write that fails (EFBIG from RLIMIT_FSIZE, what a full disk does to a write): exit 2 naming the file, the old series intact; the rerun exports."""
    import resource

    project, env = _export_fixture(tmp_path, upstream, added=3)
    work = project.root / "work/toy/rollout"
    (work / "src/big.py").write_text("".join(f"big_{i} = {i}\n" for i in range(20000)))  # a patch of ~300 KB
    git("add", "src/big.py", cwd=work)
    git("commit", "-q", "-m", "Add a big module", cwd=work)
    series = project.root / "patches/toy/rollout"
    before = _tree_bytes(series)
    assert zmr("export", "toy", cwd=project.root, env=env).returncode == 0
    after = _tree_bytes(series)
    _reset_series(project)

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write instead of a signal, inherited by exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    argv = [sys.executable, "-m", "zmr", "export", "toy"]
    proc = subprocess.run(argv, check=False, cwd=project.root, env={**os.environ, **env}, capture_output=True, text=True, preexec_fn=limited, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "patches/toy/rollout/0006-add-a-big-module.patch: File too large" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _tree_bytes(series) == before  # the previous series intact: no file of the export was renamed in
    assert not list((state_dir(project.root) / "transactions").rglob("*.json"))
    result = zmr("export", "toy", cwd=project.root, env=env)
    assert result.returncode == 0, result.stderr
    assert _tree_bytes(series) == after
