#!/usr/bin/env python3
"""The demo's overhead figure in cases/demo/case.yaml, generated from a committed demo_throughput.py JSON.

`zmr docs` renders case.yaml's overhead figure and footnote into the README
tables; this script writes them from the evidence, so the figure is never
typed by hand: the headline is the zero-mismatch arm's decode-step overhead
against the standard arm (bf16, batch 128 and 8) on the evidence's device,
naming the baseline (CUDA graphs or eager); the footnote lists every
measured configuration with its roofline.

    python scripts/demo_overhead_figure.py            # rewrite the overhead block of case.yaml
    python scripts/demo_overhead_figure.py --check    # exit 1 if case.yaml differs from the evidence
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "cases" / "demo" / "case.yaml"
EVIDENCE = ROOT / "cases" / "demo" / "evidence" / "h100-2026-12-06b-e-throughput-gpu-bound.json"


def _short_device(name: str) -> str:
    return name.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def overhead_block(result: dict, evidence: str) -> str:
    """The `overhead:` block of case.yaml (figure and footnote) for one demo_throughput.py result."""
    device = _short_device(result["device"])
    configs = {(c["dtype"], c["batch"]): c for c in result["configs"]}
    graphs = "CUDA graphs on both arms" if result["cuda_graphs"] else "both arms eager"

    def step(dtype, batch):
        return configs[(dtype, batch)]["step"]

    def base(s):  # the fastest standard arm of a step measurement (older evidence has one, "standard")
        return s.get("best_standard_arm", "standard")

    def over(s):
        return s["overhead_vs_best_standard_percent"] if "overhead_vs_best_standard_percent" in s else s["overhead_vs_standard_percent"]

    head, small = step("bf16", 128), step("bf16", 8)
    figure = (f"{over(head)} % vs the fastest standard path ({device}, bf16, batch 128, hidden {result['hidden']}, "
              f"{graphs}; {over(small)} % at batch 8)")
    parts = []
    for (dtype, batch), c in configs.items():
        s = c["step"]
        std, zm = s["arms"][base(s)], s["arms"]["zero_mismatch"]
        eng = c.get("engine", {})
        eng_over = eng.get("overhead_vs_best_standard_percent", eng.get("overhead_vs_standard_percent"))
        parts.append(f"{dtype} batch {batch}: {zm['tokens_per_s']} vs {std['tokens_per_s']} tok/s "
                     f"({over(s)} % against {base(s)}; {zm['us_per_step']} vs {std['us_per_step']} µs per step; "
                     f"roofline {zm.get('roofline_percent')} vs {std.get('roofline_percent')} %, "
                     f"{zm['GBps']} vs {std['GBps']} GB/s; engine {eng_over} %)")
    tiles = result.get("gemm_tiles")
    if "gemm_rows" in result:  # rollout 0012: the GEMM as cuBLAS calls of one fixed shape, the rest Triton
        rows = result["gemm_rows"]
        kernels = ("batch-invariant kernels: the GEMM as cuBLAS calls of one fixed shape, C rows each"
                   + (f" (TOY_BI_GEMM_ROWS={json.dumps(rows, separators=(',', ':'))})" if rows else " (the release tree's GEMM_ROWS)")
                   + ", TF32 and reduced-precision reductions off; RMSNorm, attention, SiLU and log-softmax in Triton")
        tiles = None  # the Triton GEMM tiles do not run
    else:
        kernels = "Triton batch-invariant kernels"
    footnote = (
        f"Rollout-side cost only, the zero-mismatch arm ({kernels}) against the model's fastest "
        f"standard path (cuBLAS, F.rms_norm, decode attention reading the KV cache in place: standard = SDPA with a "
        f"length mask, standard_varlen = PyTorch's varlen FlashAttention or memory-efficient kernel where measured), "
        f"{graphs} (one graph per batch-size "
        f"bucket, toy_rollout.graphs): one decode step of B sequences of {step('bf16', 128)['context']} cached keys, "
        f"replayed and timed interleaved, medians of {result['reps']}; roofline = the step's floor time (weights and "
        f"KV read once at the datasheet HBM bandwidth, or its FLOPs at the peak rate, whichever is larger) over the "
        f"measured time. scripts/demo_throughput.py --preset gpu-bound (hidden {result['hidden']}, {result['layers']} "
        f"layers, {result['heads']} heads, vocab {result['vocab']}) on one {result['device']} (torch {result['torch']}, "
        f"Triton {result['triton']}; fp32 is IEEE fp32 on both arms, no tf32)"
        + (f", GEMM tiles TOY_BI_GEMM_TILES={json.dumps(tiles, separators=(',', ':'))}" if tiles else "")
        + ": " + "; ".join(parts)
        + f". The engine figure is Engine.generate() of {result['requests']} requests, prefill and CPU sampling "
        f"included. Generated from {evidence} by scripts/demo_overhead_figure.py."
    )
    return "overhead:\n" + f"  figure: {json.dumps(figure, ensure_ascii=False)}\n" + f"  footnote: {json.dumps(footnote, ensure_ascii=False)}\n"


def render(case_text: str, block: str) -> str:
    new, count = re.subn(r"^overhead:\n(?:  .*\n|    .*\n)*", block, case_text, count=1, flags=re.M)
    if count != 1:
        raise SystemExit(f"{CASE}: no overhead block")
    return new


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evidence", type=Path, default=EVIDENCE)
    p.add_argument("--check", action="store_true", help="exit 1 if case.yaml's overhead block differs from the evidence")
    args = p.parse_args(argv)
    result = json.loads(args.evidence.read_text(encoding="utf-8").strip().splitlines()[-1])
    rel = args.evidence.resolve().relative_to(ROOT).as_posix()
    text = CASE.read_text(encoding="utf-8")
    new = render(text, overhead_block(result, rel))
    if args.check:
        if new != text:
            print(f"{CASE.relative_to(ROOT)}: the overhead block is not the one {rel} gives; run scripts/demo_overhead_figure.py",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        CASE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
