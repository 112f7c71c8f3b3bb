#!/usr/bin/env python3
"""Rollout throughput of the demo engine against the hardware: standard arm, zero-mismatch arm, roofline.

The figure the real cases report as "BI rollout overhead": generated tokens
per second of the zero-mismatch path against the model's fastest standard
rollout path, so the figure is the whole cost of the aligned path. The arms
run interleaved in one process over the same release tree, weights and
requests (ratios, not absolute seconds, carry across machines):

  upstream         the toy engine's own kernels (TOY_BATCH_INVARIANT off): split-K,
                   split-KV and a chunked RMSNorm, slow on purpose; eager (its
                   decode step reads cache lengths on the host);
  standard         the fastest standard path, written here and not in the upstream
                   trees (which are fixed inputs): the same engine, with F.rms_norm,
                   one F.linear for q, k, v and one for gate, up, torch.addmm for the
                   projections that add a residual, F.silu, torch.log_softmax, and
                   decode attention reading the KV cache in place (as paged decode
                   kernels do): F.scaled_dot_product_attention over the cache's
                   slots as they are, a length mask per slot, no copy of the keys;
  standard_varlen  the same, decode attention by the fused varlen kernels PyTorch
                   ships, reading the cache in place with a key count per slot
                   instead of a mask: FlashAttention (seqused_k) for bf16, the
                   memory-efficient kernel (seqlen_k) for fp32; dropped, with the
                   reason in the JSON, where a probe finds them missing or wrong;
  standard_gather  the earlier standard arm, labelled extra: the same, but decode
                   gathers the running rows of the cache (a copy) first; eager;
  zero_mismatch    the release tree's batch-invariant kernels (Triton on a GPU).

--cuda-graphs 1 (the default on a GPU) replays every decode step of the
standard and zero_mismatch arms as a CUDA graph of its batch-size bucket
(toy_rollout.graphs, rollout patch 0008), as rollout engines do; 0 runs them
eagerly. Two measurements, both interleaved:

  engine  Engine.generate() of --requests requests (prompts of 1..--prompt-len
          tokens, --new-tokens each) with --max-running rows per decode step:
          tokens/s, prefill and sampling included;
  step    one decode step of B = --max-running sequences holding --step-context
          keys each, replayed (graphs) or run (eager) --step-iters times per
          sample: time per step, tokens/s = B / step, and the roofline: the bytes a
          step must read (weights, once, and each sequence's keys and values) and
          the FLOPs it must do (2 per weight per row, attention) over the device's
          peak HBM bandwidth and matrix rate (table PEAKS; a device-to-device copy
          is measured too). roofline % = the larger of the two floor times over
          the measured time.

Several --dtype and --max-running values (comma lists) run in one process, one
interleaved measurement per (dtype, batch). --preset gpu-bound is the model
where the GPU is the bottleneck (hidden 4096, 8 layers, 32 heads, vocab 32000);
small is the earlier demo model (hidden 2048, 4 layers, 16 heads, vocab 512).
The last line of stdout is JSON; a table goes to stderr.

    python scripts/demo_throughput.py --rollout TREE --device cuda --preset gpu-bound --dtype bf16,fp32 --max-running 8,128

--profile adds, after the timed runs, where the time goes: one untimed run
per arm counting the tensor operations it dispatches (each is a kernel
launch on a GPU; Triton kernels are not tensor operations and are counted by
the profiler only) and, on CUDA, one under torch.profiler summing the GPU
kernel time by kernel (kernels only: no CPU events). --profile-requests N
profiles the first N requests only (the figures are per token).

--moe (a rollout tree of demo-moe): the mixture-of-experts model
(toy_rollout.moe.MoEModel; --experts, --top-k, --intermediate per expert;
--preset gpu-bound-moe: hidden 4096, 8 layers, 32 heads, vocab 32000, 8
experts of 2048, top-2). Its standard arms keep the attention above and run
the MoE layer the fastest standard ways that a CUDA graph can capture:
standard (router softmax and top-k, the token copies sorted by expert, one
PyTorch grouped GEMM, torch._grouped_mm, per projection over all experts;
dropped with the reason where a probe finds it missing or wrong) and
standard_dense (per-expert cuBLAS GEMMs over every row of the step, the
routing weights zero for the rows not routed there: no host synchronisation
for the row counts, and a decode step reads every expert's weights anyway);
both add the k weighted outputs with torch.sum. The roofline counts the
experts a step must read (the expected number of distinct experts of B x k
routing choices) and the FLOPs of the routed rows only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ARMS = ("upstream", "standard", "standard_varlen", "standard_gather", "standard_dense", "zero_mismatch")
PRESETS = {
    "small": {"hidden": 2048, "layers": 4, "heads": 16, "vocab": 512},
    "gpu-bound": {"hidden": 4096, "layers": 8, "heads": 32, "vocab": 32000},
    "gpu-bound-moe": {"hidden": 4096, "layers": 8, "heads": 32, "vocab": 32000, "intermediate": 2048, "moe": True,
                      "experts": 8, "top_k": 2},
}
# Datasheet peaks (dense): HBM GB/s, bf16 tensor-core TFLOP/s, fp32 (FMA, no tf32) TFLOP/s; matched on the device name.
PEAKS = (
    ("H200", {"hbm_GBps": 4800, "bf16_TFLOPs": 989.4, "fp32_TFLOPs": 66.9}),
    ("H100 PCIe", {"hbm_GBps": 2000, "bf16_TFLOPs": 756.0, "fp32_TFLOPs": 51.2}),
    ("H100 NVL", {"hbm_GBps": 3900, "bf16_TFLOPs": 835.5, "fp32_TFLOPs": 60.0}),
    ("H100", {"hbm_GBps": 3350, "bf16_TFLOPs": 989.4, "fp32_TFLOPs": 66.9}),  # SXM5 ("NVIDIA H100 80GB HBM3")
)


def device_peaks(name: str) -> dict | None:
    for key, peaks in PEAKS:
        if key in name:
            return {"table": key, **peaks}
    return None


def step_cost(cfg, batch: int, context: int, elem: int, moe=None) -> dict:
    """What one decode step of `batch` sequences with `context` cached keys each must read and compute.

    moe (experts, top_k): each layer's MLP is experts of cfg.intermediate_size; the step reads the router and the
    expected number of distinct experts that batch x top_k uniform routing choices touch, and computes top_k experts
    per row."""
    h, f, v, n = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_layers
    gemm_weights = n * (4 * h * h + 3 * h * f) + v * h
    row_weights = gemm_weights  # weights one row multiplies by
    if moe is not None:
        experts, top_k = moe
        touched = experts * (1 - (1 - top_k / experts) ** batch)
        gemm_weights = n * (4 * h * h + experts * h + touched * 3 * h * f) + v * h
        row_weights = n * (4 * h * h + experts * h + top_k * 3 * h * f) + v * h
    weight_bytes = elem * (gemm_weights + (2 * n + 1) * h)
    keys = context + 1  # the cached keys and the step's own
    kv_bytes = elem * batch * keys * n * 2 * h
    flops = 2 * batch * row_weights + n * batch * 4 * keys * h
    return {"weight_bytes": weight_bytes, "kv_bytes": kv_bytes, "bytes": weight_bytes + kv_bytes, "flops": flops}


def roofline(cost: dict, seconds: float, peaks: dict | None, dtype: str) -> dict:
    out = {"GBps": round(cost["bytes"] / seconds / 1e9, 1), "TFLOPs": round(cost["flops"] / seconds / 1e12, 2)}
    if peaks:
        floor_mem = cost["bytes"] / (peaks["hbm_GBps"] * 1e9)
        floor_flop = cost["flops"] / (peaks[f"{dtype}_TFLOPs"] * 1e12)
        out["hbm_percent"] = round(100 * floor_mem / seconds, 1)
        out["flop_percent"] = round(100 * floor_flop / seconds, 1)
        out["roofline_percent"] = round(100 * max(floor_mem, floor_flop) / seconds, 1)
        out["bound"] = "memory" if floor_mem >= floor_flop else "compute"
    return out


def varlen_decode_attention(torch, q, k, v, seen, cu_q, cu_k):
    """One query per cache slot over its first seen[s] keys, in place: q [S, heads, d], k, v [S, L, heads, d]."""
    slots, length, heads, d = k.shape
    if q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._flash_attention_forward(q, k.view(slots * length, heads, d), v.view(slots * length, heads, d), cu_q, cu_k,
                                                       1, length, 0.0, False, False, seqused_k=seen)[0]
    return torch.ops.aten._efficient_attention_forward(q[None], k.view(1, slots * length, heads, d), v.view(1, slots * length, heads, d),
                                                       None, cu_q, cu_k, 1, length, 0.0, 0, False, seqlen_k=seen)[0][0]


def probe_varlen(torch, device, dtype) -> str | None:
    """None if varlen_decode_attention runs here and agrees with a masked SDPA, else why not."""
    import torch.nn.functional as F

    try:
        g = torch.Generator(device=device).manual_seed(3)
        slots, length, heads, d = 5, 40, 4, 128
        k, v = (torch.randn(slots, length, heads, d, generator=g, device=device, dtype=dtype) for _ in range(2))
        q = torch.randn(slots, heads, d, generator=g, device=device, dtype=dtype)
        seen = torch.tensor([1, 7, 40, 33, 16], dtype=torch.int32, device=device)
        cu_q = torch.arange(slots + 1, dtype=torch.int32, device=device)
        out = varlen_decode_attention(torch, q, k, v, seen, cu_q, cu_q * length)
        mask = (torch.arange(length, device=device)[None, :] < seen[:, None])[:, None, None, :]
        ref = F.scaled_dot_product_attention(q[:, :, None].float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), attn_mask=mask)[:, :, 0]
        err = float((out.float() - ref).norm() / ref.norm())
        return None if err < (1e-5 if dtype == torch.float32 else 2e-2) else f"differs from a masked SDPA by {err:.2e}"
    except Exception as exc:  # noqa: BLE001 - a missing kernel drops the arm, with the reason
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def moe_standard(torch, F, h, router, w13, w2, top_k: int, grouped: bool):
    """The standard MoE layer of the --moe arms, without host synchronisation: h [T, hidden]; w13 [E, 2f, hidden],
    w2 [E, hidden, f]. grouped: token copies sorted by expert, torch._grouped_mm per projection; else every expert
    on every row (cuBLAS), unrouted rows weighted 0. The k weighted outputs added by torch.sum."""
    experts, inter = w13.shape[0], w2.shape[-1]
    probs = torch.softmax(F.linear(h, router).float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(h.dtype)
    if grouped:
        flat = ids.flatten()
        order = torch.argsort(flat)
        counts = torch.zeros(experts, dtype=torch.int64, device=h.device).index_add_(0, flat, torch.ones_like(flat))
        offs = torch.cumsum(counts, 0).to(torch.int32)  # (bincount would read its length on the host)
        gate, up = torch._grouped_mm(h[order // top_k], w13.transpose(-2, -1), offs=offs).split(inter, -1)
        y = torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)
        slots = torch.empty_like(y)
        slots[order] = y
        return (slots.view(*ids.shape, -1) * weights[..., None]).sum(-2)
    dense = torch.zeros(h.shape[0], experts, dtype=h.dtype, device=h.device).scatter_(1, ids, weights)
    out = None
    for e in range(experts):
        gate, up = F.linear(h, w13[e]).split(inter, -1)
        y = F.linear(F.silu(gate) * up, w2[e]) * dense[:, e:e + 1]
        out = y if out is None else out + y
    return out


def probe_grouped_mm(torch, device, dtype) -> str | None:
    """None if torch._grouped_mm runs here on unaligned groups (some empty) and agrees with per-expert GEMMs."""
    import torch.nn.functional as F

    try:
        g = torch.Generator(device=device).manual_seed(5)
        h = torch.randn(13, 256, generator=g, device=device, dtype=dtype)
        router = torch.randn(8, 256, generator=g, device=device, dtype=dtype)
        w13 = torch.randn(8, 2 * 128, 256, generator=g, device=device, dtype=dtype) / 16
        w2 = torch.randn(8, 256, 128, generator=g, device=device, dtype=dtype) / 12
        a = moe_standard(torch, F, h, router, w13, w2, 2, grouped=True).float()
        b = moe_standard(torch, F, h, router, w13, w2, 2, grouped=False).float()
        err = float((a - b).norm() / b.norm())
        return None if err < 2e-2 else f"differs from per-expert GEMMs by {err:.2e}"
    except Exception as exc:  # noqa: BLE001 - a missing kernel drops the arm, with the reason
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def standard_model_class(ToyModel, gather: bool = False, varlen: bool = False, moe=None):
    """ToyModel with the fastest standard kernels (see the module docstring); gather: the copying decode;
    varlen: decode attention by varlen_decode_attention; moe ("grouped" or "dense", experts, top_k): an MoEModel's
    weights, its MoE layer by moe_standard."""
    import torch
    import torch.nn.functional as F

    class StandardModel(ToyModel):
        def __init__(self, cfg, weights, device, dtype):
            super().__init__(cfg, weights, device=device, dtype=dtype, batch_invariant=False)
            for i in range(cfg.num_layers):
                p = f"layers.{i}."
                self.w[p + "qkv_t"] = torch.cat([self.w[p + f"attn.{x}_proj.weight"] for x in "qkv"])
                self.w[p + "o_t"] = self.w[p + "attn.o_proj.weight"].t()
                for x in ("q", "k", "v"):  # only the concatenated copies are used: free the rest
                    del self.w[p + f"attn.{x}_proj.weight"]
                if moe is not None:
                    m = p + "moe."
                    experts = range(moe[1])
                    self.w[m + "w13"] = torch.stack([torch.cat([self.w.pop(f"{m}experts.{e}.gate_proj.weight"),
                                                                self.w.pop(f"{m}experts.{e}.up_proj.weight")]) for e in experts])
                    self.w[m + "w2"] = torch.stack([self.w.pop(f"{m}experts.{e}.down_proj.weight") for e in experts])
                    continue
                self.w[p + "gate_up_t"] = torch.cat([self.w[p + "mlp.gate_proj.weight"], self.w[p + "mlp.up_proj.weight"]])
                self.w[p + "down_t"] = self.w[p + "mlp.down_proj.weight"].t()
                del self.w[p + "mlp.gate_proj.weight"], self.w[p + "mlp.up_proj.weight"]

        @property
        def supports_cuda_graphs(self) -> bool:
            return self.device.type == "cuda" and not gather

        def _norm(self, x, name):
            return F.rms_norm(x, (x.shape[-1],), self.w[name], self.cfg.rms_eps)

        def _layer(self, i, x, attend):
            p, cfg = f"layers.{i}.", self.cfg
            qkv = F.linear(self._norm(x, p + "attn_norm.weight"), self.w[p + "qkv_t"]).view(x.shape[0], 3, cfg.num_heads, cfg.head_dim)
            a = attend(qkv[:, 0], qkv[:, 1], qkv[:, 2])
            x = torch.addmm(x, a.reshape(x.shape[0], -1), self.w[p + "o_t"])
            if moe is not None:
                m = p + "moe."
                return x + moe_standard(torch, F, self._norm(x, p + "mlp_norm.weight"), self.w[m + "router.weight"],
                                        self.w[m + "w13"], self.w[m + "w2"], moe[2], grouped=moe[0] == "grouped")
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
        def decode_step(self, ids, slot_idx, pos, cache):
            """In place: every slot of the cache is one SDPA batch entry (a view, no copy), masked to its length."""
            slots, max_len = cache.k.shape[1], cache.k.shape[2]
            seen = torch.ones(slots, dtype=torch.int32, device=self.device)  # idle slots see one key (no empty row)
            seen[slot_idx] = (pos + 1).to(torch.int32)
            if varlen:
                cu_q = torch.arange(slots + 1, dtype=torch.int32, device=self.device)
                cu_k = cu_q * max_len
            else:
                mask = (torch.arange(max_len, device=self.device)[None, :] < seen[:, None])[:, None, None, :]  # [S, 1, 1, L]
            x = self._embed(ids, pos)
            for i in range(self.cfg.num_layers):
                def attend(q, k, v, i=i):
                    cache.k[i, slot_idx, pos] = k
                    cache.v[i, slot_idx, pos] = v
                    queries = q.new_zeros(slots, *q.shape[1:])
                    queries[slot_idx] = q
                    if varlen:
                        return varlen_decode_attention(torch, queries, cache.k[i], cache.v[i], seen, cu_q, cu_k)[slot_idx]
                    out = F.scaled_dot_product_attention(queries[:, :, None], cache.k[i].transpose(1, 2), cache.v[i].transpose(1, 2),
                                                         attn_mask=mask)
                    return out[slot_idx, :, 0]
                x = self._layer(i, x, attend)
            return self._logits(x)

        @torch.no_grad()
        def decode(self, ids, slots, cache):
            if not gather:
                return super().decode(ids, slots, cache)
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


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollout", required=True, help="a built rollout tree (release branch)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bf16", help="fp32, bf16 or a comma list (one interleaved measurement each)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="model size (overrides --hidden --layers --heads --vocab)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=None, help="MLP size, or each expert's with --moe (default 3 * hidden)")
    p.add_argument("--moe", action="store_true", help="the mixture-of-experts model (a rollout tree of demo-moe)")
    p.add_argument("--experts", type=int, default=8, help="--moe: experts per layer")
    p.add_argument("--top-k", type=int, default=2, help="--moe: experts per token")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--max-running", default="64", help="rows per decode step at most, or a comma list")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--arms", default="upstream,standard,zero_mismatch", help="comma-separated subset of " + ", ".join(ARMS))
    p.add_argument("--cuda-graphs", choices=["auto", "0", "1"], default="auto",
                   help="decode steps as CUDA graphs (standard and zero_mismatch arms); auto: on a GPU")
    p.add_argument("--engine", choices=["0", "1"], default="1", help="the engine measurement (generate())")
    p.add_argument("--step", choices=["auto", "0", "1"], default="auto", help="the decode-step measurement and roofline (auto: on a GPU)")
    p.add_argument("--step-context", type=int, default=0, help="cached keys per sequence in the step measurement (0: prompt-len + new-tokens)")
    p.add_argument("--step-iters", type=int, default=20, help="steps per timed sample")
    p.add_argument("--profile", action="store_true", help="also count dispatched ops and (CUDA) sum kernel time per arm")
    p.add_argument("--profile-requests", type=int, default=0,
                   help="profile the first N requests only (0: all); per-token figures, so a few waves of --max-running suffice")
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        p.error(f"--arms: choose from {', '.join(ARMS)}")
    dtypes = [d for d in args.dtype.split(",") if d]
    if not dtypes or set(dtypes) - {"fp32", "bf16"}:
        p.error("--dtype: fp32, bf16 or a comma list of them")
    batches = _ints(args.max_running)
    for key, value in PRESETS.get(args.preset, {}).items():
        setattr(args, key, value)
    sys.path.insert(0, args.rollout)
    import torch
    from toy_rollout.engine import Engine, Request
    from toy_rollout.model import ToyModel
    from toy_rollout.weights import ModelConfig, random_weights

    cuda = args.device.startswith("cuda")
    graphs = cuda if args.cuda_graphs == "auto" else args.cuda_graphs == "1"
    if graphs and not cuda:
        p.error("--cuda-graphs 1 needs --device cuda")
    do_step = cuda if args.step == "auto" else args.step == "1"
    context = args.step_context or args.prompt_len + args.new_tokens
    inter = args.intermediate or 3 * args.hidden
    cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                      intermediate_size=inter, max_positions=max(256, args.prompt_len + args.new_tokens, context + 1))
    moe = None
    if args.moe:
        from toy_rollout import moe as moe_mod

        moe = moe_mod.MoEConfig(num_experts=args.experts, top_k=args.top_k)
        weights = moe_mod.random_moe_weights(cfg, moe, seed=0)
    else:
        weights = random_weights(cfg, seed=0)
    g = torch.Generator().manual_seed(0)
    requests = []
    for i in range(args.requests):
        length = int(torch.randint(1, args.prompt_len + 1, (1,), generator=g))
        requests.append(Request(f"r{i}", torch.randint(0, args.vocab, (length,), generator=g).tolist(), args.new_tokens))
    device_name = torch.cuda.get_device_name() if cuda else args.device
    peaks = device_peaks(device_name) if cuda else None
    result = {
        "device": device_name, "torch": torch.__version__, "cuda": torch.version.cuda, "triton": _triton_version(),
        "hidden": args.hidden, "layers": args.layers, "heads": args.heads, "vocab": args.vocab, "intermediate": inter,
        "moe": {"experts": args.experts, "top_k": args.top_k} if args.moe else None,
        "preset": args.preset, "requests": args.requests, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "reps": args.reps, "arms": arms, "cuda_graphs": graphs, "baseline": "the fastest standard arm (best_standard_arm)",
        "peaks": peaks, "copy_GBps": _copy_bandwidth(torch, args.device) if cuda else None,
        "gemm_tiles": json.loads(os.environ.get("TOY_BI_GEMM_TILES") or "{}") or None,
        "gemm_dtype": os.environ.get("TOY_BI_GEMM_DTYPE") or "auto",
        "gemm_backend": os.environ.get("TOY_BI_GEMM_BACKEND") or "auto",
        "gemm_rows": json.loads(os.environ.get("TOY_BI_GEMM_ROWS") or "{}") or None, "configs": [],
    }
    for dtype_name in dtypes:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        dtype_arms = list(arms)
        if "standard_varlen" in arms:
            why = probe_varlen(torch, args.device, dtype) if cuda else "needs a GPU"
            if why:
                result.setdefault("dropped", {})[f"{dtype_name}/standard_varlen"] = why
                dtype_arms.remove("standard_varlen")
                print(f"standard_varlen dropped for {dtype_name}: {why}", file=sys.stderr, flush=True)
        if moe is not None and "standard" in arms:
            why = probe_grouped_mm(torch, args.device, dtype) if cuda else "needs a GPU"
            if why:
                result.setdefault("dropped", {})[f"{dtype_name}/standard"] = f"torch._grouped_mm: {why}"
                dtype_arms.remove("standard")
                print(f"standard (grouped GEMM) dropped for {dtype_name}: {why}", file=sys.stderr, flush=True)
        models = {arm: _build(arm, ToyModel, cfg, weights, args.device, dtype, moe) for arm in dtype_arms}
        arm_graphs = {arm: graphs and bool(getattr(models[arm], "supports_cuda_graphs", False)) for arm in dtype_arms}
        for batch in batches:
            rec = {"dtype": dtype_name, "batch": batch, "graphs": arm_graphs}
            if args.engine == "1":
                rec["engine"] = _engine_run(torch, Engine, models, dtype_arms, arm_graphs, requests, batch, args, cuda)
            if do_step:
                rec["step"] = _step_run(torch, models, dtype_arms, arm_graphs, cfg, batch, context, args, peaks, dtype_name,
                                        (moe.num_experts, moe.top_k) if moe is not None else None)
            result["configs"].append(rec)
            print(f"done {dtype_name} batch {batch}", file=sys.stderr, flush=True)
            if args.profile:
                subset = requests[:args.profile_requests] if args.profile_requests > 0 else requests
                rec["profile_requests"] = len(subset)

                def run(arm, subset=subset, models=models, batch=batch, arm_graphs=arm_graphs):
                    engine = Engine(models[arm], max_running=batch, seed=0, cuda_graphs=arm_graphs[arm])
                    return _timed(torch, engine, subset, cuda)

                rec["profile"] = {arm: profile(run, arm, args.device) for arm in dtype_arms}
        models.clear()
        if cuda:
            torch.cuda.empty_cache()
    if len(result["configs"]) == 1 and "engine" in result["configs"][0]:  # the earlier one-configuration keys
        result.update(result["configs"][0]["engine"])
    print(table(result), file=sys.stderr, flush=True)
    print(json.dumps(result), flush=True)
    return 0


def _build(arm: str, ToyModel, cfg, weights, device, dtype, moe=None):
    if moe is not None:
        if arm in ("standard", "standard_dense"):
            kind = ("grouped" if arm == "standard" else "dense", moe.num_experts, moe.top_k)
            return standard_model_class(ToyModel, moe=kind)(cfg, weights, device, dtype)
        if arm not in ("upstream", "zero_mismatch"):
            raise SystemExit(f"error: --moe arms are upstream, standard, standard_dense and zero_mismatch, not {arm}")
        from toy_rollout.moe import MoEModel

        return MoEModel(cfg, moe, weights, device=device, dtype=dtype, batch_invariant=arm == "zero_mismatch")
    if arm == "standard_dense":
        raise SystemExit("error: the standard_dense arm is an MoE arm (--moe)")
    if arm.startswith("standard"):
        return standard_model_class(ToyModel, gather=arm == "standard_gather", varlen=arm == "standard_varlen")(cfg, weights, device, dtype)
    return ToyModel(cfg, weights, device=device, dtype=dtype, batch_invariant=arm == "zero_mismatch")


def _timed(torch, engine, requests, cuda: bool) -> tuple[float, int]:
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    done = engine.generate(requests)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, sum(len(c.tokens) for c in done)


def _overheads(tps: dict) -> dict:
    """Overhead of the zero-mismatch arm against each other arm, and against the fastest standard arm (named)."""
    out = {}
    standard = {arm: v for arm, v in tps.items() if arm.startswith("standard")}
    if "zero_mismatch" in tps and standard:
        best = max(standard, key=standard.get)
        out["best_standard_arm"] = best
        out["overhead_vs_best_standard_percent"] = round(100 * (1 - tps["zero_mismatch"] / tps[best]), 1)
    if "zero_mismatch" in tps:
        for base in ("standard", "standard_varlen", "standard_gather", "upstream"):
            if base in tps:
                out[f"overhead_vs_{base}_percent"] = round(100 * (1 - tps["zero_mismatch"] / tps[base]), 1)
                out[f"throughput_ratio_vs_{base}"] = round(tps["zero_mismatch"] / tps[base], 4)
    return out


def _engine_run(torch, Engine, models, arms, arm_graphs, requests, batch, args, cuda) -> dict:
    """generate() per arm, interleaved; one engine per arm (its graphs are captured in the warm-up)."""
    engines = {arm: Engine(models[arm], max_running=batch, seed=0, cuda_graphs=arm_graphs[arm]) for arm in arms}
    for arm in arms:  # warm-up: Triton compiles, graphs are captured
        seconds, _ = _timed(torch, engines[arm], requests, cuda)
        print(f"warm-up {arm} batch {batch}: {seconds:.2f} s", file=sys.stderr, flush=True)
    samples: dict[str, list[float]] = {arm: [] for arm in arms}
    for rep in range(args.reps):
        for arm in arms:
            seconds, tokens = _timed(torch, engines[arm], requests, cuda)
            samples[arm].append(tokens / seconds)
            print(f"rep {rep} {arm} batch {batch}: {tokens / seconds:.1f} tok/s", file=sys.stderr, flush=True)
    tps = {arm: statistics.median(samples[arm]) for arm in arms}
    return {"tokens_per_s": {arm: round(v, 1) for arm, v in tps.items()}, **_overheads(tps),
            "runs": {arm: [round(x, 1) for x in samples[arm]] for arm in arms}}


def _step_run(torch, models, arms, arm_graphs, cfg, batch, context, args, peaks, dtype_name, moe=None) -> dict:
    """One decode step of `batch` sequences of `context` cached keys, replayed (graphs) or run (eager), interleaved."""
    from toy_rollout.graphs import DecodeGraphs

    dtype = next(iter(models.values())).dtype
    gen = torch.Generator(device=args.device).manual_seed(1)
    shape = (cfg.num_layers, batch + 1, context + 1, cfg.num_heads, cfg.head_dim)
    keys = torch.randn(shape, generator=gen, device=args.device, dtype=dtype)
    values = torch.randn(shape, generator=gen, device=args.device, dtype=dtype)
    ids = torch.randint(0, cfg.vocab_size, (batch,), generator=gen, device=args.device)
    slots = list(range(batch))
    steps, logits, runners = {}, {}, {}  # the runners hold the caches and buffers that the graphs point at
    for arm in arms:
        if arm in ("upstream", "standard_gather"):  # eager-only arms read lengths on the host: not a step of their own here
            continue
        model = models[arm]
        cache = model.new_cache(batch, context + 1, spare=1)
        cache.k.copy_(keys)
        cache.v.copy_(values)
        runner = runners[arm] = DecodeGraphs(model, cache, capture=arm_graphs[arm])
        for s in slots:
            cache.lengths[s] = context
        logits[arm] = runner.decode(ids, slots).float().clone()  # captures the bucket's graph
        size = runner.bucket(batch)
        graph = runner.graphs.get(size)
        steps[arm] = (graph.replay if graph is not None else (lambda r=runner, n=size: r._step(n)))
    del keys, values
    samples: dict[str, list[float]] = {arm: [] for arm in steps}
    for fn in steps.values():  # warm-up
        for _ in range(3):
            fn()
    cuda = args.device.startswith("cuda")
    for _ in range(args.reps):
        for arm, fn in steps.items():
            if cuda:
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            begin = time.perf_counter()
            for _ in range(args.step_iters):
                fn()
            if cuda:
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1000
            else:
                seconds = time.perf_counter() - begin
            samples[arm].append(seconds / args.step_iters)
    elem = torch.finfo(dtype).bits // 8
    cost = step_cost(cfg, batch, context, elem, moe)
    out = {"context": context, "iters": args.step_iters, **cost, "arms": {}}
    for arm, times in samples.items():
        t = statistics.median(times)
        out["arms"][arm] = {"us_per_step": round(t * 1e6, 1), "tokens_per_s": round(batch / t, 1),
                            "samples_us": [round(x * 1e6, 1) for x in times], **roofline(cost, t, peaks, dtype_name)}
    out.update(_overheads({arm: v["tokens_per_s"] for arm, v in out["arms"].items()}))
    base = "standard" if "standard" in logits else "standard_dense"
    if base in logits and "zero_mismatch" in logits:  # the arms compute the same function: a sanity check
        a, b = logits[base], logits["zero_mismatch"]
        out["logits_rel_diff"] = float((a - b).norm() / a.norm())
        if "standard_varlen" in logits:
            out["logits_rel_diff_varlen"] = float((logits["standard_varlen"] - a).norm() / a.norm())
    return out


def _copy_bandwidth(torch, device) -> float:
    """A 1 GiB device-to-device copy, bytes read + written per second (GB/s)."""
    x = torch.empty(1 << 28, dtype=torch.float32, device=device).normal_()
    y = torch.empty_like(x)
    times = []
    for _ in range(8):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y.copy_(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return round(2 * x.numel() * 4 / statistics.median(times[2:]) / 1e9, 1)


def table(result: dict) -> str:
    """The measurements as a text table: one row per (dtype, batch, arm)."""
    head = ["dtype", "batch", "arm", "graphs", "engine tok/s", "ovh %", "step us", "step tok/s", "ovh %", "GB/s", "TFLOP/s", "roofline %"]
    rows = []
    for rec in result["configs"]:
        eng = rec.get("engine", {})
        step = rec.get("step", {})
        for arm in result["arms"]:
            st = step.get("arms", {}).get(arm, {})
            zm = arm == "zero_mismatch"
            rows.append([rec["dtype"], str(rec["batch"]), arm, "yes" if rec["graphs"].get(arm) else "no",
                         str(eng.get("tokens_per_s", {}).get(arm, "")),
                         str(eng.get("overhead_vs_best_standard_percent", "")) if zm else "",
                         str(st.get("us_per_step", "")), str(st.get("tokens_per_s", "")),
                         str(step.get("overhead_vs_best_standard_percent", "")) if zm else "",
                         str(st.get("GBps", "")), str(st.get("TFLOPs", "")), str(st.get("roofline_percent", ""))])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"{result['device']}, torch {result['torch']}, triton {result['triton']}, hidden {result['hidden']}, "
             f"{result['layers']} layers, vocab {result['vocab']}; overhead vs the fastest standard arm; peaks {result['peaks']}; "
             f"copy {result['copy_GBps']} GB/s"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head] + rows]
    return "\n".join(lines)


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
