#!/usr/bin/env python3
"""Fixed-shape cuBLAS as a batch-invariant GEMM: torch.mm on row chunks of one size C, measured beside Triton.

cuBLAS documents bit-wise reproducible results for the same call (shape,
dtype, alignment, workspace, GPU architecture and SM count, toolkit
version), and a row of a GEMM's result does not depend on the values of the
other rows. So cutting the rows into chunks of one fixed size C (the last
one padded with zero rows) and calling torch.mm once per chunk gives every
row the same kernel whatever the batch. This script tests that assumption
and times it, per weight shape of the demo's models (q/k/v, o, gate/up,
down, lm_head), dtype and C:

  invariant  every row of batches 1 .. 3C (so several chunks, the row at
             every position of a chunk) has the bits of the same row run
             alone; a CUDA graph replay of batches 8 and 128 has the bits of
             eager; a second process (this script with --child) computes the
             same bits (sha256 of the outputs).
  timed      at every --rows value, each call captured 10 times in a CUDA
             graph and replayed, median of 5: the chunked call, plain cuBLAS
             (F.linear, whatever kernel it picks for the rows) and the
             zero-mismatch Triton GEMM of the rollout tree (its tile table
             from TOY_BI_GEMM_TILES, as the evidence ran it).

TF32 and reduced-precision reductions are off for every cuBLAS call here
(torch.backends.cuda.matmul.allow_tf32, allow_bf16/fp16_reduced_precision_reduction),
as the bitwise path sets them. The summary adds the shapes up into one
decode step of each model (layers x per-layer GEMMs + lm_head).

    python scripts/demo_gemm_chunks.py --rollout TREE [--chunks 8,16,32,64,128] [--rows 8,128]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import subprocess
import sys

# The models' presets and GEMM shapes, and the CUDA-graph timer, as the tile tuner has them.
from demo_gemm_tune import PRESETS, graph_time, shapes  # noqa: E402 - scripts/ is on sys.path when run as a script


def chunked_mm(torch, x, w, c: int):
    """x @ w.T by torch.mm on chunks of exactly c rows (zero padded), written into one output."""
    m, k = x.shape
    calls = -(-m // c)
    if calls * c != m:
        padded = x.new_zeros(calls * c, k)
        padded[:m] = x
        x = padded
    out = x.new_empty(calls * c, w.shape[0])
    wt = w.t()
    for i in range(calls):
        torch.mm(x[i * c:(i + 1) * c], wt, out=out[i * c:(i + 1) * c])
    return out[:m]


def inputs(torch, n, k, dtype, rows, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, generator=g, device="cuda", dtype=torch.float32).to(dtype) / k ** 0.5
    x = torch.randn(rows, k, generator=g, device="cuda", dtype=torch.float32).to(dtype)
    return w, x


def digests(torch, presets, dtypes, chunks) -> dict[str, str]:
    """sha256 of the chunked outputs of batches 8 and 128, per preset, dtype, shape and C (same seeds in every process)."""
    out = {}
    for preset in presets:
        hidden, _, vocab = PRESETS[preset]
        for dname in dtypes:
            dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dname]
            for si, (name, (n, k)) in enumerate(shapes(hidden, vocab).items()):
                w, x = inputs(torch, n, k, dtype, 128, 1000 + si)
                for c in chunks:
                    for m in (8, 128):
                        y = chunked_mm(torch, x[:m], w, c)
                        out[f"{preset}/{dname}/{name}/C{c}/M{m}"] = hashlib.sha256(y.float().cpu().numpy().tobytes()).hexdigest()[:16]

    return out


KIND = {"bf16": "tensor", "fp32": "ieee"}


def choose(result: dict, presets: list[str], dtypes: list[str], chunks: list[int], rows: list[int], gain: float = 0.05) -> dict:
    """Rows per call C, per kind and weight shape, among the C that passed every check in every shape of the dtype
    and in both processes. The measure of an assignment is its worst GEMM time per decode step against plain
    cuBLAS's over the row counts (layers x the per-layer shapes + lm_head). The kind's C: the one C for every shape
    with the least worst ratio over all models. A model's shapes get their own entries where its best assignment
    of one C per shape (searched exhaustively) makes the worst ratio `gain` smaller than the kind's C does."""
    differ = result["two_processes"]["differ"]
    table, why = {}, {}
    for dname in dtypes:
        def ok(c, dname=dname):
            inv = [rec["invariant"][c] for key, rec in result["shapes"].items() if key.split("/")[1] == dname]
            return (all(not i["rows_differ_in_batches"] and all(i["graph_equals_eager"].values()) for i in inv)
                    and not any(key.split("/")[1] == dname and key.split("/")[3] == f"C{c}" for key in differ))
        valid = [c for c in chunks if ok(c)]
        if not valid:
            why[dname] = "no C passed every check: keep the Triton kernel"
            continue
        models = {}
        for preset in presets:
            hidden, layers, vocab = PRESETS[preset]
            recs = {s: result["shapes"][f"{preset}/{dname}/{s}"] for s in shapes(hidden, vocab)}
            models[preset] = (recs, {s: 1 if s == "lm_head" else layers for s in recs})

        def worst(preset, assign, models=models):
            recs, weight = models[preset]
            return max(sum(recs[s]["chunk_us"][assign[s]][m] * weight[s] for s in recs) / sum(recs[s]["cublas_us"][m] * weight[s] for s in recs)
                       for m in rows)
        uniform = {c: max(worst(p, dict.fromkeys(models[p][0], c)) for p in presets) for c in valid}
        kind_c = min(valid, key=uniform.get)
        table[KIND[dname]] = kind_c
        why[dname] = {"valid": valid, "worst_ratio_one_c": {c: round(v, 3) for c, v in uniform.items()}, "per_shape": {}}
        for preset in presets:
            recs = models[preset][0]
            names = list(recs)
            best = min((dict(zip(names, combo)) for combo in itertools.product(valid, repeat=len(names))), key=lambda a, p=preset: worst(p, a))
            base, own = worst(preset, dict.fromkeys(names, kind_c)), worst(preset, best)
            why[dname]["per_shape"][preset] = {"assignment": best, "worst_ratio": round(own, 3), "with_kind_c": round(base, 3)}
            if own < (1 - gain) * base:
                for s, c in best.items():
                    if c != kind_c:
                        table[f"{KIND[dname]}:{recs[s]['N']}x{recs[s]['K']}"] = c
    return {"table": table, "why": why}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollout", help="the rollout tree (its Triton GEMM is timed beside)")
    p.add_argument("--presets", default="gpu-bound,small")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--rows", default="8,128")
    p.add_argument("--chunks", default="8,16,32,64,128")
    p.add_argument("--table", help="write the chosen rows per call as the JSON of TOY_BI_GEMM_ROWS")
    p.add_argument("--child", action="store_true", help="print the digests only (the second process)")
    p.add_argument("--choose-from", help="no GPU: make the choice again from an earlier run's JSON (last line), print it")
    args = p.parse_args(argv)
    if args.choose_from:
        with open(args.choose_from) as f:
            old = json.loads(f.read().strip().splitlines()[-1])
        for rec in old["shapes"].values():  # JSON made the row and chunk keys strings
            rec["cublas_us"] = {int(m): v for m, v in rec["cublas_us"].items()}
            rec["chunk_us"] = {int(c): {int(m): v for m, v in t.items()} for c, t in rec["chunk_us"].items()}
            rec["invariant"] = {int(c): v for c, v in rec["invariant"].items()}
        choice = choose(old, sorted({key.split("/")[0] for key in old["shapes"]}, key=list(PRESETS).index),
                        [d for d in KIND if any(key.split("/")[1] == d for key in old["shapes"])], old["chunks"], old["rows"])
        if args.table:
            with open(args.table, "w") as f:
                json.dump(choice["table"], f)
        print(json.dumps(choice))
        return 0
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    presets, dtypes = args.presets.split(","), args.dtypes.split(",")
    chunks = [int(c) for c in args.chunks.split(",")]
    rows = [int(r) for r in args.rows.split(",")]
    if args.child:
        print(json.dumps(digests(torch, presets, dtypes, chunks)))
        return 0
    bi = None
    if args.rollout:
        sys.path.insert(0, args.rollout)
        from toy_rollout import batch_invariant as bi
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "cublas_flags": {"allow_tf32": False, "allow_bf16_reduced_precision_reduction": False,
                               "allow_fp16_reduced_precision_reduction": False},
              "triton_tiles": bi.GEMM_TILE_TABLE if bi else None, "rows": rows, "chunks": chunks, "shapes": {}, "steps": {}}
    for preset in presets:
        hidden, layers, vocab = PRESETS[preset]
        for dname in dtypes:
            dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dname]
            for si, (name, (n, k)) in enumerate(shapes(hidden, vocab).items()):
                w, x = inputs(torch, n, k, dtype, max(rows + [3 * max(chunks)]), 1000 + si)
                rec = {"N": n, "K": k, "cublas_us": {}, "triton_us": {}, "chunk_us": {}, "invariant": {}}
                for m in rows:
                    rec["cublas_us"][m] = round(graph_time(torch, lambda m=m, x=x, w=w: F.linear(x[:m], w)) * 1e6, 1)
                    if bi is not None:
                        rec["triton_us"][m] = round(graph_time(torch, lambda m=m, x=x, w=w: bi.linear(x[:m], w)) * 1e6, 1)
                for c in chunks:
                    rec["chunk_us"][c] = {m: round(graph_time(torch, lambda m=m, c=c, x=x, w=w: chunked_mm(torch, x[:m], w, c)) * 1e6, 1)
                                          for m in rows}
                    top = 3 * c
                    alone = torch.cat([chunked_mm(torch, x[r:r + 1], w, c) for r in range(top)])
                    bad = [b for b in range(1, top + 1) if not torch.equal(chunked_mm(torch, x[:b], w, c), alone[:b])]
                    graph_ok = {}
                    for m in (8, 128):
                        static_x = x[:m].clone()
                        chunked_mm(torch, static_x, w, c)
                        torch.cuda.synchronize()
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            static_y = chunked_mm(torch, static_x, w, c)
                        graph.replay()
                        torch.cuda.synchronize()
                        graph_ok[m] = bool(torch.equal(static_y, alone[:m] if m <= top else chunked_mm(torch, x[:m], w, c)))
                        del graph
                    rec["invariant"][c] = {"batches": f"1..{top}", "rows_differ_in_batches": bad[:10], "graph_equals_eager": graph_ok}
                    print(f"{preset} {dname} {name} C={c}: {rec['chunk_us'][c]} us (cuBLAS {rec['cublas_us']}, Triton {rec['triton_us']})"
                          f" invariant {not bad} graph {graph_ok}", file=sys.stderr, flush=True)
                result["shapes"][f"{preset}/{dname}/{name}"] = rec

            # one decode step: layers x (qkv, o, gate_up, down) + lm_head
            step = {}
            names = list(shapes(hidden, vocab))

            recs = {s: result["shapes"][f"{preset}/{dname}/{s}"] for s in names}
            weight = {s: 1 if s == "lm_head" else layers for s in names}
            # per shape: one C for both row counts (the rows never choose C), the least summed time
            best = {s: min(chunks, key=lambda c, r=recs[s]: sum(r["chunk_us"][c][m] for m in rows)) for s in names}
            for m in rows:
                step[m] = {"cublas_us": round(sum(recs[s]["cublas_us"][m] * weight[s] for s in names), 1),
                           "triton_us": round(sum(recs[s]["triton_us"][m] * weight[s] for s in names), 1) if bi is not None else None,
                           "chunk_us": {c: round(sum(recs[s]["chunk_us"][c][m] * weight[s] for s in names), 1) for c in chunks},
                           "chunk_best_per_shape_us": round(sum(recs[s]["chunk_us"][best[s]][m] * weight[s] for s in names), 1)}
            step["best_chunk_per_shape"] = best
            result["steps"][f"{preset}/{dname}"] = step
    child = subprocess.run([sys.executable, __file__, "--child", "--presets", args.presets, "--dtypes", args.dtypes, "--chunks", args.chunks],
                           capture_output=True, text=True, timeout=300)
    mine = digests(torch, presets, dtypes, chunks)
    theirs = json.loads(child.stdout.strip().splitlines()[-1]) if child.returncode == 0 else {}
    result["two_processes"] = {"compared": len(mine), "differ": sorted(key for key in mine if theirs.get(key) != mine[key])[:20],
                               "child_rc": child.returncode, "child_stderr": child.stderr[-500:]}
    result["choice"] = choose(result, presets, dtypes, chunks, rows)
    if args.table:
        with open(args.table, "w") as f:
            json.dump(result["choice"]["table"], f)
    for key, step in result["steps"].items():
        for m in rows:
            s = step[m]
            cs = "  ".join(f"C{c} {v}" for c, v in s["chunk_us"].items())
            print(f"{key:>16} M {m:>3}: cuBLAS {s['cublas_us']} us, Triton {s['triton_us']} us, chunked {cs}, "
                  f"per-shape best {s['chunk_best_per_shape_us']}", file=sys.stderr)
        print(f"{key:>16} best C per shape {step['best_chunk_per_shape']}", file=sys.stderr)
    print(f"two processes: {result['two_processes']['compared']} digests, differ {result['two_processes']['differ']}", file=sys.stderr)
    print(f"choice: {json.dumps(result['choice'])}", file=sys.stderr)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
