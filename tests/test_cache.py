"""The cache: pins only, reuse, shallow mirrors, damage detection, locking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, simple_model, zmr

from zmr.infra.cache import Cache, resolve_upstream


def _mirror(upstream) -> Path:
    return Cache().mirror_for(resolve_upstream(str(upstream.path), Path("/"))).path


def _packs(mirror: Path) -> list[str]:
    return sorted(p.name for p in (mirror / "objects/pack").glob("*.pack"))


def test_fetch_takes_only_the_pin_and_reuses_the_mirror(project, upstream):
    pin = simple_model(project, upstream)
    result = zmr("fetch", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert f"fetched toy/rollout {pin[:12]}" in result.stdout
    mirror = _mirror(upstream)
    # Depth 1: the pin is there, its parent is not.
    assert git("cat-file", "-t", pin, cwd=mirror) == "commit"
    assert subprocess.run(["git", "cat-file", "-e", upstream.commits[0]], check=False, cwd=mirror).returncode != 0
    packs = _packs(mirror)
    assert zmr("fetch", cwd=project.root).returncode == 0
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert _packs(mirror) == packs  # nothing fetched again


def test_making_the_history_repository_leaves_a_mirror_being_made_under_the_same_name_alone(upstream, tmp_path):
    """A mirror and its history repository have one name and a lock each: the one made second does not take the
    other's unfinished folder for a leftover of its own (two zmr processes at once; zmr diff, which fetches a pin's
    history while the mirror is made)."""
    cache = Cache(tmp_path / "cache")
    url = resolve_upstream(str(upstream.path), Path("/"))
    mirror = cache.mirror_for(url).path
    being_made = mirror.parent / f".tmp-{mirror.name}-live"
    being_made.mkdir(parents=True)
    history = cache.commit_history(url, [upstream.commits[-1]])
    assert being_made.is_dir()
    assert history.has_object(upstream.commits[0], "commit") and not mirror.exists()


def test_pin_older_than_the_shallow_mirror_is_fetched(project, upstream):
    simple_model(project, upstream, pin_index=2)
    assert zmr("fetch", cwd=project.root).returncode == 0
    # Move the pin back to the first commit: the shallow mirror does not have it.
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(upstream.commits[2], upstream.commits[0]))
    (project.root / "patches/toy/rollout/series").write_text("")
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    tree = git("rev-parse", "rollout/toy^{tree}", cwd=project.root)
    assert tree == git("rev-parse", f"{upstream.commits[0]}^{{tree}}", cwd=upstream.path)


def test_unknown_pin_is_reported_with_the_fix(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    bogus = "0123456789abcdef0123456789abcdef01234567"
    manifest.write_text(manifest.read_text().replace(upstream.commits[1], bogus))
    result = zmr("fetch", cwd=project.root)
    assert result.returncode == 2
    assert f"upstream has no commit {bogus}" in result.stderr
    assert "pin a commit that exists" in result.stderr


def test_missing_pack_is_detected_quarantined_and_refetched(project, upstream):
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("refs/heads/rollout/toy")
    mirror = _mirror(upstream)
    for pack in (mirror / "objects/pack").glob("pack-*"):
        pack.unlink()
    git("update-ref", "-d", "refs/heads/rollout/toy", cwd=project.root)
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert project.ref("refs/heads/rollout/toy") == tip
    git("fsck", "--no-dangling", cwd=mirror)


def test_truncated_pack_is_never_used(project, upstream):
    simple_model(project, upstream)
    assert zmr("fetch", cwd=project.root).returncode == 0
    mirror = _mirror(upstream)
    pack = next((mirror / "objects/pack").glob("*.pack"))
    data = pack.read_bytes()
    os.chmod(pack, 0o644)
    pack.write_bytes(data[: len(data) // 2])
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    quarantined = list((Path(os.environ["ZMR_CACHE"]) / "quarantine").iterdir())
    assert len(quarantined) == 1
    assert zmr("verify", "toy", cwd=project.root).returncode == 0
    git("fsck", "--no-dangling", cwd=project.root)


def test_parallel_builds_on_one_cache_and_repository(project, upstream, tmp_path):
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    for round_ in range(2):
        cache = tmp_path / f"cache-{round_}"
        procs = [
            subprocess.Popen([sys.executable, "-m", "zmr", "build" if i % 2 == 0 else "fetch", "--all"], cwd=project.root, env={**os.environ, "ZMR_CACHE": str(cache)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(4)
        ]
        outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        for code, err in outcomes:
            # A concurrent build may lose the ref race; it says so and changes nothing.
            assert code == 0 or "cannot lock ref" in err or "is at" in err, err
        assert zmr("build", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)}).returncode == 0
        verify = zmr("verify", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)})
        assert verify.returncode == 0, verify.stdout
        git("fsck", "--no-dangling", cwd=project.root)


def test_a_lock_held_by_a_killed_process_never_blocks(project, upstream):
    """Mirror locks are flock(2) locks: held while the holder lives, gone the moment it dies."""
    simple_model(project, upstream)
    mirror = _mirror(upstream)
    lock = mirror.with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl,time; f=open({str(lock)!r},'a+b'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    waiting = subprocess.Popen([sys.executable, "-m", "zmr", "fetch"], cwd=project.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waiting.wait(timeout=2)
        raise AssertionError("fetch did not wait for the lock held by a live process")
    except subprocess.TimeoutExpired:
        pass
    holder.kill()  # SIGKILL: no chance to clean up; the lock file stays behind
    holder.wait()
    assert lock.exists()
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "fetched toy/rollout" in out


def test_four_concurrent_builds_on_one_project_and_cache_all_succeed(project, upstream, tmp_path):
    """Concurrent builds compute the same branches: a ref another build already moved to exactly our result is success."""
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    cache = tmp_path / "shared-cache"
    env = {**os.environ, "ZMR_CACHE": str(cache)}
    expected: dict[str, str] | None = None
    for round_ in range(3):  # a cold cache, then warm ones with the branches deleted or already there
        if round_ == 1:
            for ref in expected or {}:
                git("update-ref", "-d", ref, cwd=project.root)
        argv = [sys.executable, "-m", "zmr", "build", "--all"]
        procs = [subprocess.Popen(argv, cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        assert [code for code, _ in outcomes] == [0, 0, 0, 0], [err for _, err in outcomes]
        branches = {ref: oid for ref, oid in project.refs().items() if ref.startswith("refs/heads/rollout/")}
        assert len(branches) == 2
        assert expected in (None, branches)
        expected = branches
    assert zmr("verify", "--all", cwd=project.root, env={"ZMR_CACHE": str(cache)}).returncode == 0
    git("fsck", "--no-dangling", cwd=project.root)


def _flip_a_byte_inside(mirror: Path, oid: str) -> None:
    """Damage the packed data of object *oid* in place (the pack still exists and lists it)."""
    idx = next((mirror / "objects/pack").glob("*.idx"))
    listing = git("verify-pack", "-v", str(idx), cwd=mirror)
    entry = next(line.split() for line in listing.splitlines() if line.startswith(oid))
    size_in_pack, offset = int(entry[3]), int(entry[4])
    pack = idx.with_suffix(".pack")
    data = bytearray(pack.read_bytes())
    data[offset + size_in_pack // 2] ^= 0xFF
    os.chmod(pack, 0o644)
    pack.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_pack_is_found_by_the_first_git_failure_and_refetched_once(project, upstream):
    """The presence check cannot see a flipped byte; the first git command that reads the object says "corrupt": quarantine, fetch again, build."""
    pin = simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("refs/heads/rollout/toy")
    mirror = _mirror(upstream)
    _flip_a_byte_inside(mirror, git("rev-parse", f"{pin}:src/model.py", cwd=upstream.path))
    assert subprocess.run(["git", "cat-file", "-p", f"{pin}:src/model.py"], cwd=mirror, capture_output=True, check=False).returncode != 0
    git("update-ref", "-d", "refs/heads/rollout/toy", cwd=project.root)
    result = zmr("build", "toy", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert project.ref("refs/heads/rollout/toy") == tip
    assert "the cache mirror was damaged" in result.stderr and "is corrupt" in result.stderr
    assert len(list((Path(os.environ["ZMR_CACHE"]) / "quarantine").iterdir())) == 1
    git("fsck", "--no-dangling", cwd=mirror)
    assert "Traceback" not in result.stderr
    again = zmr("build", "toy", cwd=project.root)
    assert again.returncode == 0 and "damaged" not in again.stderr  # a healthy mirror is left alone
    assert zmr("verify", "toy", cwd=project.root).returncode == 0


def test_a_garbage_loose_object_in_the_mirror_is_found_and_refetched(project, upstream, tmp_path):
    """The release commits are loose objects in the mirror: garbage in one is damage that the next build of another repository trips over."""
    import shutil

    simple_model(project, upstream)
    other = tmp_path / "other"
    shutil.copytree(project.root, other)  # the same project, without the branch's objects
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tip = project.ref("refs/heads/rollout/toy")
    mirror = _mirror(upstream)
    loose = mirror / "objects" / tip[:2] / tip[2:]
    assert loose.is_file()
    os.chmod(loose, 0o644)
    loose.write_bytes(os.urandom(64))
    result = zmr("build", "toy", cwd=other)
    assert result.returncode == 0, result.stderr
    assert "the cache mirror was damaged" in result.stderr
    assert git("rev-parse", "refs/heads/rollout/toy", cwd=other) == tip
    git("fsck", "--no-dangling", cwd=other)
    assert len(list((Path(os.environ["ZMR_CACHE"]) / "quarantine").iterdir())) == 1


def test_damage_recovery_happens_once_per_mirror(project, upstream):
    """Cache.recover quarantines a damaged mirror once; asked again in the same run it refuses, so nothing loops."""
    from zmr.infra import git as zgit
    from zmr.infra.cache import Cache

    pin = simple_model(project, upstream)
    cache = Cache()
    url = resolve_upstream(str(upstream.path), Path("/"))
    mirror = cache.ensure(url, [pin])
    _flip_a_byte_inside(mirror.path, git("rev-parse", f"{pin}:src/model.py", cwd=upstream.path))
    try:
        mirror.repo.cat_file("blob", f"{pin}:src/model.py")
        raise AssertionError("damage not reported")
    except zgit.DamagedRepoError as err:
        damage = err
    assert damage.concerns(mirror.path) and "is corrupt" in damage.evidence
    assert cache.recover(mirror, damage) is True
    assert not mirror.path.exists()
    assert cache.ensure(url, [pin]).path == mirror.path
    assert cache.recover(mirror, damage) is False  # a second time: the caller reports the error
    assert mirror.path.exists()


def test_leftovers_of_a_killed_fetch_are_removed_and_the_next_fetch_stays_shallow(project, upstream):
    """shallow.lock made every later depth-1 fetch fail and fall back, silently, to full history; temp packs piled up."""
    simple_model(project, upstream, pin_index=1)
    assert zmr("fetch", cwd=project.root).returncode == 0
    mirror = _mirror(upstream)
    long_ago = 1_600_000_000
    pin_lock = mirror / "refs/zmr/pins" / f"{upstream.commits[2]}.lock"
    leftovers = [mirror / "shallow.lock", pin_lock, mirror / "packed-refs.lock", mirror / "objects/pack/tmp_pack_Ab12Cd"]
    for path in leftovers:
        path.write_bytes(b"left by a killed git\n")
        os.utime(path, (long_ago, long_ago))
    (mirror / "objects/incoming-Xy12Zz").mkdir()
    young = mirror / "objects/pack/tmp_pack_young1"  # no fast-import holds the writers lock: a leftover too, however young
    young.write_bytes(b"")
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(upstream.commits[1], upstream.commits[2]))
    project.commit_all("new pin")
    result = zmr("fetch", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert "full history" not in result.stderr and "warning" not in result.stderr
    assert not [p for p in leftovers if p.exists()] and not (mirror / "objects/incoming-Xy12Zz").exists()
    assert not young.exists()
    # Still depth 1: the new pin's parent was never fetched.
    assert git("cat-file", "-t", upstream.commits[2], cwd=mirror) == "commit"
    assert subprocess.run(["git", "cat-file", "-e", upstream.commits[0]], cwd=mirror, check=False).returncode != 0


def test_a_fetch_that_fills_the_disk_leaves_no_temp_pack(project, upstream, tmp_path):
    """A real ENOSPC: the cache on a 512 KiB tmpfs, an upstream with 2 MB of incompressible data (needs root to mount; skipped otherwise)."""
    import pytest

    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], capture_output=True, check=False).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        upstream.commit({"weights.bin": os.urandom(2_000_000).hex()[:2_000_000]}, "add weights")
        simple_model(project, upstream, pin_index=3)
        result = zmr("fetch", cwd=project.root, env={"ZMR_CACHE": str(small / "cache")})
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and "cache/mirrors/upstream-" in result.stderr.splitlines()[0], result.stderr
        assert "git cannot write there (the disk is full)" in result.stderr and "full history" not in result.stderr, result.stderr
        mirrors = list((small / "cache/mirrors").glob("*.git"))
        assert mirrors and not list(mirrors[0].glob("objects/pack/tmp_*")), [p.name for p in mirrors[0].glob("objects/pack/*")]
        assert not list((small / "cache/mirrors").glob(".tmp-*"))
    finally:
        subprocess.run(["umount", str(small)], check=False)


def _sha256_upstream(path: Path) -> str:
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", "--object-format=sha256", cwd=path)
    (path / "README.md").write_text("a SHA-256 upstream\n")
    git("add", "README.md", cwd=path)
    git("commit", "-q", "-m", "first", cwd=path, env={"GIT_AUTHOR_DATE": "@1700000000 +0000", "GIT_COMMITTER_DATE": "@1700000000 +0000"})
    return git("rev-parse", "HEAD", cwd=path)


def test_a_pin_of_the_other_hash_function_is_named_so(project, upstream, tmp_path):
    """A 64-hex pin on a SHA-1 upstream was "force-pushed away" (after fetching all history); a 40-hex pin on a SHA-256 one, "cannot fetch"."""
    sha256_path = tmp_path / "sha256-upstream"
    sha256_pin = _sha256_upstream(sha256_path)
    sha1_commit = upstream.commits[1]
    wrong_pins = {"one": (upstream.path, "ab" * 32), "two": (sha256_path, sha1_commit)}
    for model, (path, pin) in wrong_pins.items():
        project.write(f"patches/{model}/c/series", "")
        project.manifest(model, f"model: {model}\ncomponents:\n  c:\n    upstream: {path}\n    commit: {pin}\n")
    project.commit_all("pins of the wrong kind")
    result = zmr("build", "one", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert f"one/c ({upstream.path}): commit {'ab' * 32} is a SHA-256 id on a SHA-1 repository" in result.stderr
    assert f"pin the id `git ls-remote {upstream.path}` prints" in result.stderr and "force-pushed" not in result.stderr
    assert not git("for-each-ref", "refs/zmr/heads/", cwd=_mirror(upstream)), "no history fetched to look for it"
    result = zmr("build", "two", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert f"two/c ({sha256_path}): commit {sha1_commit} is a SHA-1 id on a SHA-256 repository" in result.stderr
    assert "SHA-256 upstreams are not supported" in result.stderr
    assert len(sha256_pin) == 64


# -- a fetch killed mid-transfer, from a slow server ---------------------------------------------

_SLOW_SERVER = """#!/bin/sh
# GIT_SSH_COMMAND: runs upload-pack here, its output slowed to 4 KiB per 50 ms while ZMR_TEST_SLOW is set
shift
if [ -n "$ZMR_TEST_SLOW" ]; then exec sh -c "$* | {python} {slow}"; fi
exec sh -c "$*"
"""
_SLOW_PIPE = """import os, time
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    try:
        os.write(1, chunk)
    except BrokenPipeError:  # the client went away: as a server does, end quietly
        break
    time.sleep(0.05)
