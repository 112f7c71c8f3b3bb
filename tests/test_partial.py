"""Partial mirrors: verify fetches trees and the blobs its series touches, nothing more.

Fixture upstreams are served through git's real upload-pack (a local path
runs it, as file:// does), with ``uploadpack.allowFilter`` on or off.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Upstream, default_history, git, make_patch, make_upstream, simple_model, zmr
from zmr.infra.cache import Cache, resolve_upstream

BIG_FILES = 8
BIG_BYTES = 200_000


def _big_history() -> list[dict[str, str | None]]:
    """The default history plus files no series touches, large and incompressible."""
    rng = random.Random(19)
    history = default_history()
    history[0] = {**history[0], **{f"big/blob-{i}.txt": base64.b64encode(rng.randbytes(BIG_BYTES)).decode() + "\n" for i in range(BIG_FILES)}}
    return history


@pytest.fixture
def big_upstream(tmp_path) -> Upstream:
    up = make_upstream(tmp_path / "upstream", _big_history())
    git("config", "uploadpack.allowFilter", "true", cwd=up.path)
    return up


def _mirror(upstream: Upstream, cache: Path) -> Path:
    return Cache(cache).mirror_for(resolve_upstream(str(upstream.path), Path("/"))).path


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _big_blob(upstream: Upstream, pin: str) -> str:
    return git("rev-parse", f"{pin}:big/blob-0.txt", cwd=upstream.path)


def _has(mirror: Path, oid: str) -> bool:
    # Plain git, the mirror's own config, no GIT_NO_LAZY_FETCH: what any git command there would do.
    return subprocess.run(["git", f"--git-dir={mirror}", "cat-file", "-e", oid], capture_output=True).returncode == 0


def _model_with_deletion_and_new_file(project, upstream: Upstream) -> str:
    """A series that modifies, deletes and creates files: every kind of path git apply reads."""
    pin = simple_model(project, upstream)
    p3 = make_patch(upstream, pin, {"docs/guide.md": None, "src/new_file.py": "NEW = 1\n"}, "Drop the guide, add a module")
    project.write("patches/toy/rollout/0003-drop-guide.patch", p3)
    series = project.root / "patches/toy/rollout/series"
    series.write_text(series.read_text() + "0003-drop-guide.patch\n")
    project.commit_all("third patch")
    return pin


def test_verify_fetches_trees_and_touched_blobs_and_gives_a_full_builds_ids(project, big_upstream, tmp_path):
    pin = _model_with_deletion_and_new_file(project, big_upstream)
    full_cache, partial_cache = tmp_path / "full-cache", tmp_path / "partial-cache"
    built = zmr("build", "toy", cwd=project.root, env={"ZMR_CACHE": str(full_cache)})
    assert built.returncode == 0, built.stderr
    result = zmr("verify", "toy", "--json", cwd=project.root, env={"ZMR_CACHE": str(partial_cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""  # the server allows filters: nothing to say
    [branch] = json.loads(result.stdout)["branches"]
    assert branch["status"] == "ok" and branch["expected"] == project.ref("refs/heads/rollout/toy")

    mirror = _mirror(big_upstream, partial_cache)
    assert git("config", "--get", "zmr.partial", cwd=mirror) == "true"
    assert git("for-each-ref", "--format=%(refname)", "refs/zmr/", cwd=mirror) == f"refs/zmr/partial/{pin}"
    # No promisor remote in the mirror's config: nothing can fetch lazily there.
    assert "promisor" not in (mirror / "config").read_text()
    assert not _has(mirror, _big_blob(big_upstream, pin))
    for touched in ("src/model.py", "src/kernels/matmul.py", "docs/guide.md"):
        assert _has(mirror, git("rev-parse", f"{pin}:{touched}", cwd=big_upstream.path)), touched
    assert _has(mirror, git("rev-parse", f"{pin}:README.md", cwd=big_upstream.path)) is False

    full, partial = _bytes(_mirror(big_upstream, full_cache)), _bytes(mirror)
    assert partial * 10 < full, (partial, full)

    # Verify again: everything it needs is there, nothing is fetched.
    packs = sorted(p.name for p in (mirror / "objects/pack").iterdir())
    assert zmr("verify", "toy", cwd=project.root, env={"ZMR_CACHE": str(partial_cache)}).returncode == 0
    assert sorted(p.name for p in (mirror / "objects/pack").iterdir()) == packs
    assert not (partial_cache / "quarantine").exists()


def test_server_without_filters_falls_back_to_depth_one_and_says_so_once(project, upstream):
    simple_model(project, upstream)
    simple_model(project, upstream, model="second")
    assert git("config", "--get", "uploadpack.allowFilter", cwd=upstream.path, check=False) == ""
    result = zmr("verify", "--all", cwd=project.root)
    assert result.returncode == 1  # not built yet: missing, but the ids were computed
    notes = [line for line in result.stderr.splitlines() if "does not allow filtered fetches" in line]
    assert len(notes) == 1, result.stderr
    mirror = _mirror(upstream, Path(os.environ["ZMR_CACHE"]))
    pin = upstream.commits[1]
    # The server sent the whole tree: the pin is complete and kept as such.
    assert git("for-each-ref", "--format=%(refname)", "refs/zmr/", cwd=mirror) == f"refs/zmr/pins/{pin}"
    git("rev-list", "--objects", "--no-walk", "--missing=error", pin, cwd=mirror)
    assert zmr("build", "--all", cwd=project.root).returncode == 0
    again = zmr("verify", "--all", cwd=project.root)
    assert again.returncode == 0 and again.stderr == "", again.stderr


def test_build_after_a_partial_verify_writes_complete_branches(project, big_upstream):
    pin = _model_with_deletion_and_new_file(project, big_upstream)
    verified = zmr("verify", "toy", "--json", cwd=project.root)
    assert verified.returncode == 1  # missing: not built yet
    expected = json.loads(verified.stdout)["branches"][0]["expected"]
    built = zmr("build", "toy", cwd=project.root)
    assert built.returncode == 0, built.stderr
    assert project.ref("refs/heads/rollout/toy") == expected
    git("fsck", "--no-dangling", "--strict", cwd=project.root)
    git("rev-list", "--objects", "--missing=error", "rollout/toy", cwd=project.root)
    assert git("show", "rollout/toy:big/blob-3.txt", cwd=project.root) == big_upstream.file_at(pin, "big/blob-3.txt")
    mirror = _mirror(big_upstream, Path(os.environ["ZMR_CACHE"]))
    # The pin was fetched whole and is kept as a whole pin now.
    assert git("for-each-ref", "--format=%(refname)", "refs/zmr/", cwd=mirror) == f"refs/zmr/pins/{pin}"
    assert zmr("verify", "toy", cwd=project.root).returncode == 0
    checkout = zmr("checkout", "toy", "-c", "rollout", cwd=project.root)
    assert checkout.returncode == 0, checkout.stderr
    assert not (Path(os.environ["ZMR_CACHE"]) / "quarantine").exists()


def test_a_second_pin_fetched_whole_into_a_partial_mirror_gets_every_blob(project, big_upstream):
    """A full fetch must not offer the partial pin as a have: the server would leave out the blobs they share."""
    simple_model(project, big_upstream, pin_index=1)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    simple_model(project, big_upstream, model="later", pin_index=2)
    built = zmr("build", "later", cwd=project.root)
    assert built.returncode == 0, built.stderr
    git("fsck", "--no-dangling", cwd=project.root)
    mirror = _mirror(big_upstream, Path(os.environ["ZMR_CACHE"]))
    later = big_upstream.commits[2]
    git("rev-list", "--objects", "--no-walk", "--missing=error", later, cwd=mirror)
    refs = git("for-each-ref", "--format=%(refname)", "refs/zmr/", cwd=mirror).splitlines()
    assert refs == [f"refs/zmr/partial/{big_upstream.commits[1]}", f"refs/zmr/pins/{later}"]


def test_git_never_fetches_lazily_behind_zmrs_back(project, big_upstream, tmp_path):
    pin = simple_model(project, big_upstream)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    mirror = _mirror(big_upstream, Path(os.environ["ZMR_CACHE"]))
    blob = _big_blob(big_upstream, pin)
    # The upstream is reachable, and git reads a blob the mirror lacks: with a promisor
    # remote in the mirror's config, git 2.39 would fetch it here; it must fail instead.
    assert subprocess.run(["git", f"--git-dir={mirror}", "cat-file", "-p", blob], capture_output=True).returncode != 0
    assert not _has(mirror, blob)

    # Without the upstream, verify still works (it has all it needs) and build stops
    # with zmr's own error before writing anything.
    moved = tmp_path / "moved-away"
    shutil.move(big_upstream.path, moved)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1  # missing branch, computed offline
    failed = zmr("build", "toy", cwd=project.root)
    assert failed.returncode == 2
    assert "cannot fetch from" in failed.stderr, failed.stderr
    assert project.ref("refs/heads/rollout/toy") is None
    git("fsck", "--no-dangling", cwd=project.root)
    assert not (Path(os.environ["ZMR_CACHE"]) / "quarantine").exists()
    shutil.move(moved, big_upstream.path)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    git("fsck", "--no-dangling", cwd=project.root)


def test_a_tampered_branch_fails_a_partial_verify(project, big_upstream, tmp_path):
    simple_model(project, big_upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    # Change a file no patch touches: only its blob id tells, and verify never fetched that blob.
    tree = git("rev-parse", "rollout/toy^{tree}", cwd=project.root)
    forged_blob = git("hash-object", "-w", "--stdin", cwd=project.root, input=b"forged\n")
    listing = git("ls-tree", tree, cwd=project.root)
    big = git("ls-tree", f"{tree}:big", cwd=project.root).replace(git("rev-parse", f"{tree}:big/blob-5.txt", cwd=project.root), forged_blob)
    big_tree = git("mktree", cwd=project.root, input=big.encode() + b"\n")
    forged_tree = git("mktree", cwd=project.root, input=listing.replace(git("rev-parse", f"{tree}:big", cwd=project.root), big_tree).encode() + b"\n")
    info = git("cat-file", "commit", "rollout/toy", cwd=project.root)
    forged = git("hash-object", "-t", "commit", "-w", "--stdin", cwd=project.root, input=info.replace(f"tree {tree}", f"tree {forged_tree}", 1).encode() + b"\n")
    git("update-ref", "refs/heads/rollout/toy", forged, cwd=project.root)
    result = zmr("verify", "toy", cwd=project.root, env={"ZMR_CACHE": str(tmp_path / "fresh")})
    assert result.returncode == 1
    assert "changes tree differs (big/blob-5.txt)" in result.stdout, result.stdout
    assert "promisor" not in (_mirror(big_upstream, tmp_path / "fresh") / "config").read_text()


def _packs_with(mirror: Path, oid: str) -> tuple[list[Path], list[Path]]:
    """The mirror's pack files (all of each pack's files) that hold *oid*, and the others."""
    holding, others = [], []
    for idx in (mirror / "objects/pack").glob("*.idx"):
        names = subprocess.run(["git", "show-index"], stdin=idx.open("rb"), capture_output=True, text=True).stdout
        (holding if oid in names else others).extend(idx.parent.glob(idx.stem + ".*"))
    return holding, others


def test_missing_blobs_are_fetched_again_but_missing_trees_are_damage(project, big_upstream):
    pin = simple_model(project, big_upstream)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    cache = Path(os.environ["ZMR_CACHE"])
    mirror = _mirror(big_upstream, cache)
    touched = git("rev-parse", f"{pin}:src/model.py", cwd=big_upstream.path)
    # Lose the blobs: a partial mirror without what verify needs is not damaged, only short.
    _, blob_packs = _packs_with(mirror, pin)
    assert blob_packs
    for path in blob_packs:
        path.unlink()
    assert not _has(mirror, touched)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    assert _has(mirror, touched)
    assert not (cache / "quarantine").exists()
    # Lose a tree: that is damage, partial mirror or not.
    root_tree = git("rev-parse", f"{pin}^{{tree}}", cwd=big_upstream.path)
    old = list((mirror / "objects/pack").iterdir())
    subprocess.run(["git", f"--git-dir={mirror}", "pack-objects", "-q", str(mirror / "objects/pack/pack")], input=f"{pin}\n{root_tree}\n", text=True, check=True, capture_output=True)
    for path in old:
        path.unlink()
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    assert len(list((cache / "quarantine").iterdir())) == 1
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    assert zmr("verify", "toy", cwd=project.root).returncode == 0
    git("fsck", "--no-dangling", cwd=project.root)


def test_history_fetches_into_a_partial_mirror_get_every_blob(project, big_upstream):
    """upstreamed fetches history into the mirror; the partial pin must not be offered as a have."""
    simple_model(project, big_upstream)
    assert zmr("verify", "toy", cwd=project.root).returncode == 1
    result = zmr("upstreamed", "toy", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    mirror = _mirror(big_upstream, Path(os.environ["ZMR_CACHE"]))
    git("rev-list", "--objects", "--missing=error", "--glob=refs/zmr/heads/*", cwd=mirror)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    git("fsck", "--no-dangling", cwd=project.root)


def test_a_pin_move_diff_fetches_the_blobs_that_differ_between_the_pins_by_id_in_one_fetch(project, big_upstream, tmp_path):
    """zmr diff of a moved pin: both pins blobless with the series' blobs (one fetch each), then the blobs of the files that
    differ between the pins in one fetch by id, while the components are built; big files upstream left alone never come."""
    old = simple_model(project, big_upstream)
    base = project.ref("HEAD")
    rng = random.Random(23)
    new = big_upstream.commit({"big/blob-1.txt": base64.b64encode(rng.randbytes(BIG_BYTES)).decode() + "\n", "docs/guide.md": "guide v2\n"}, "upstream work")
    manifest = project.root / "manifests/toy.yaml"
    manifest.write_text(manifest.read_text().replace(old, new))
    project.commit_all("move the pin")
    cache = tmp_path / "diff-cache"
    result = zmr("diff", "--json", base, "HEAD", cwd=project.root, env={"ZMR_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no fallback to whole trees
    [entry] = json.loads(result.stdout)["components"]
    numstat = [line.split("\t") for line in git("diff", "--numstat", "--no-renames", old, new, cwd=big_upstream.path).splitlines()]
    # The series touch files upstream left alone: the release trees differ exactly where the pins do.
    assert sorted(f["path"] for f in entry["tree"]["files"]) == sorted(path for _, _, path in numstat)
    assert (entry["tree"]["insertions"], entry["tree"]["deletions"]) == (sum(int(i) for i, _, _ in numstat), sum(int(d) for _, d, _ in numstat))
    mirror = _mirror(big_upstream, cache)
    for pin in (old, new):
        assert _has(mirror, git("rev-parse", f"{pin}:big/blob-1.txt", cwd=big_upstream.path))
        assert _has(mirror, git("rev-parse", f"{pin}:src/model.py", cwd=big_upstream.path))  # a series' file
    assert not _has(mirror, _big_blob(big_upstream, old))  # big/blob-0.txt: the same at both pins
    # Three fetches into the mirror: both pins blobless, the series' blobs, the blobs that differ.
    assert len(list((mirror / "objects/pack").glob("*.pack"))) == 3
