"""The skill (skill/): its workflow walked on the demo, its decision table, guides, templates, commands and figures.

- the drill: from the demo's upstream pins to bitwise zero, in fp32 and bf16, every decision read from
  `zmr locate --json` through skill/references/decisions.yaml (skill/scripts/decide.py), applying the
  patches the chosen guide names as its worked example, until nothing differs;
- the missing-fix test: each fix of the two demo series left out, the workflow lands on that fix's guide;
- every guide has the contract's sections, and its "Worked example" names the table's patch files;
- SKILL.md's frontmatter within the Agent Skills limits; every command block in skill/ runs on a fresh
  clone or carries a `<!-- needs: ... -->` marker; every figure in skill/ is found in the file it cites.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import demo_walk
from conftest import REPO_ROOT

SKILL = REPO_ROOT / "skill"
GUIDES = SKILL / "references" / "mechanisms"
SECTIONS = ["Symptom", "Why it breaks", "Fix pattern", "Worked example", "How to verify", "Cost", "Upstream status"]
DTYPES = ("fp32", "bf16")


def _decide():
    spec = importlib.util.spec_from_file_location("skill_decide", SKILL / "scripts" / "decide.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


decide = _decide()
TABLE = decide.load_table()


def _series_index(path: str) -> tuple[int, int]:
    """Where a repository-relative demo patch path stands: (component, place in its series)."""
    comp = Path(path).parent.name
    names = [p.name for p in demo_walk.series(comp)]
    return demo_walk.COMPONENTS.index(comp), names.index(Path(path).name)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Record-and-locate on trees of the demo (upstream pins plus patches); trees built, and each pair of trees
    recorded and located, once per patch set and dtype (the walks of the tests meet at the same states)."""
    torch = pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("skill-demo")
    upstream = demo_walk.upstream_trees(base)
    record = demo_walk.demo_locate().record
    threads = torch.get_num_threads()
    trees: dict[tuple[str, tuple[str, ...]], Path] = {}
    located: dict[tuple, tuple[int, dict]] = {}

    def run(patches: dict[str, list[Path]], dtype: str) -> tuple[int, dict]:
        state = (dtype, *(tuple(p.name for p in patches[comp]) for comp in demo_walk.COMPONENTS))
        if state in located:
            return located[state]
        pair = []
        for comp in demo_walk.COMPONENTS:
            key = (comp, tuple(p.name for p in patches[comp]))
            if key not in trees:
                trees[key] = demo_walk.tree_with(upstream[comp], patches[comp], base / f"{comp}-{len(trees)}")
            pair.append(trees[key])
        out = base / f"dumps-{len(located)}"
        record(*pair, out, dtype=dtype)
        located[state] = demo_walk.locate_json(out)
        return located[state]

    try:
        yield run
    finally:
        torch.set_num_threads(threads)


def _cpu_release() -> dict[str, list[Path]]:
    """Each side's series as the single-process CPU run has it: up to the first patch that shows on a GPU or in several processes."""
    release = {}
    for comp in demo_walk.COMPONENTS:
        kept = []
        for path in demo_walk.series(comp):
            if TABLE["demo_series"][comp][path.name]["shows"] not in ("cpu", "none"):
                break
            kept.append(path)
        release[comp] = kept
    return release


# ---------------------------------------------------------------------------
# the drill


