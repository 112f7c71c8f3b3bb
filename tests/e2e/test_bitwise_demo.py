"""--bitwise on the demo (CPU): the model's mismatch check run in the release built on each upstream commit tried."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO_ROOT, git, zmr

pytest.importorskip("torch")  # the demo extra: the toy engines run on torch

QUICK = "python scripts/demo_bitwise.py --dtypes fp32 --batch-sizes 1,3 --threads 1"


def demo_project(tmp_path, series_rollout: list[str] | None = None):
    root = tmp_path / "demo"
    root.mkdir()
    git("init", "-q", "-b", "main", cwd=root)
    for rel in ("manifests/demo.yaml", "zmr.yaml", "scripts/demo_bitwise.py", "upstreams/toy-rollout.bundle", "upstreams/toy-trainer.bundle"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, root / rel)
    shutil.copytree(REPO_ROOT / "patches/demo", root / "patches/demo")
    manifest = root / "manifests/demo.yaml"
    manifest.write_text(manifest.read_text().replace("run: python scripts/demo_bitwise.py", f"run: {QUICK}"))
    if series_rollout is not None:
        (root / "patches/demo/rollout/series").write_text("".join(f"{name}\n" for name in series_rollout))
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "demo", cwd=root)
    assert zmr("build", "demo", cwd=root).returncode == 0  # the trainer's release tree comes from its branch
    return root


def test_bitwise_moves_the_demo_rollout_to_the_newest_commit_with_zero_mismatch(tmp_path):
    root = demo_project(tmp_path)
    result = zmr("update", "demo", "-c", "rollout", "--bitwise", "--json", cwd=root, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["components"][0]
    check = data["check"]
    assert check["check"]["kind"] == "bitwise" and [c["name"] for c in check["check"]["commands"]] == ["bitwise-logprobs"]
    assert data["target"] == data["tip"] and check["newest_good"] == data["tip"] and check["tests"] == 1
    [tried] = check["tried"]
    assert tried["verdict"] == "good" and "after: 0 of" in tried["output"]



@pytest.mark.slow
def test_bisect_bitwise_finds_the_upstream_commit_that_breaks_zero_mismatch(tmp_path):
    """Upstream's rollout starts scaling the weights it loads: its tokens' log-probs no longer match the trainer's bit for bit."""
    root = demo_project(tmp_path)
    clone = tmp_path / "toy-rollout"
    git("clone", "-q", "-b", "main", str(REPO_ROOT / "upstreams/toy-rollout.bundle"), str(clone))
    good = git("rev-parse", "HEAD", cwd=clone)
    stamp = {"GIT_AUTHOR_DATE": "@1800000000 +0000", "GIT_COMMITTER_DATE": "@1800000000 +0000"}
    (clone / "NOTES.md").write_text("notes\n")
    git("add", "NOTES.md", cwd=clone)
    git("commit", "-q", "-m", "Add notes", cwd=clone, env=stamp)
    weights = clone / "toy_rollout/weights.py"
    text = weights.read_text()
    assert "f.get_tensor(name) for name" in text
    weights.write_text(text.replace("f.get_tensor(name) for name", "f.get_tensor(name) * 1.0001 for name"))
    git("commit", "-q", "-am", "weights: rescale on load", cwd=clone, env=stamp)
    breaking = git("rev-parse", "HEAD", cwd=clone)
    (clone / "NOTES.md").write_text("more notes\n")
    git("commit", "-q", "-am", "More notes", cwd=clone, env=stamp)
    bad = git("rev-parse", "HEAD", cwd=clone)
    git("bundle", "create", "-q", str(root / "upstreams/toy-rollout.bundle"), "main", cwd=clone)
    result = zmr("bisect", "demo", "-c", "rollout", "--bitwise", "--good", good, "--bad", bad, "--json", cwd=root, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["found"] is True and data["first_bad"]["commit"] == breaking and data["first_bad_subject"] == "weights: rescale on load"
    assert data["first_bad"]["verdict"] == "bad" and "bitwise-logprobs: exit status 1" == data["first_bad"]["reason"]
    assert data["tests"] == 2 and data["candidates"] == 2