"""


def _slow_upstream(tmp_path, project, upstream) -> tuple[dict[str, str], str]:
    """The upstream over ssh:// through a local wrapper (a real upload-pack, a real pack stream), with 1.5 MB of incompressible data at the pin."""
    upstream.commit({"weights.hex": os.urandom(750_000).hex()}, "add weights")
    (tmp_path / "slow.py").write_text(_SLOW_PIPE)
    wrapper = tmp_path / "slow-ssh"
    wrapper.write_text(_SLOW_SERVER.format(python=sys.executable, slow=tmp_path / "slow.py"))
    wrapper.chmod(0o755)
    url = f"ssh://zmr-test-host{upstream.path}"
    simple_model(project, upstream, pin_index=3, upstream_spec=url)
    return {"GIT_SSH_COMMAND": str(wrapper), "GIT_SSH_VARIANT": "simple"}, url


def _url_mirror(url: str) -> Path:
    return Cache().mirror_for(url).path


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below *pid*, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                table[int(entry.name)] = (parent, (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
    found, frontier = [], {pid}
    while frontier:
        below = [(p, cmd) for p, (parent, cmd) in table.items() if parent in frontier]
        found += below
        frontier = {p for p, _ in below}
    return found


def _wait_for_temp_pack(mirror: Path, proc: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 60
    while not list(mirror.glob("objects/pack/tmp_pack_*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the fetch ended before its transfer was seen"
        time.sleep(0.05)


def _start_fetch(project, env: dict[str, str], **kwargs) -> subprocess.Popen:
    full = {**os.environ, **env, "ZMR_TEST_SLOW": "1"}
    return subprocess.Popen([sys.executable, "-m", "zmr", "fetch"], cwd=project.root, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _depth_one_and_clean(mirror: Path, upstream) -> None:
    assert not list(mirror.glob("objects/pack/tmp_*")), "a temporary pack was left"
    assert git("cat-file", "-t", upstream.commits[3], cwd=mirror) == "commit"
    assert subprocess.run(["git", "cat-file", "-e", upstream.commits[2]], cwd=mirror, check=False).returncode != 0, "full history was fetched"
    assert not git("for-each-ref", "refs/zmr/heads/", cwd=mirror)


@pytest.mark.parametrize(
    ("victim", "why"),
    [(" fetch ", "git was killed by signal 9"), ("slow.py", "the transfer was cut off")],
    ids=["git-fetch-killed", "server-killed"],
)
def test_a_fetch_killed_mid_transfer_is_an_error_not_a_full_history_fetch(tmp_path, project, upstream, victim, why):
    """The depth-1 fetch's death was taken for "the server cannot do depth 1": zmr fetched full history instead."""
    env, url = _slow_upstream(tmp_path, project, upstream)
    mirror = _url_mirror(url)
    proc = _start_fetch(project, env)
    _wait_for_temp_pack(mirror, proc)
    targets = [pid for pid, cmdline in _descendants(proc.pid) if victim in cmdline and not cmdline.startswith(("sh ", "/bin/sh "))]
    assert len(targets) == 1, _descendants(proc.pid)
    os.kill(targets[0], 9)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert f"{url}: the fetch was cut short: {why}" in err and "run the command again" in err
    assert "with full history" not in err and "Traceback" not in err
    assert not list(mirror.glob("objects/pack/tmp_*")) and not git("for-each-ref", "refs/zmr/", cwd=mirror)
    again = zmr("fetch", cwd=project.root, env=env)
    assert again.returncode == 0, again.stderr
    assert "warning" not in again.stderr
    _depth_one_and_clean(mirror, upstream)


def test_temp_packs_of_a_killed_zmr_are_removed_by_the_next_run(tmp_path, project, upstream):
    """zmr and its git killed together (a CI timeout): the temp pack is seconds old, and was kept for 10 minutes as maybe live."""
    env, url = _slow_upstream(tmp_path, project, upstream)
    mirror = _url_mirror(url)
    proc = _start_fetch(project, env, start_new_session=True)
    _wait_for_temp_pack(mirror, proc)
    os.killpg(proc.pid, 9)
    proc.communicate(timeout=60)
    assert list(mirror.glob("objects/pack/tmp_pack_*")), "the kill left a temporary pack (what this test is about)"
    again = zmr("fetch", cwd=project.root, env=env)
    assert again.returncode == 0, again.stderr
    assert "warning" not in again.stderr
    _depth_one_and_clean(mirror, upstream)


def test_a_temp_pack_of_a_live_fast_import_is_kept(tmp_path, project, upstream):
    """While a replay's fast-import holds the mirror's writers lock, a young temp pack may be its live work: the cleanup leaves it."""
    import fcntl

    simple_model(project, upstream, pin_index=1)
    assert zmr("fetch", cwd=project.root).returncode == 0
    mirror = _mirror(upstream)
    live = mirror / "objects/pack/tmp_pack_live01"
    live.write_bytes(b"PACK")
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(upstream.commits[1], upstream.commits[2]))
    project.commit_all("new pin")
    with open(mirror.with_suffix(".writers"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)  # as Repo.fast_import holds it
        assert zmr("fetch", cwd=project.root).returncode == 0
    assert live.exists()


def test_checkout_and_export_look_for_upstream_commits_in_the_cache_they_are_given(project, upstream, tmp_path):
    """The checkout's upstream commits are found in the caller's cache, not in a second default one made on the way."""
    from zmr.ops import checkout as checkouts
    from zmr.ops import export as exports
    from zmr.model.project import Project

    simple_model(project, upstream)
    zmr_project = Project.find(project.root)
    component = zmr_project.manifests(["toy"])[0].components["rollout"]
    cache = Cache(tmp_path / "own-cache")
    made = checkouts.checkout(zmr_project, component, cache=cache, history=True)
    assert made.history and cache.for_component(component, zmr_project.root).mirror.path.is_dir()
    assert not (Path(os.environ["ZMR_CACHE"]) / "mirrors").exists()  # one cache: the history went where the pin did
    # The branch moved onto upstream's tip with git; only the mirror (refs/zmr/heads/) still says those commits are upstream's.
    co = made.path
    git("reset", "-q", "--hard", "refs/remotes/upstream/main", cwd=co)
    for ref in git("for-each-ref", "--format=%(refname)", "refs/remotes/", cwd=co).split():
        git("update-ref", "-d", ref, cwd=co)
    (co / ".git/FETCH_HEAD").unlink(missing_ok=True)
    with pytest.raises(checkouts.CheckoutError) as refresh:
        checkouts.checkout(zmr_project, component, cache=cache)
    assert any("1 commit between zmr/base and HEAD is upstream's" in line for line in refresh.value.details), refresh.value.details
    with pytest.raises(checkouts.CheckoutError) as export:
        exports.export(zmr_project, component, cache=cache)
    assert "1 commit between zmr/base and HEAD is upstream's" in export.value.message