def walk(demo, start: dict[str, list[Path]], dtype: str) -> tuple[list[dict], dict[str, list[Path]]]:
    """Steps 2-7 on the demo from the trees of *start*: record, locate, decide by the table, apply the chosen guide's worked
    example (its `needs`, then its `patches`, each side in series order), again, until nothing differs.
    Returns the decisions taken and the patches applied in the end."""
    applied = {comp: list(start[comp]) for comp in demo_walk.COMPONENTS}
    decisions: list[dict] = []
    for _ in range(len(TABLE["guides"]) + 1):
        code, report = demo(applied, dtype)
        decision = decide.decide(TABLE, report)
        if decisions:
            # the operation the last guide was chosen for: its worked example fixed it (no row of it differs any more)
            ops = {op["name"]: op for op in report["ops"]}
            assert ops[decisions[-1]["op"]]["rows_differ"] == 0, (decisions, ops[decisions[-1]["op"]])
        if decision["next"] == "none":
            assert code == 0 and report["verdict"] == "bitwise_equal"
            return decisions, applied
        assert code == 1, report
        # every located operation of the demo maps to a guide with a worked example to apply
        assert decision["next"] == "guide", decision
        example = decision["worked_example"]
        assert example and example.get("patches"), f"guide {decision['guide']} has no worked example to apply"
        new = [p for p in [*example.get("needs", []), *example["patches"]] if REPO_ROOT / p not in applied[Path(p).parent.name]]
        assert new, f"{decision['op']} still differs after guide {decision['guide']}'s worked example was applied"
        for path in new:
            applied[Path(path).parent.name].append(REPO_ROOT / path)
        for comp in demo_walk.COMPONENTS:  # each side's patches in series order (what `zmr export` writes)
            applied[comp].sort(key=lambda p: _series_index(str(p)))
        decisions.append(decision)
    pytest.fail(f"no bitwise zero after guides {[d['guide'] for d in decisions]}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_drill_from_the_pins_to_bitwise_zero_every_decision_from_zmr_locate(demo, dtype):
    """From the unpatched pins (which differ: step 3's negative control) to bitwise zero, every decision by the table."""
    decisions, applied = walk(demo, {comp: [] for comp in demo_walk.COMPONENTS}, dtype)
    # fp32 finds the chunked RMSNorm first, bf16 the split-K GEMM (the RMSNorm's last bit is rounded away); then attention
    assert [(d["op"], d["guide"]) for d in decisions] == [("rms_norm" if dtype == "fp32" else "linear", "reductions" if dtype == "fp32" else "gemm"),
                                                            ("attention", "attention")]
    release = _cpu_release()
    for comp in demo_walk.COMPONENTS:  # what the drill applied is the release series' own patches, in its order
        assert applied[comp] == [p for p in release[comp] if p in applied[comp]], comp


# ---------------------------------------------------------------------------
# the missing-fix test


def _demo_patches() -> list[tuple[str, str]]:
    return [(comp, path.name) for comp in demo_walk.COMPONENTS for path in demo_walk.series(comp)]


def test_the_table_classifies_every_patch_of_both_demo_series():
    for comp in demo_walk.COMPONENTS:
        assert sorted(TABLE["demo_series"][comp]) == sorted(p.name for p in demo_walk.series(comp)), comp
    named = {Path(p).name for g in TABLE["guides"].values() if g["worked_example"] for key in ("patches", "needs", "gpu") for p in g["worked_example"].get(key, [])}
    for comp, name in _demo_patches():
        entry = TABLE["demo_series"][comp][name]
        assert entry["shows"] in ("cpu", "gpu", "parallel", "none"), (comp, name)
        assert set(entry["guides"]) <= set(TABLE["guides"]), (comp, name)
        if entry["guides"]:  # a fix: some guide's worked example names it
            assert name in named, (comp, name)
        else:
            assert entry["shows"] == "none", (comp, name)


CPU_FIXES = [(comp, name) for comp, name in _demo_patches() if TABLE["demo_series"][comp][name]["shows"] == "cpu"]


@pytest.mark.parametrize("comp,name", CPU_FIXES, ids=[f"{c}-{n[:4]}" for c, n in CPU_FIXES])
def test_a_missing_fix_lands_on_its_guide(demo, comp, name):
    """The CPU release series with one fix left out of one side (and what that side stacks on it: a stacked series cannot
    lose one patch and still apply), the other side whole. The workflow finds a mismatch, decides by the table, and
    walks back to zero with every removed patch restored; on the way it lands on the fix's own guide (in bf16 alone
    the GEMM and RMSNorm of trainer 0002 happen to agree at this size: there it lands on the attention of the patch
    stacked on it first, whose worked example brings 0002 back as a need; fp32 lands on it)."""
    entry = TABLE["demo_series"][comp][name]
    release = _cpu_release()
    cut = [p.name for p in release[comp]].index(name)
    removed = {p.name for p in release[comp][cut:]}
    guides_of_removed = {g for n in removed for g in TABLE["demo_series"][comp][n]["guides"]}
    landed = set()
    for dtype in DTYPES:
        decisions, applied = walk(demo, {**release, comp: release[comp][:cut]}, dtype)
        assert decisions, f"{dtype}: nothing differs without {comp}/{name}"
        assert decisions[0]["guide"] in guides_of_removed, (dtype, decisions[0])
        assert applied == release, dtype  # the walk restored exactly what was removed
        landed |= {d["guide"] for d in decisions}
    assert landed & set(entry["guides"]), (landed, entry["guides"])


def test_the_decision_table_routes_the_names_zmr_locate_gives():
    """The operations the demo's recorders name (single process and parallel), and module names of vLLM and Megatron-LM."""
    cases = {
        "rms_norm": "reductions", "linear#2": "gemm", "silu": "reductions", "attention": "attention", "token_logprob": "logsoftmax-sampling",
        "row_partial": "collectives", "row_linear": "collectives", "column_linear": "collectives",
        "model.layers.0.self_attn.attn": "attention", "model.layers.3.input_layernorm": "reductions", "model.layers.0.self_attn.o_proj": "gemm",
        "decoder.layers.1.self_attention.core_attention": "attention", "decoder.layers.0.mlp.linear_fc1": "gemm", "decoder.final_layernorm": "reductions",
        "model.layers.2.mlp.experts": "moe", "decoder.layers.0.mlp.router": "moe", "model.layers.0.mlp.gate": "moe", "model.layers.0.mlp.gate_up_proj": "gemm",
        "model.layers.1.mlp.experts_nvfp4": "quantized-experts", "model.layers.0.self_attn.qkv_proj.lora_b": "lora", "model.layers.4.mixer": "linear-attention",
        "model.layers.0.self_attn.indexer": "sparse-attention", "lm_head": "gemm", "logits_processor": "logsoftmax-sampling",
    }
    for op, guide in cases.items():
        assert decide.guide_for(TABLE, op) == guide, op
    assert decide.guide_for(TABLE, "decoder.layers.0.mlp") is None  # a whole block: record finer (the fallback)
    assert decide.guide_for(TABLE, "linear", "layout") == "collectives" and decide.guide_for(TABLE, "rms_norm", "graph-vs-eager") == "cuda-graphs"
    assert {r["guide"] for r in TABLE["rules"]} == set(TABLE["guides"]), "every guide is reachable from some rule"
    for verdict in ("differ", "unknown"):
        report = {"verdict": "diverged", "first": {"op": "linear", "inputs_verdict": verdict}}
        assert decide.decide(TABLE, report)["next"] == TABLE["verdicts"][verdict]["next"] != "guide"


def test_decide_script_reads_a_locate_report(tmp_path):
    report = tmp_path / "locate.json"
    report.write_text('{"verdict": "diverged", "first": {"op": "attention", "inputs_verdict": "equal"}}')
    out = subprocess.run([sys.executable, str(SKILL / "scripts" / "decide.py"), str(report)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "guide: skill/references/mechanisms/attention.md" in out.stdout
    assert "worked example: patches/demo/rollout/0004-attention-decode-replays-the-prefill-math-over-the-s.patch" in out.stdout
    report.write_text('{"not": "a report"}')
    bad = subprocess.run([sys.executable, str(SKILL / "scripts" / "decide.py"), str(report)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not the output of `zmr locate --json`" in bad.stderr
