"""A full disk (ENOSPC) or a used-up quota (EDQUOT) while zmr writes refs or the cache (#36).

Exit 2 naming the path, the previous content intact (the old ref value, a
cache the next command uses), and the next command works once there is
space again. The faults are injected (``ZMR_TEST_FAULT``, zmr/infra/faults.py: at
a git command, git fails as it does on a full disk); one test fills a real
small tmpfs, where the system lets it mount one.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import git, make_project, simple_model, zmr

CODES = [("ENOSPC", "the disk is full", "No space left on device"), ("EDQUOT", "the disk quota is used up", "Disk quota exceeded")]


def _built_and_behind(project, upstream) -> tuple[str, str]:
    """The simple model built, then its branch put one commit back: (the branch now, the tip `zmr build` writes)."""
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("rollout/toy")
    git("update-ref", "refs/heads/rollout/toy", "rollout/toy~1", cwd=project.root)
    return project.ref("rollout/toy"), tip


@pytest.mark.parametrize(("code", "reason", "words"), CODES, ids=[c[0] for c in CODES])
def test_a_full_disk_while_build_moves_a_branch_keeps_the_old_value(project, upstream, code, reason, words):
    old, tip = _built_and_behind(project, upstream)
    result = zmr("build", "toy", cwd=project.root, env={"ZMR_TEST_FAULT": f"git update-ref={code}"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"zmr: error: {project.root}: git cannot write there ({reason})" in result.stderr, result.stderr
    assert words in result.stderr and "free space there" in result.stderr and "Traceback" not in result.stderr
    assert project.ref("rollout/toy") == old
    again = zmr("build", "toy", cwd=project.root)
    assert again.returncode == 0, again.stderr
    assert project.ref("rollout/toy") == tip


@pytest.mark.parametrize(("code", "reason", "words"), CODES, ids=[c[0] for c in CODES])
def test_a_full_disk_while_fetching_into_the_cache_leaves_it_usable(project, upstream, code, reason, words):
    """No fallback to a bigger fetch, no quarantine of the mirror: the next command fetches into the same mirror."""
    simple_model(project, upstream)
    cache = os.environ["ZMR_CACHE"]
    result = zmr("fetch", cwd=project.root, env={"ZMR_TEST_FAULT": f"git fetch={code}"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(rf"zmr: error: {re.escape(cache)}/mirrors/upstream-\w+\.git: git cannot write there \({reason}\)", result.stderr), result.stderr
    assert "ZMR_CACHE" in result.stderr and "full history" not in result.stderr and "Traceback" not in result.stderr
    mirrors = list((project.root.parent / cache / "mirrors").glob("*.git"))
    assert len(mirrors) == 1 and not list(mirrors[0].glob("objects/pack/tmp_*"))
    assert not os.path.exists(os.path.join(cache, "quarantine"))
    again = zmr("fetch", cwd=project.root)
    assert again.returncode == 0, again.stderr
    assert list((project.root.parent / cache / "mirrors").glob("*.git")) == mirrors
    verify = zmr("build", "toy", cwd=project.root)
    assert verify.returncode == 0, verify.stderr


def test_a_full_disk_while_the_cache_makes_a_mirror_leaves_no_half_mirror(project, upstream):
    """A mirror is made in a temporary folder and renamed into place: a failure leaves neither, and the next command makes it."""
    simple_model(project, upstream)
    cache = project.root.parent / os.environ["ZMR_CACHE"]
    result = zmr("fetch", cwd=project.root, env={"ZMR_TEST_FAULT": "git init=ENOSPC"})
    assert result.returncode == 2, result.stdout + result.stderr
    made = rf"zmr: error: {re.escape(str(cache))}/mirrors/\.tmp-upstream-\w+\.git-\w+: git cannot write there \(the disk is full\)"
    assert re.search(made, result.stderr), result.stderr
    assert not list((cache / "mirrors").glob("*.git")) and not list((cache / "mirrors").glob(".tmp-*"))
    assert zmr("fetch", cwd=project.root).returncode == 0
    assert len(list((cache / "mirrors").glob("*.git"))) == 1
    assert zmr("build", "toy", cwd=project.root).returncode == 0


@pytest.mark.parametrize(("code", "reason", "words"), CODES, ids=[c[0] for c in CODES])
def test_a_full_disk_while_the_cache_keeps_a_revision_for_diff_leaves_nothing_half_made(project, upstream, code, reason, words):
    simple_model(project, upstream)
    cache = os.environ["ZMR_CACHE"]
    result = zmr("diff", "toy", cwd=project.root, env={"ZMR_TEST_FAULT": f"cache-write={code}"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(rf"zmr: error: {re.escape(cache)}/revisions/v1-[0-9a-f]{{40}}: {words}", result.stderr), result.stderr
    assert "free space there" in result.stderr or "quota" in result.stderr
    assert not os.path.exists(os.path.join(cache, "revisions")) or not os.listdir(os.path.join(cache, "revisions"))
    again = zmr("diff", "toy", cwd=project.root)
    assert again.returncode == 0, again.stderr


def test_a_real_full_disk_under_the_repository_keeps_the_branch_and_the_next_build_works(tmp_path, upstream):
    """The project on a 2 MiB tmpfs, filled up: build fails naming the repository, the branch keeps its value; with space back, build works."""
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (this run is not root); the injected faults above cover the same code")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here ({mounted.stderr.strip()}); the injected faults above cover the same code")
    try:
        project = make_project(small / "project")
        old, tip = _built_and_behind(project, upstream)
        # A patch more, so that build has new objects to write: the disk is full before any ref can move.
        project.write("patches/toy/rollout/series", (project.root / "patches/toy/rollout/series").read_text() + "0003-more.patch\n")
        base = upstream.commits[1]
        from conftest import make_patch

        project.write("patches/toy/rollout/0003-more.patch", make_patch(upstream, base, {"docs/guide.md": "a longer guide\n"}, "Extend the guide"))
        project.commit_all("a third patch")
        filler = small / "filler"
        with open(filler, "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass
        result = zmr("build", "toy", cwd=project.root)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stderr.splitlines()[0] == f"zmr: error: {project.root}: git cannot write there (the disk is full)", result.stderr
        assert project.ref("rollout/toy") == old
        filler.unlink()
        again = zmr("build", "toy", cwd=project.root)
        assert again.returncode == 0, again.stderr
        assert project.ref("rollout/toy") not in (old, tip)  # the new series' tip
        assert zmr("verify", cwd=project.root).returncode == 0
    finally:
        subprocess.run(["umount", str(small)], check=False)
