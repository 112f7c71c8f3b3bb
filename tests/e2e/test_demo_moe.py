"""The MoE demo (manifests/demo-moe.yaml): a mixture-of-experts layer, bitwise zero between rollout and trainer.

(1) the release trees of demo-moe (the upstreams' MoE commits + the series) give the trainer's log-probs bit for
    bit at batches 1, 3, 8 and 128 (decode steps of up to 128 rows), fp32 and bf16, while the upstream MoE path
    (TOY_BATCH_INVARIANT=0: router softmax and top-k, per-expert GEMMs on the routed rows, arrival-order combine)
    differs;
(2) expert parallel over gloo: the rollout at TP = EP 2 and 4 against the trainer at TP 1 and CP 2: 0 differing
    tokens, the same rollout bits at EP 2 and EP 4; the standard all-reduce combine differs;
(3) zmr locate names the combine when each side's own combine replaces the fixed one (bf16), and nothing with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import demo_walk
from e2e.test_demo import COMPONENTS, ROOT, _git, _git_env, _pins, _run, _series

pytest.importorskip("torch")  # the demo extra

decide = demo_walk.skill_decide()
TABLE = decide.load_table()
TINY = ("--hidden", "32", "--layers", "1", "--prompt-len", "1:8", "--new-tokens", "2:4")


@pytest.fixture(scope="module")
def moe_trees(tmp_path_factory) -> dict[str, Path]:
    """demo-moe's release trees: each bundle at the manifest's pin, its series applied with git am."""
    base = tmp_path_factory.mktemp("demo-moe-trees")
    env = _git_env(base)
    pins = _pins(ROOT / "manifests" / "demo-moe.yaml")
    assert pins != _pins(ROOT / "manifests" / "demo.yaml")  # the dense demo keeps its own pins
    trees = {}
    for comp in COMPONENTS:
        tree = base / comp
        _git(base, "clone", "-q", str(ROOT / "upstreams" / f"toy-{comp}.bundle"), str(tree), env=env)
        _git(tree, "checkout", "-q", "--detach", pins[comp], env=env)
        _git(tree, "am", "-q", "--no-3way", *map(str, _series(ROOT / "patches" / "demo-moe" / comp)), env=env)
        trees[comp] = tree
    return trees


def _script(name: str, trees: dict[str, Path], *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return _run([sys.executable, str(ROOT / "scripts" / name), "--rollout", str(trees["rollout"]),
                 "--trainer", str(trees["trainer"]), *extra], cwd=ROOT, timeout=timeout)


def test_moe_release_trees_bitwise_at_every_batch(moe_trees, tmp_path):
    proc = _script("demo_bitwise.py", moe_trees, "--moe", "--artifacts", str(tmp_path), "--batch-sizes", "1,3,8,128",
                   "--max-running", "128", *TINY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["moe"] == {"experts": 8, "top_k": 2}
    for dtype in ("fp32", "bf16"):
        before, after = summary["results"][dtype]["before"], summary["results"][dtype]["after"]
        assert sorted(after["per_batch"], key=lambda b: int(b[2:])) == ["bs1", "bs3", "bs8", "bs128"]
        assert after["differ"] == 0 and after["tokens"] > 300, (dtype, after)
        assert before["differ"] > 0 and before["per_batch"]["bs128"]["differ"] > 0, (dtype, before)


@pytest.mark.slow
def test_moe_expert_parallel_ep2_ep4_bitwise_and_the_standard_combine_differs(moe_trees, tmp_path):
    rollouts = {}
    for ep, cp in ((2, 2), (4, 1)):
        out = tmp_path / f"ep{ep}"
        proc = _script("demo_parallel.py", moe_trees, "--moe", "--tp", str(ep), "--cp", str(cp), "--artifacts", str(out),
                       "--batch-sizes", "5", "--max-running", "5", "--timeout", "240", *TINY)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        for dtype in ("fp32", "bf16"):
            for name, stats in summary["results"][dtype]["invariant"].items():
                assert stats["differ"] == 0 and stats["tokens"] >= 10, (ep, dtype, name, stats)
            assert summary["results"][dtype]["standard"][f"rollout-tp{ep}-ep{ep}_vs_trainer-tp1"]["differ"] > 0
        rollouts[ep] = {d: (out / "invariant" / d / f"rollout-tp{ep}-ep{ep}.jsonl").read_text().splitlines()[1:] for d in ("fp32", "bf16")}
    assert rollouts[2] == rollouts[4]  # EP 2 and EP 4 sample the same tokens with the same log-prob bits


def test_locate_names_the_combine_when_its_fixed_order_is_off(moe_trees, tmp_path):
    """Each side's own combine in place of the fixed one (the ablation of issue 51: the combine of rollout 0013 / trainer 0011
    missing): zmr locate names the combine, and the skill's decision is moe, whose worked example names those two patches;
    with the fixed combine nothing differs."""
    for combine, rc in (("standard", 1), ("fixed", 0)):
        out = tmp_path / combine
        proc = _script("demo_locate.py", moe_trees, "--moe", "--dtype", "bf16", "--moe-combine", combine, "--out", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        code, report = demo_walk.locate_json(out)  # zmr locate --map names.yaml --json, in this process
        assert code == rc, report
        if rc:
            first = report["first"]
            assert first["op"] == "combine" and first["inputs_verdict"] == "equal", first
            decision = decide.decide(TABLE, report)
            assert (decision["op"], decision["verdict"], decision["guide"]) == ("combine", "equal", "moe"), decision
            fixes = {p.name for comp in COMPONENTS for p in _series(ROOT / "patches" / "demo-moe" / comp)} - {
                p.name for comp in COMPONENTS for p in _series(ROOT / "patches" / "demo" / comp)
            }
            assert {Path(p).name for p in decision["worked_example"]["patches"]} == fixes
        else:
            assert report["first"] is None
