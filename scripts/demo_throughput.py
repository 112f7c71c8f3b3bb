#!/usr/bin/env python3
"""Rollout throughput of the demo engine: toy upstream, fastest standard path, zero-mismatch.

The figure the real cases report as "BI rollout overhead": generated tokens
per second of the zero-mismatch path against the model's fastest standard
rollout path, so the figure is the whole cost of the aligned path. Three arms
run interleaved in one process over the same release tree, weights and
requests (ratios, not absolute seconds, carry across machines):

  upstream       the toy engine's own kernels (TOY_BATCH_INVARIANT off): split-K,
                 split-KV and a chunked RMSNorm, slow on purpose;
  standard       the fastest standard path, written here and not in the upstream
                 trees (which are fixed inputs): the same engine and cache, with
                 F.rms_norm, one F.linear for q, k, v and one for gate, up,
                 torch.addmm for the projections that add a residual, F.silu,
                 F.scaled_dot_product_attention (is_causal for a prefill, a
                 length mask for decode), torch.log_softmax;
  zero_mismatch  the release tree's batch-invariant kernels (Triton on a GPU).

All three run eagerly (no CUDA graphs, no compilation): launching kernels is
part of the cost.

    python scripts/demo_throughput.py --rollout TREE [--device cuda] [--hidden 2048] [--profile]

--profile adds, after the timed runs, where the time goes: one untimed run
per arm counting the tensor operations it dispatches (each is a kernel
launch on a GPU; Triton kernels are not tensor operations and are counted by
the profiler only) and, on CUDA, one under torch.profiler summing the GPU
kernel time by kernel (kernels only: no CPU events). --profile-requests N
profiles the first N requests only (the figures are per token).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

ARMS = ("upstream", "standard", "zero_mismatch")


def standard_model_class(ToyModel):
    """ToyModel with the fastest standard kernels (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    class StandardModel(ToyModel):
        def __init__(self, cfg, weights, device, dtype):
            super().__init__(cfg, weights, device=device, dtype=dtype, batch_invariant=False)
            for i in range(cfg.num_layers):
                p = f"layers.{i}."
                self.w[p + "qkv_t"] = torch.cat([self.w[p + f"attn.{x}_proj.weight"] for x in "qkv"])
                self.w[p + "gate_up_t"] = torch.cat([self.w[p + "mlp.gate_proj.weight"], self.w[p + "mlp.up_proj.weight"]])
                self.w[p + "o_t"] = self.w[p + "attn.o_proj.weight"].t()
                self.w[p + "down_t"] = self.w[p + "mlp.down_proj.weight"].t()

        def _norm(self, x, name):
            return F.rms_norm(x, (x.shape[-1],), self.w[name], self.cfg.rms_eps)

        def _layer(self, i, x, attend):
            p, cfg = f"layers.{i}.", self.cfg
            qkv = F.linear(self._norm(x, p + "attn_norm.weight"), self.w[p + "qkv_t"]).view(x.shape[0], 3, cfg.num_heads, cfg.head_dim)
            a = attend(qkv[:, 0], qkv[:, 1], qkv[:, 2])
            x = torch.addmm(x, a.reshape(x.shape[0], -1), self.w[p + "o_t"])
            gate, up = F.linear(self._norm(x, p + "mlp_norm.weight"), self.w[p + "gate_up_t"]).split(cfg.intermediate_size, -1)
            return torch.addmm(x, F.silu(gate) * up, self.w[p + "down_t"])

        def _logits(self, x):
            return F.linear(self._norm(x, "norm.weight"), self.w["lm_head.weight"])

        @torch.no_grad()
        def prefill(self, ids, cache, slot):
            n = ids.shape[0]
            x = self._embed(ids, torch.arange(n, device=self.device))
            for i in range(self.cfg.num_layers):
                def attend(q, k, v, i=i):
                    cache.k[i, slot, :n] = k
                    cache.v[i, slot, :n] = v
                    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
                    return out.transpose(0, 1)
                x = self._layer(i, x, attend)
            cache.lengths[slot] = n
            return self._logits(x[-1:])[0]

        @torch.no_grad()
        def decode(self, ids, slots, cache):
            pos = torch.tensor([cache.lengths[s] for s in slots], device=self.device)
            slot_idx = torch.tensor(slots, device=self.device)
            max_len = max(cache.lengths[s] for s in slots) + 1
            mask = (torch.arange(max_len, device=self.device)[None, :] <= pos[:, None])[:, None, None, :]  # [B, 1, 1, L]
            x = self._embed(ids, pos)
            for i in range(self.cfg.num_layers):
                def attend(q, k, v, i=i):
                    cache.k[i, slot_idx, pos] = k
                    cache.v[i, slot_idx, pos] = v
                    keys, values = cache.k[i, slot_idx, :max_len], cache.v[i, slot_idx, :max_len]
                    out = F.scaled_dot_product_attention(q[:, :, None], keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask)
                    return out[:, :, 0]
                x = self._layer(i, x, attend)
            for s in slots:
                cache.lengths[s] += 1
            return self._logits(x)

    return StandardModel


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
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ", ".join(ARMS))
    p.add_argument("--profile", action="store_true", help="also count dispatched ops and (CUDA) sum kernel time per arm")
    p.add_argument("--profile-requests", type=int, default=0,
                   help="profile the first N requests only (0: all); per-token figures, so a few waves of --max-running suffice")
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        p.error(f"--arms: choose from {', '.join(ARMS)}")
    sys.path.insert(0, args.rollout)
    import torch
    from toy_rollout.engine import Engine, Request
    from toy_rollout.model import ToyModel
    from toy_rollout.weights import ModelConfig, random_weights

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads, intermediate_size=3 * args.hidden)
    weights = random_weights(cfg, seed=0)
    build = {
        "upstream": lambda: ToyModel(cfg, weights, device=args.device, dtype=dtype, batch_invariant=False),
        "standard": lambda: standard_model_class(ToyModel)(cfg, weights, args.device, dtype),
        "zero_mismatch": lambda: ToyModel(cfg, weights, device=args.device, dtype=dtype, batch_invariant=True),
    }
    models = {arm: build[arm]() for arm in arms}
    g = torch.Generator().manual_seed(0)
    requests = []
    for i in range(args.requests):
        length = int(torch.randint(1, args.prompt_len + 1, (1,), generator=g))
        requests.append(Request(f"r{i}", torch.randint(0, args.vocab, (length,), generator=g).tolist(), args.new_tokens))
    cuda = args.device.startswith("cuda")

    def run(arm: str, subset: list | None = None) -> tuple[float, int]:
        engine = Engine(models[arm], max_running=args.max_running, seed=0)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        done = engine.generate(requests if subset is None else subset)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start, sum(len(c.tokens) for c in done)

    for arm in arms:  # warm-up (Triton compiles its kernels here)
        seconds, tokens = run(arm)
        print(f"warm-up {arm}: {seconds:.2f} s", file=sys.stderr, flush=True)
    samples: dict[str, list[float]] = {arm: [] for arm in arms}
    for rep in range(args.reps):
        for arm in arms:
            seconds, tokens = run(arm)
            samples[arm].append(tokens / seconds)
            print(f"rep {rep} {arm}: {tokens / seconds:.1f} tok/s", file=sys.stderr, flush=True)
    tps = {arm: statistics.median(samples[arm]) for arm in arms if samples[arm]}
    result = {
        "device": torch.cuda.get_device_name() if cuda else args.device,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "dtype": args.dtype,
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "vocab": args.vocab,
        "requests": args.requests,
        "max_running": args.max_running,
        "new_tokens": args.new_tokens,
        "reps": args.reps,
        "tokens_per_s": {arm: round(v, 1) for arm, v in tps.items()},
        "runs": {arm: [round(x, 1) for x in samples[arm]] for arm in arms},
    }
    if "zero_mismatch" in tps:
        for base in ("standard", "upstream"):
            if base in tps:
                result[f"overhead_vs_{base}_percent"] = round(100 * (1 - tps["zero_mismatch"] / tps[base]), 1)
                result[f"throughput_ratio_vs_{base}"] = round(tps["zero_mismatch"] / tps[base], 4)
    print(json.dumps(result), flush=True)  # the timed figures first: a profile that fails or hangs cannot take them
    if args.profile:
        subset = requests[:args.profile_requests] if args.profile_requests > 0 else requests
        result["profile_requests"] = len(subset)
        result["profile"] = {arm: profile(lambda a: run(a, subset), arm, args.device) for arm in arms}
        print(json.dumps(result), flush=True)
    return 0


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


VIEW_OPS = {"view", "_unsafe_view", "slice", "select", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
            "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind", "lift_fresh", "reshape", "movedim"}


def profile(run, arm: str, device: str) -> dict:
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
            _, tokens = run(arm)
        out["ops"] = sum(count.ops.values())
        out["ops_per_token"] = round(out["ops"] / tokens, 1)
        out["top_ops"] = dict(count.ops.most_common(8))
        if device.startswith("cuda"):
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as torch_profile

            # kernels only: CPU events make the summary take minutes at batch 8, and no figure here uses them
            with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                seconds, tokens = run(arm)
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
