#!/usr/bin/env python3
"""Rollout throughput of the demo engine with the zero-mismatch kernels on and off.

The figure the real cases report as "BI rollout overhead": generated tokens
per second of the same release tree, batch-invariant path against the
upstream path, measured interleaved in one run (ratios, not absolute
seconds, carry across machines).

    python scripts/demo_throughput.py --rollout TREE [--device cuda] [--hidden 2048] [--profile]

--profile adds, after the timed runs, where the time goes: one untimed run
per path counting the tensor operations it dispatches (each is a kernel
launch on a GPU; at these sizes the engine is bound by launching them) and,
on CUDA, one under torch.profiler summing the GPU kernel time by kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollout", required=True, help="a built rollout tree (release branch)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--max-running", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="also count dispatched ops and (CUDA) sum kernel time per path")
    args = p.parse_args(argv)
    sys.path.insert(0, args.rollout)
    import torch
    from toy_rollout.engine import Engine, Request
    from toy_rollout.model import ToyModel
    from toy_rollout.weights import ModelConfig, random_weights

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads, intermediate_size=3 * args.hidden)
    weights = random_weights(cfg, seed=0)
    models = {flag: ToyModel(cfg, weights, device=args.device, dtype=dtype, batch_invariant=flag) for flag in (False, True)}
    g = torch.Generator().manual_seed(0)
    requests = [Request(f"r{i}", torch.randint(0, args.vocab, (int(torch.randint(1, args.prompt_len + 1, (1,), generator=g)),), generator=g).tolist(), args.new_tokens) for i in range(args.requests)]

    def run(flag: bool) -> tuple[float, int]:
        engine = Engine(models[flag], max_running=args.max_running, seed=0)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        done = engine.generate(requests)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start, sum(len(c.tokens) for c in done)

    run(False), run(True)  # warm-up
    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.reps):
        for flag in (False, True):
            seconds, tokens = run(flag)
            samples[flag].append(tokens / seconds)
    upstream, invariant = statistics.median(samples[False]), statistics.median(samples[True])
    result = {
        "device": args.device if not args.device.startswith("cuda") else torch.cuda.get_device_name(),
        "dtype": args.dtype, "hidden": args.hidden, "layers": args.layers, "requests": args.requests, "max_running": args.max_running,
        "tokens_per_s_upstream": round(upstream, 1), "tokens_per_s_batch_invariant": round(invariant, 1),
        "throughput_ratio": round(invariant / upstream, 4), "overhead_percent": round(100 * (1 - invariant / upstream), 1),
        "runs": {"upstream": [round(x, 1) for x in samples[False]], "batch_invariant": [round(x, 1) for x in samples[True]]},
    }
    if args.profile:
        result["profile"] = {name: profile(run, flag, args.device) for name, flag in (("upstream", False), ("batch_invariant", True))}
    print(json.dumps(result))
    return 0


VIEW_OPS = {"view", "_unsafe_view", "slice", "select", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
            "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind", "lift_fresh", "reshape", "movedim"}


def profile(run, flag: bool, device: str) -> dict:
    """Dispatched non-view ops of one run (kernel launches, roughly) and, on CUDA, its kernel time by kernel."""
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in VIEW_OPS:
                self.ops[name] += 1
            return func(*args, **(kwargs or {}))

    out: dict = {}
    try:
        with Count() as count:
            _, tokens = run(flag)
        out["ops"] = sum(count.ops.values())
        out["ops_per_token"] = round(out["ops"] / tokens, 1)
        out["top_ops"] = dict(count.ops.most_common(8))
        if device.startswith("cuda"):
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as torch_profile

            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                seconds, tokens = run(flag)
            events = prof.key_averages()
            # Kernels are entries of their own; where a build lists none, the ops' own device time is the same sum.
            kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
            out["kernel_time_from"] = "kernels" if kernels else "ops"
            kernels = kernels or list(events)
            us = {e.key: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) for e in kernels}
            out["kernels"] = sum(e.count for e in kernels)
            out["kernel_ms"] = round(sum(us.values()) / 1000, 2)
            out["kernel_us_per_token"] = round(sum(us.values()) / tokens, 2)
            out["wall_ms_profiled"] = round(seconds * 1000, 1)
            out["top_kernels_ms"] = {k[:80]: round(v / 1000, 2) for k, v in sorted(us.items(), key=lambda kv: -kv[1])[:8]}
    except Exception as exc:  # noqa: BLE001 - the timed figures above must come back even if profiling fails
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    sys.exit(main())
