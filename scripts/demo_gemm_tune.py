#!/usr/bin/env python3
"""Tiles of the zero-mismatch GEMM chosen once per weight shape, measured against cuBLAS, recorded as evidence.

For every weight shape of the model (q/k/v, o, gate/up, down, lm_head) and
dtype, each candidate tile set (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages,
programs; see toy_rollout.batch_invariant.gemm_tiles) is:

  checked  a row alone gives the same bits as that row inside 3, 129 and 300
           rows (the kernel stays batch-invariant with these tiles);
  timed    at every --rows value (the decode batches), each call captured 10
           times in a CUDA graph and replayed (no launch gaps), median of 5;
           cuBLAS (F.linear) on the same shapes is timed beside it.

One tile set per shape for all row counts (the rows never choose a tile): the
one with the least total time over --rows. The winners go to --table as the
JSON of TOY_BI_GEMM_TILES (both trees read it; the rollout and the trainer
must run with the same table). Also probed: whether cuBLAS itself gives a row
the same bits alone and inside a batch (its default settings, split-K free to
change with the row count), per shape.

    python scripts/demo_gemm_tune.py --rollout TREE --preset gpu-bound --rows 8,128 --table tiles.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

CANDIDATES = {
    "tensor": [(64, 64, 64, 4, 4, 528), (128, 64, 64, 4, 4, 528), (64, 128, 64, 4, 4, 528), (128, 128, 64, 8, 3, 528),
               (64, 64, 64, 4, 4, 1056), (64, 128, 64, 4, 4, 264)],
    "ieee": [(16, 64, 32, 4, 3, 528), (32, 64, 32, 4, 3, 528), (16, 128, 32, 4, 3, 528), (16, 64, 32, 4, 3, 1056)],
}
PRESETS = {"small": (2048, 4, 512), "gpu-bound": (4096, 8, 32000)}  # hidden, layers, vocab


def shapes(hidden: int, vocab: int) -> dict[str, tuple[int, int]]:
    """name -> (N, K) of the model's GEMMs (intermediate = 3 * hidden, q/k/v and gate/up concatenated)."""
    f = 3 * hidden
    return {"qkv": (3 * hidden, hidden), "o": (hidden, hidden), "gate_up": (2 * f, hidden), "down": (hidden, f), "lm_head": (vocab, hidden)}


def graph_time(torch, fn, calls: int = 10, reps: int = 5) -> float:
    """Seconds per call of fn, from replays of a CUDA graph of `calls` calls."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000 / calls)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollout", required=True)
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpu-bound")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--rows", default="8,128")
    p.add_argument("--shapes", default="", help="comma subset of qkv, o, gate_up, down, lm_head (default all)")
    p.add_argument("--table", help="write the winners here as TOY_BI_GEMM_TILES JSON")
    args = p.parse_args(argv)
    sys.path.insert(0, args.rollout)
    import torch
    import torch.nn.functional as F
    from toy_rollout import batch_invariant as bi

    hidden, _, vocab = PRESETS[args.preset]
    rows = [int(r) for r in args.rows.split(",")]
    todo = shapes(hidden, vocab)
    if args.shapes:
        todo = {k: v for k, v in todo.items() if k in args.shapes.split(",")}
    g = torch.Generator(device="cuda").manual_seed(0)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": bi.triton.__version__,
              "preset": args.preset, "rows": rows, "shapes": {}, "table": {}}
    table = {}
    for dtype_name in args.dtypes.split(","):
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
        kind = "ieee" if dtype == torch.float32 else "tensor"
        for name, (n, k) in todo.items():
            w = torch.randn(n, k, generator=g, device="cuda", dtype=dtype) / k ** 0.5
            xs = {m: torch.randn(m, k, generator=g, device="cuda", dtype=dtype) for m in rows + [3, 129, 300]}
            elem = torch.finfo(dtype).bits // 8
            rec = {"N": n, "K": k, "kind": kind, "cublas_us": {}, "cublas_row_invariant": {}, "candidates": []}
            for m in rows:
                rec["cublas_us"][m] = round(graph_time(torch, lambda m=m, xs=xs, w=w: F.linear(xs[m], w)) * 1e6, 1)
            alone = F.linear(xs[3][:1], w)
            for m in (2, 3, 8, 16, 64, 128, 129, 300):
                x = xs.get(m)
                x = x if x is not None else torch.randn(m, k, generator=g, device="cuda", dtype=dtype)
                x[0] = xs[3][0]
                rec["cublas_row_invariant"][m] = bool(torch.equal(F.linear(x, w)[0], alone[0]))
            for tiles in CANDIDATES[kind]:
                bi.GEMM_TILE_TABLE = {f"{kind}:{n}x{k}": tiles}
                cand = {"tiles": list(tiles)}
                try:
                    row = xs[3][:1]
                    ref = bi.linear(row, w)
                    cand["invariant"] = all(torch.equal(bi.linear(torch.cat([xs[m][:pos], row, xs[m][pos + 1:]]), w)[pos], ref[0])
                                            for m, pos in ((3, 1), (129, 100), (300, 299)))
                    cand["us"] = {m: round(graph_time(torch, lambda m=m, xs=xs, w=w: bi.linear(xs[m], w)) * 1e6, 1) for m in rows}
                    cand["GBps"] = {m: round((n * k + m * k + m * n) * elem / (cand["us"][m] * 1e-6) / 1e9, 1) for m in rows}
                except Exception as exc:  # noqa: BLE001 - a candidate that does not compile (shared memory) is recorded, not fatal
                    cand["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rec["candidates"].append(cand)
                print(f"{dtype_name} {name} {tiles}: {cand.get('us', cand.get('error'))} invariant {cand.get('invariant')}",
                      file=sys.stderr, flush=True)
            ok = [c for c in rec["candidates"] if c.get("invariant") and "us" in c]
            if ok:
                best = min(ok, key=lambda c: sum(c["us"].values()))
                rec["best"] = best["tiles"]
                default = next(c for c in rec["candidates"] if tuple(c["tiles"]) == bi.GEMM_TILES[kind])
                rec["best_vs_default"] = {m: round(default["us"][m] / best["us"][m], 3) for m in rows} if "us" in default else None
                if tuple(best["tiles"]) != bi.GEMM_TILES[kind]:
                    table[f"{kind}:{n}x{k}"] = best["tiles"]
            result["shapes"][f"{dtype_name}/{name}"] = rec
            bi.GEMM_TILE_TABLE = {}
    result["table"] = table
    if args.table:
        with open(args.table, "w") as f:
            json.dump(table, f)
    for key, rec in result["shapes"].items():
        line = [f"{key:>14} N {rec['N']:>5} K {rec['K']:>5}"]
        for m in rows:
            best = next((c for c in rec["candidates"] if c["tiles"] == rec.get("best")), None)
            line.append(f"M {m}: cuBLAS {rec['cublas_us'][m]} us, best {best['us'][m] if best else '-'} us")
        line.append(f"best {rec.get('best')} x{rec.get('best_vs_default')} vs default; cuBLAS row-invariant {rec['cublas_row_invariant']}")
        print("  ".join(line), file=sys.stderr)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
