#!/usr/bin/env python3
"""Generate the demo model: two toy upstreams, the zero-mismatch series, the manifest.

Writes, under --out (default: the repository root):

  upstreams/toy-rollout.bundle   git bundle: a tiny rollout engine (toy_rollout)
  upstreams/toy-trainer.bundle   git bundle: a tiny trainer (toy_trainer)
  patches/demo/rollout/          git format-patch mails + quilt `series`
  patches/demo/trainer/          git format-patch mails + quilt `series`
  manifests/demo.yaml            pins both components (DESIGN.md section 2)

Everything is deterministic: every commit has a fixed author, committer and
date, git runs with user and system configuration isolated (fixed locale and
time zone), so the commit ids and the patch bytes are the same on every run
and machine. An unchanged output file is not rewritten (a bundle whose refs
already point at the same commits is kept as it is).

The rollout upstream has three commits after the pin, one of which lands the
same change as the first patch of the rollout series (the --seed fix), so
`zmr upstreamed` and `zmr rebase` have real history to work on.

  python scripts/make_demo.py             # regenerate in the repository
  python scripts/make_demo.py --out DIR   # somewhere else
  python scripts/make_demo.py --check     # exit 1 if the repository differs
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ROLLOUT_UPSTREAM = ("Rhea Rollout", "rhea@toy-rollout.example")
TRAINER_UPSTREAM = ("Tomas Trainer", "tomas@toy-trainer.example")
ZMR_AUTHOR = ("ZMR Demo", "demo@zmr.example")

FORMAT_PATCH = [
    "format-patch", "--stdout", "--zero-commit", "--full-index", "--no-signature",
    "--no-numbered", "--no-renames", "--no-thread", "--no-cover-letter", "--no-notes",
    "--no-attach", "--no-binary", "--stat=72",
]


# ---------------------------------------------------------------------------
# git, isolated from the machine
# ---------------------------------------------------------------------------

def git_env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
        HOME=home,
        LC_ALL="C",
        LANG="C",
        TZ="UTC",
    )
    return env


GIT_OPTS = [
    "-c", "init.defaultBranch=main",
    "-c", "core.autocrlf=false",
    "-c", "core.fileMode=true",
    "-c", "commit.gpgSign=false",
    "-c", "pack.threads=1",
    "-c", "diff.algorithm=myers",
    "-c", "am.threeWay=false",
]


def git(cwd: Path, *args: str, env: dict[str, str], input: str | None = None) -> str:
    proc = subprocess.run(
        ["git", *GIT_OPTS, *args], cwd=cwd, env=env, input=input,
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


# ---------------------------------------------------------------------------
# commits as data
# ---------------------------------------------------------------------------

@dataclass
class Change:
    """One commit: whole files to write (None deletes) and exact in-place edits."""

    subject: str
    body: str
    date: str
    files: dict[str, str | None] = field(default_factory=dict)
    edits: list[tuple[str, str, str]] = field(default_factory=list)


def apply_change(state: dict[str, str], change: Change) -> None:
    for path, text in change.files.items():
        if text is None:
            state.pop(path, None)
        else:
            state[path] = text
    for path, old, new in change.edits:
        text = state[path]
        if text.count(old) != 1:
            raise SystemExit(f"internal error: edit of {path} for {change.subject!r} matches {text.count(old)} times")
        state[path] = text.replace(old, new)


def write_tree(repo: Path, state: dict[str, str]) -> None:
    for path in git(repo, "ls-files", env=ENV).splitlines():
        if path not in state:
            (repo / path).unlink()
    for path, text in state.items():
        dest = repo / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")


def commit(repo: Path, state: dict[str, str], change: Change, who: tuple[str, str]) -> str:
    apply_change(state, change)
    write_tree(repo, state)
    env = dict(ENV)
    env.update(
        GIT_AUTHOR_NAME=who[0], GIT_AUTHOR_EMAIL=who[1], GIT_AUTHOR_DATE=change.date,
        GIT_COMMITTER_NAME=who[0], GIT_COMMITTER_EMAIL=who[1], GIT_COMMITTER_DATE=change.date,
    )
    git(repo, "add", "-A", env=env)
    message = change.subject + "\n\n" + change.body.strip("\n") + "\n"
    git(repo, "commit", "-q", "--no-verify", "--cleanup=verbatim", "-F", "-", env=env, input=message)
    return git(repo, "rev-parse", "HEAD", env=env).strip()


def slug(subject: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return s[:52].rstrip("-")


# ===========================================================================
# Sources shared by both upstreams (each upstream keeps its own copy)
# ===========================================================================

WEIGHTS_PY = r'''"""Model configuration and weights (one safetensors file).

The configuration travels in the file's metadata under "toy_config" (JSON),
so a weights file is all a model needs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
from safetensors import safe_open
from safetensors.torch import save_file


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 320
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 192
    max_positions: int = 256
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name and shape of every tensor of a model."""
    h, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "embed.weight": (v, h),
        "pos_embed.weight": (cfg.max_positions, h),
    }
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        shapes[p + "attn_norm.weight"] = (h,)
        for name in ("q", "k", "v", "o"):
            shapes[f"{p}attn.{name}_proj.weight"] = (h, h)
        shapes[p + "mlp_norm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (f, h)
        shapes[p + "mlp.up_proj.weight"] = (f, h)
        shapes[p + "mlp.down_proj.weight"] = (h, f)
    shapes["norm.weight"] = (h,)
    shapes["lm_head.weight"] = (v, h)
    return shapes


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded random fp32 weights (CPU), scaled so that activations stay O(1)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        t = torch.randn(shape, generator=g)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * t
        elif name == "pos_embed.weight":
            t = 0.5 * t
        elif name == "lm_head.weight":
            t = t * (3.0 / shape[1] ** 0.5)
        elif name != "embed.weight":
            t = t / shape[1] ** 0.5
        out[name] = t
    return out


def save_weights(path, cfg: ModelConfig, tensors: dict[str, torch.Tensor]) -> None:
    meta = {"toy_config": json.dumps(asdict(cfg), sort_keys=True)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)


def load_weights(path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "toy_config" not in meta:
            raise ValueError(f"{path}: no toy_config in the safetensors metadata")
        cfg = ModelConfig(**json.loads(meta["toy_config"]))
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    expected = weight_shapes(cfg)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"{path}: {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
    return cfg, tensors
'''

# The zero-mismatch kernels. The same bytes go into both trees (patch
# "Add batch-invariant kernels ..." of each series): one reduction order,
# shared by the rollout engine and the trainer.
BATCH_INVARIANT_PY = r'''"""Batch-invariant kernels, shared bit for bit by the rollout engine and the trainer.

The rollout engine samples tokens, the trainer recomputes their
log-probabilities. Floating-point addition is not associative: when the two
sides add the same numbers in a different order, the last bits differ. The
upstream kernels choose their reduction order from the shape of the work (a
split-K count from the number of rows, a split-KV count from the batch and the
cache length, a BLAS kernel from the number of rows, a fused SDPA kernel for
prefill and an einsum for decode), so the same token gets different bits in a
decode step, in a prefill, and in the trainer's teacher-forced pass.

Every function here computes each output row from that row alone, in an order
that depends only on the row's own length:

* ordered_sum: pairwise sums inside fixed blocks of BLOCK elements, the block
  sums then added left to right. Trailing zeros do not change the result, so
  a reduction over a row's exact length and over a longer, zero-masked row
  give the same bits.
* linear: the K dimension is cut into fixed chunks of K_CHUNK columns (zero
  padded), whatever the number of rows; one GEMM call per row, always of the
  same shape [K/K_CHUNK, 1, K_CHUNK] x [K/K_CHUNK, K_CHUNK, N], so BLAS picks
  the same kernel for a decode row and a trainer row; the chunk results are
  added in fp32 with ordered_sum. Inputs are promoted to fp32 (exact for bf16).
* rms_norm, silu, log_softmax: ordered_sum and element-wise ops only.
* attention: one query row at a time in effect: scores by ordered_sum over the
  head dimension, masked keys get probability exactly 0, and the softmax sum
  and the weighted sum of values are ordered sums over the key axis. A decode
  step over a cache of length L and the trainer's causal row for position L-1
  reduce over the same keys in the same order.

This file is identical in toy_rollout and toy_trainer. The switch is the
environment variable TOY_BATCH_INVARIANT (default on; 0 restores the upstream
kernels) or the batch_invariant= argument of the model constructors.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

ENV_VAR = "TOY_BATCH_INVARIANT"
K_CHUNK = 64  # columns per split-K chunk, fixed
BLOCK = 16  # elements per pairwise-summed block, fixed (a power of two)
Q_CHUNK = 32  # query rows per attention tile (memory only; no effect on results)


def enabled(flag: bool | None = None) -> bool:
    """The explicit flag if given, else TOY_BATCH_INVARIANT (default: on)."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def ordered_sum(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Sum over dim in a fixed order that depends only on the length of dim."""
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    blocks = max(1, -(-n // BLOCK))
    if blocks * BLOCK != n:
        x = F.pad(x, (0, blocks * BLOCK - n))
    x = x.reshape(*x.shape[:-1], blocks, BLOCK)
    width = BLOCK
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    x = x[..., 0]
    total = x[..., 0]
    for j in range(1, blocks):
        total = total + x[..., j]
    if keepdim:
        total = total.unsqueeze(-1).movedim(-1, dim)
    return total


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T with a per-row result independent of how many rows there are."""
    k = x.shape[-1]
    n = weight.shape[0]
    chunks = max(1, -(-k // K_CHUNK))
    pad = chunks * K_CHUNK - k
    rows = x.reshape(-1, k).to(torch.float32, copy=True)
    w = weight.to(torch.float32)
    if pad:
        rows = F.pad(rows, (0, pad))
        w = F.pad(w, (0, pad))
    rows = rows.reshape(-1, chunks, 1, K_CHUNK)
    w = w.reshape(n, chunks, K_CHUNK).permute(1, 2, 0).contiguous()
    if rows.shape[0] == 0:
        return x.new_zeros(*x.shape[:-1], n)
    parts = torch.stack([torch.bmm(row, w) for row in rows.unbind(0)])
    out = ordered_sum(parts[:, :, 0, :], dim=1)
    return out.reshape(*x.shape[:-1], n).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    mean_sq = ordered_sum(xf * xf, -1, keepdim=True) / xf.shape[-1]
    return weight * (xf / torch.sqrt(mean_sq + eps)).to(x.dtype)


def silu(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf / (1.0 + torch.exp(-xf))).to(x.dtype)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax over the last dimension, in fp32."""
    x = logits.float()
    z = x - x.amax(-1, keepdim=True)
    return z - torch.log(ordered_sum(torch.exp(z), -1, keepdim=True))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax attention with an explicit visibility mask.

    q: [B, Tq, heads, d]; k, v: [B, Tk, heads, d]; valid: [B, Tq, Tk] (True where
    query i may see key j; at least one key per query). Returns [B, Tq, heads, d]
    in q's dtype. Padding keys beyond Tk's real length only add exact zeros.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf = q.float(), k.float(), v.float()
    outs = []
    for s in range(0, q.shape[1], Q_CHUNK):
        vis = valid[:, s:s + Q_CHUNK, :, None]  # [B, tq, Tk, 1]
        scores = ordered_sum(qf[:, s:s + Q_CHUNK, None] * kf[:, None], -1) * scale  # [B, tq, Tk, heads]
        scores = scores.masked_fill(~vis, float("-inf"))
        p = torch.exp(scores - scores.amax(2, keepdim=True))
        denom = ordered_sum(p, 2)  # [B, tq, heads]
        weighted = (p[..., None] * vf[:, None]).masked_fill(~vis[..., None], 0.0)
        outs.append(ordered_sum(weighted, 2) / denom[..., None])
    return torch.cat(outs, 1).to(q.dtype)
'''


# ===========================================================================
# toy-rollout upstream
# ===========================================================================

R_README_1 = r'''# toy-rollout

A tiny rollout engine for experiments with reinforcement learning on language
models: a decoder-only transformer (learned positions, RMSNorm, SiLU-gated
MLP) over a slot KV cache, in plain PyTorch. CPU and CUDA, fp32 and bf16.

Weights are one safetensors file; the model configuration is stored in its
metadata (`toy_config`), see `toy_rollout/weights.py`.

```python
from toy_rollout import ToyModel

model = ToyModel.from_file("weights.safetensors", device="cpu")
```
'''

R_README_ENGINE = r'''
## Serving

`Engine` does continuous batching: up to `max_running` sequences decode
together, a waiting request joins as soon as a slot frees up, and each
sequence leaves when it has its `max_new_tokens`. Every request samples from
its own seeded generator, and each sampled token comes back with its
log-probability.

```python
from toy_rollout import Engine, Request

engine = Engine(model, max_running=4, seed=0)
for c in engine.generate([Request("a", [1, 2, 3], max_new_tokens=8)]):
    print(c.id, c.tokens, c.logprobs)
```
'''

R_README_CLI = r'''
## Command line

```
python -m toy_rollout --device cuda --dtype bf16 --hidden 2048 --layers 4 --requests 64
```

prints one JSON line per request (random weights unless `--weights`).
'''

R_PYPROJECT = r'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "toy-rollout"
version = "0.1.0"
description = "A tiny rollout engine: decoder-only transformer, KV cache, continuous batching"
requires-python = ">=3.9"
dependencies = ["torch", "safetensors"]
'''

R_INIT_1 = r'''"""toy_rollout: a tiny rollout engine (decoder-only transformer over a KV cache)."""

from .model import ToyModel
from .weights import ModelConfig, load_weights, random_weights, save_weights

__all__ = ["ModelConfig", "ToyModel", "load_weights", "random_weights", "save_weights"]
'''

R_OPS_1 = r'''"""Dense building blocks of the model: GEMM, RMSNorm, SiLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T"""
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    return (xf * torch.rsqrt(var + eps)).to(x.dtype) * weight


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)
'''

R_ATTN_1 = r'''"""Attention: causal prefill over one sequence, decode over a slot cache."""

from __future__ import annotations

import math

import torch


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over one sequence. q, k, v: [T, heads, head_dim]."""
    t = q.shape[0]
    scale = 1.0 / math.sqrt(q.shape[-1])
    qh, kh, vh = (x.transpose(0, 1) for x in (q, k, v))  # [heads, T, d]
    scores = torch.matmul(qh, kh.transpose(-1, -2)).float() * scale
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, vh).transpose(0, 1)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """One query per sequence against its cached keys.

    q: [B, heads, d]; k, v: [B, L, heads, d], valid up to lengths[b]; returns [B, heads, d].
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    pos = torch.arange(k.shape[1], device=q.device)
    valid = (pos[None, :] < lengths[:, None])[:, None, :]  # [B, 1, L]
    scores = torch.einsum("bhd,blhd->bhl", q.float(), k.float()) * scale
    scores = scores.masked_fill(~valid, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhl,blhd->bhd", probs, v.float()).to(q.dtype)
'''

R_CACHE = r'''"""Slot KV cache: one slot per running sequence, preallocated."""

from __future__ import annotations

import torch

from .weights import ModelConfig


class KVCache:
    def __init__(self, cfg: ModelConfig, max_slots: int, max_len: int, device, dtype):
        shape = (cfg.num_layers, max_slots, max_len, cfg.num_heads, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len
        self.lengths = [0] * max_slots
        self._free = list(range(max_slots - 1, -1, -1))

    def alloc(self) -> int:
        if not self._free:
            raise RuntimeError("KV cache full")
        slot = self._free.pop()
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        self.lengths[slot] = 0
        self._free.append(slot)
'''

R_MODEL = r'''"""The model: a tiny decoder-only transformer over a slot KV cache."""

from __future__ import annotations

import torch

from .attention import decode_attention, prefill_attention
from .cache import KVCache
from .ops import linear, rms_norm, silu
from .weights import ModelConfig, load_weights


class ToyModel:
    """Inference-only model; weights are a dict name -> tensor (see weights.py)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.w = {name: t.to(device=self.device, dtype=dtype) for name, t in weights.items()}

    @classmethod
    def from_file(cls, path, device="cpu", dtype=torch.float32) -> "ToyModel":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype)

    def new_cache(self, max_slots: int, max_len: int) -> KVCache:
        return KVCache(self.cfg, max_slots, max_len, self.device, self.dtype)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.w["embed.weight"][ids] + self.w["pos_embed.weight"][positions]

    def _proj(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return linear(x, self.w[name])

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return rms_norm(x, self.w[name], self.cfg.rms_eps)

    def _qkv(self, i: int, x: torch.Tensor):
        h = self._norm(x, f"layers.{i}.attn_norm.weight")
        shape = (x.shape[0], self.cfg.num_heads, self.cfg.head_dim)
        q = self._proj(h, f"layers.{i}.attn.q_proj.weight").view(shape)
        k = self._proj(h, f"layers.{i}.attn.k_proj.weight").view(shape)
        v = self._proj(h, f"layers.{i}.attn.v_proj.weight").view(shape)
        return q, k, v

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        h = self._norm(x, f"layers.{i}.mlp_norm.weight")
        gate = silu(self._proj(h, f"layers.{i}.mlp.gate_proj.weight"))
        up = self._proj(h, f"layers.{i}.mlp.up_proj.weight")
        return self._proj(gate * up, f"layers.{i}.mlp.down_proj.weight")

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self._proj(self._norm(x, "norm.weight"), "lm_head.weight")

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, cache: KVCache, slot: int) -> torch.Tensor:
        """Run a whole prompt into a cache slot; return the logits of its last position."""
        n = ids.shape[0]
        x = self._embed(ids, torch.arange(n, device=self.device))
        for i in range(self.cfg.num_layers):
            q, k, v = self._qkv(i, x)
            cache.k[i, slot, :n] = k
            cache.v[i, slot, :n] = v
            a = prefill_attention(q, k, v)
            x = x + self._proj(a.reshape(n, -1), f"layers.{i}.attn.o_proj.weight")
            x = x + self._mlp(i, x)
        cache.lengths[slot] = n
        return self._logits(x[-1:])[0]

    @torch.no_grad()
    def decode(self, ids: torch.Tensor, slots: list[int], cache: KVCache) -> torch.Tensor:
        """One new token for each of several running sequences; returns logits [B, vocab]."""
        pos = torch.tensor([cache.lengths[s] for s in slots], device=self.device)
        slot_idx = torch.tensor(slots, device=self.device)
        lengths = pos + 1
        max_len = int(lengths.max())
        x = self._embed(ids, pos)
        for i in range(self.cfg.num_layers):
            q, k, v = self._qkv(i, x)
            cache.k[i, slot_idx, pos] = k
            cache.v[i, slot_idx, pos] = v
            keys = cache.k[i, slot_idx, :max_len]
            values = cache.v[i, slot_idx, :max_len]
            a = decode_attention(q, keys, values, lengths)
            x = x + self._proj(a.reshape(len(slots), -1), f"layers.{i}.attn.o_proj.weight")
            x = x + self._mlp(i, x)
        for s in slots:
            cache.lengths[s] += 1
        return self._logits(x)
'''

R2_SPLITK = Change(
    subject="ops: split-K GEMM for small batches",
    date="2025-01-08T10:30:00+00:00",
    body="""
A decode step has one row per running sequence. With a handful of rows a
GEMM leaves most cores idle, so cut the reduction (K) dimension into up to
SPLITK_MAX slices, run one partial GEMM per slice and add the partial
results in fp32. The more rows, the fewer splits; from SPLITK_ROWS rows on
the plain GEMM is used.
""",
    edits=[
        ("toy_rollout/ops.py", '''"""Dense building blocks of the model: GEMM, RMSNorm, SiLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T"""
    return F.linear(x, weight)
''', '''"""Dense building blocks of the model: GEMM, RMSNorm, SiLU.

Tuned for serving: with few rows in flight the GEMM splits its reduction
dimension so that more cores work on a decode step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SPLITK_ROWS = 16  # from this many rows on, no split
SPLITK_MAX = 4
SPLITK_MIN_COLS = 32  # columns per split at least


def num_k_splits(rows: int, k: int) -> int:
    """How many K splits a GEMM over `rows` rows gets (1: no split)."""
    if rows >= SPLITK_ROWS:
        return 1
    return max(1, min(SPLITK_MAX, SPLITK_ROWS // max(rows, 1), k // SPLITK_MIN_COLS))


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T, split along K when there are few rows."""
    rows = x.numel() // x.shape[-1]
    splits = num_k_splits(rows, x.shape[-1])
    if splits == 1:
        return F.linear(x, weight)
    out = None
    for xs, ws in zip(x.tensor_split(splits, dim=-1), weight.tensor_split(splits, dim=-1)):
        part = F.linear(xs, ws).float()
        out = part if out is None else out + part
    return out.to(x.dtype)
'''),
    ],
)

R3_SPLITKV = Change(
    subject="attention: split-KV decode (flash-decoding)",
    date="2025-01-09T14:00:00+00:00",
    body="""
With few sequences in a decode step, one softmax over the whole cache
length runs on few cores. Split the keys into chunks, compute a partial
softmax (max, sum, weighted values) per chunk and combine the chunks with
their log-sum-exp weights. The split count grows with the cache length and
shrinks with the batch (batch * splits ~ KV_TARGET_WORK).
""",
    edits=[
        ("toy_rollout/attention.py", '''import torch


def prefill_attention''', '''import torch

KV_SPLIT_MIN_KEYS = 16  # keys per split at least
KV_SPLIT_MAX = 8
KV_TARGET_WORK = 8  # aim for batch * splits >= this


def num_kv_splits(batch: int, max_len: int) -> int:
    """Flash-decoding split count for a decode step."""
    by_len = max(1, max_len // KV_SPLIT_MIN_KEYS)
    by_batch = max(1, -(-KV_TARGET_WORK // max(batch, 1)))
    return min(KV_SPLIT_MAX, by_len, by_batch)


def prefill_attention'''),
        ("toy_rollout/attention.py", '''    scale = 1.0 / math.sqrt(q.shape[-1])
    pos = torch.arange(k.shape[1], device=q.device)
    valid = (pos[None, :] < lengths[:, None])[:, None, :]  # [B, 1, L]
    scores = torch.einsum("bhd,blhd->bhl", q.float(), k.float()) * scale
    scores = scores.masked_fill(~valid, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhl,blhd->bhd", probs, v.float()).to(q.dtype)
''', '''    batch, length = k.shape[:2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    splits = num_kv_splits(batch, int(lengths.max()))
    step = -(-length // splits)
    pos = torch.arange(length, device=q.device)
    qf = q.float()
    parts = []
    for s in range(0, length, step):
        e = min(length, s + step)
        valid = (pos[None, s:e] < lengths[:, None])[:, None, :]  # [B, 1, l]
        scores = torch.einsum("bhd,blhd->bhl", qf, k[:, s:e].float()) * scale
        scores = scores.masked_fill(~valid, float("-inf"))
        m = scores.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(scores - m)
        parts.append((m, p.sum(-1, keepdim=True), torch.einsum("bhl,blhd->bhd", p, v[:, s:e].float())))
    top = torch.stack([m for m, _, _ in parts]).amax(0)
    num = 0.0
    den = 0.0
    for m, l, o in parts:
        w = torch.exp(m - top)
        num = num + o * w
        den = den + l * w
    return (num / den).to(q.dtype)
'''),
    ],
)

R4_RMS = Change(
    subject="ops: chunked RMSNorm",
    date="2025-01-10T09:15:00+00:00",
    body="""
Accumulate the sum of squares RMS_CHUNK columns at a time instead of
materialising x**2 for the whole row: the same shape of loop as the fused
kernel we run on GPUs, and it keeps the fp32 copy small for wide models.
""",
    edits=[
        ("toy_rollout/ops.py", '''SPLITK_MIN_COLS = 32  # columns per split at least
''', '''SPLITK_MIN_COLS = 32  # columns per split at least
RMS_CHUNK = 32
'''),
        ("toy_rollout/ops.py", '''def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    return (xf * torch.rsqrt(var + eps)).to(x.dtype) * weight
''', '''def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm; the sum of squares is accumulated RMS_CHUNK columns at a time."""
    xf = x.float()
    sum_sq = torch.zeros(*xf.shape[:-1], 1, dtype=torch.float32, device=x.device)
    for chunk in xf.split(RMS_CHUNK, dim=-1):
        sum_sq = sum_sq + chunk.pow(2).sum(-1, keepdim=True)
    return (xf * torch.rsqrt(sum_sq / xf.shape[-1] + eps)).to(x.dtype) * weight
'''),
    ],
)

R_ENGINE = r'''"""Continuous batching: requests join when a slot frees up and leave when done."""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

import torch

from .model import ToyModel


@dataclass
class Request:
    id: str
    prompt: list[int]
    max_new_tokens: int


@dataclass
class Completion:
    """What the engine made of one request.

    tokens are the sampled response tokens and logprobs[i] is the log-probability
    of tokens[i] under the distribution it was sampled from. joined_step and
    finished_step are the engine steps at which the sequence entered and left the
    running batch.
    """

    id: str
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    joined_step: int = -1
    finished_step: int = -1


class Engine:
    """Serve a list of requests with continuous batching and seeded sampling."""

    def __init__(self, model: ToyModel, max_running: int = 4, seed: int = 0):
        self.model = model
        self.max_running = max_running
        self.seed = seed

    def _generator(self, request: Request) -> torch.Generator:
        # One generator per request: what a request samples does not depend
        # on which other requests share its batch.
        return torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{request.id}".encode()))

    def _sample(self, logits: torch.Tensor, generators: list[torch.Generator]):
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
        tokens, chosen = [], []
        for row, g in zip(logprobs, generators):
            tok = int(torch.multinomial(row.exp(), 1, generator=g))
            tokens.append(tok)
            chosen.append(float(row[tok]))
        return tokens, chosen

    def generate(self, requests: list[Request]) -> list[Completion]:
        model = self.model
        max_len = max(len(r.prompt) + r.max_new_tokens for r in requests)
        if max_len > model.cfg.max_positions:
            raise ValueError(f"sequence of {max_len} tokens, the model has {model.cfg.max_positions} positions")
        cache = model.new_cache(self.max_running, max_len)
        done = {r.id: Completion(r.id, list(r.prompt)) for r in requests}
        waiting = deque(requests)
        running: list[tuple[Request, int, torch.Generator]] = []
        step = 0
        while waiting or running:
            joined = []
            while waiting and len(running) < self.max_running:
                req = waiting.popleft()
                slot = cache.alloc()
                gen = self._generator(req)
                ids = torch.tensor(req.prompt, device=model.device)
                logits = model.prefill(ids, cache, slot)
                (tok,), (lp,) = self._sample(logits[None], [gen])
                comp = done[req.id]
                comp.joined_step = step
                comp.tokens.append(tok)
                comp.logprobs.append(lp)
                running.append((req, slot, gen))
                joined.append(req.id)
            decoding = [r for r in running if r[0].id not in joined and len(done[r[0].id].tokens) < r[0].max_new_tokens]
            if decoding:
                ids = torch.tensor([done[r.id].tokens[-1] for r, _, _ in decoding], device=model.device)
                logits = model.decode(ids, [slot for _, slot, _ in decoding], cache)
                tokens, lps = self._sample(logits, [g for _, _, g in decoding])
                for (req, _, _), tok, lp in zip(decoding, tokens, lps):
                    done[req.id].tokens.append(tok)
                    done[req.id].logprobs.append(lp)
            still = []
            for req, slot, gen in running:
                comp = done[req.id]
                if len(comp.tokens) >= req.max_new_tokens:
                    comp.finished_step = step
                    cache.release(slot)
                else:
                    still.append((req, slot, gen))
            running = still
            step += 1
        return [done[r.id] for r in requests]
'''

R_MAIN_BUGGY = r'''"""python -m toy_rollout: serve random prompts, print one JSON line per request."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from .engine import Engine, Request
from .model import ToyModel
from .weights import ModelConfig, random_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toy_rollout", description=__doc__)
    p.add_argument("--weights", help="safetensors file (default: random weights of the size below)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=320)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-running", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=16, help="longest prompt (lengths vary from 1)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="seeds the prompts and the sampling")
    args = p.parse_args(argv)

    dtype = DTYPES[args.dtype]
    if args.weights:
        model = ToyModel.from_file(args.weights, device=args.device, dtype=dtype)
    else:
        cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers,
                          num_heads=args.heads, intermediate_size=3 * args.hidden)
        model = ToyModel(cfg, random_weights(cfg, seed=args.seed), device=args.device, dtype=dtype)
    g = torch.Generator().manual_seed(args.seed)
    requests = []
    for i in range(args.requests):
        n = int(torch.randint(1, args.prompt_len + 1, (1,), generator=g))
        prompt = torch.randint(0, model.cfg.vocab_size, (n,), generator=g).tolist()
        requests.append(Request(f"req-{i}", prompt, args.max_new_tokens))
    engine = Engine(model, max_running=args.max_running)
    for c in engine.generate(requests):
        json.dump({"id": c.id, "tokens": c.tokens, "logprobs": c.logprobs}, sys.stdout)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

R_TESTS = r'''import torch

from toy_rollout import Engine, ModelConfig, Request, ToyModel, random_weights


def _model(dtype=torch.float32):
    cfg = ModelConfig()
    return ToyModel(cfg, random_weights(cfg, seed=0), dtype=dtype)


def _requests():
    return [Request(f"r{i}", list(range(1, 3 + 2 * i)), max_new_tokens=2 + i) for i in range(5)]


def test_every_request_gets_its_tokens():
    out = Engine(_model(), max_running=2).generate(_requests())
    assert [c.id for c in out] == [f"r{i}" for i in range(5)]
    for i, c in enumerate(out):
        assert len(c.tokens) == len(c.logprobs) == 2 + i
        assert all(lp <= 0.0 for lp in c.logprobs)


def test_sampling_is_seeded():
    a = Engine(_model(), max_running=2, seed=1).generate(_requests())
    b = Engine(_model(), max_running=3, seed=1).generate(_requests())
    assert [c.tokens for c in a] == [c.tokens for c in b]


def test_bf16_runs():
    out = Engine(_model(torch.bfloat16), max_running=4).generate(_requests())
    assert all(len(c.tokens) == c_len for c, c_len in zip(out, range(2, 7)))
'''

R_TESTS_LATER_OLD = '''def test_bf16_runs():
'''
R_TESTS_LATER_NEW = '''def test_long_decode_uses_several_kv_splits():
    from toy_rollout.attention import num_kv_splits

    assert num_kv_splits(1, 64) > 1
    out = Engine(_model(), max_running=1).generate([Request("long", [5] * 40, max_new_tokens=30)])
    assert len(out[0].tokens) == 30


def test_bf16_runs():
'''

# The fix that is both the first patch of the series and, later, an upstream commit.
SEED_FIX_BODY = """
main() parsed --seed and used it for the prompts and the random weights,
but built the Engine without it, so sampling always used seed 0: two runs
with different --seed sampled from the same per-request streams. Pass the
seed through.
"""
SEED_FIX_EDIT = (
    "toy_rollout/__main__.py",
    "    engine = Engine(model, max_running=args.max_running)\n",
    "    engine = Engine(model, max_running=args.max_running, seed=args.seed)\n",
)

ROLLOUT_HISTORY = [
    Change(
        subject="Initial import: tiny decoder-only model with a slot KV cache",
        date="2025-01-06T09:00:00+00:00",
        body="""
A decoder-only transformer (learned positions, RMSNorm, SiLU-gated MLP)
with weights in one safetensors file, a prefill over a prompt and a
batched decode step over a preallocated slot KV cache. Plain PyTorch,
CPU or CUDA, fp32 or bf16.
""",
        files={
            "README.md": R_README_1,
            "pyproject.toml": R_PYPROJECT,
            "toy_rollout/__init__.py": R_INIT_1,
            "toy_rollout/weights.py": WEIGHTS_PY,
            "toy_rollout/ops.py": R_OPS_1,
            "toy_rollout/attention.py": R_ATTN_1,
            "toy_rollout/cache.py": R_CACHE,
            "toy_rollout/model.py": R_MODEL,
        },
    ),
    R2_SPLITK,
    R3_SPLITKV,
    R4_RMS,
    Change(
        subject="engine: continuous batching with seeded per-request sampling",
        date="2025-01-13T11:00:00+00:00",
        body="""
Engine.generate() keeps up to max_running sequences in the decode batch.
A waiting request is prefilled as soon as a slot frees up and joins the
next decode step; a sequence leaves the batch when it has its
max_new_tokens. Each request samples from its own torch.Generator, seeded
from the engine seed and the request id, so what a request samples does
not depend on the other requests. Every sampled token comes back with its
log-probability.
""",
        files={"toy_rollout/engine.py": R_ENGINE, "README.md": R_README_1 + R_README_ENGINE},
        edits=[
            ("toy_rollout/__init__.py",
             'from .model import ToyModel\n',
             'from .engine import Completion, Engine, Request\nfrom .model import ToyModel\n'),
            ("toy_rollout/__init__.py",
             '__all__ = ["ModelConfig", "ToyModel",',
             '__all__ = ["Completion", "Engine", "ModelConfig", "Request", "ToyModel",'),
        ],
    ),
    Change(
        subject="Add a command line entry point and tests",
        date="2025-01-14T16:20:00+00:00",
        body="""
python -m toy_rollout serves random prompts with random (or given) weights
and prints one JSON line per request; --device, --dtype and the model size
are options. Tests for request bookkeeping, seeded sampling and bf16.
""",
        files={
            "toy_rollout/__main__.py": R_MAIN_BUGGY,
            "tests/test_engine.py": R_TESTS,
            "README.md": R_README_1 + R_README_ENGINE + R_README_CLI,
        },
    ),
]

ROLLOUT_LATER = [
    Change(
        subject="tests: cover decode across several KV splits",
        date="2025-02-03T10:00:00+00:00",
        body="""
A single long sequence decodes with more than one KV split; check that it
runs to the end.
""",
        edits=[("tests/test_engine.py", R_TESTS_LATER_OLD, R_TESTS_LATER_NEW)],
    ),
    Change(
        subject="cli: pass --seed through to the engine",
        date="2025-02-05T15:45:00+00:00",
        body=SEED_FIX_BODY,
        edits=[SEED_FIX_EDIT],
    ),
    Change(
        subject="Release 0.2.0",
        date="2025-02-10T12:00:00+00:00",
        body="""
Add a changelog.
""",
        files={"CHANGELOG.md": r'''# Changelog

## 0.2.0

- cli: `--seed` now also seeds the sampling (it only seeded the prompts).
- tests: decode across several KV splits.

## 0.1.0

- Model, slot KV cache, split-K GEMM, split-KV decode attention, chunked
  RMSNorm, continuous batching engine, command line.
'''},
        edits=[("pyproject.toml", 'version = "0.1.0"', 'version = "0.2.0"')],
    ),
]


# ---------------------------------------------------------------------------
# toy-rollout: the zero-mismatch series
# ---------------------------------------------------------------------------

R_TEST_BI = r'''"""Decode must reproduce a one-shot prefill bit for bit when batch-invariant."""

import torch

from toy_rollout import Engine, ModelConfig, Request, ToyModel, random_weights
from toy_rollout import batch_invariant as bi


def _model(dtype, flag=True):
    cfg = ModelConfig()
    return ToyModel(cfg, random_weights(cfg, seed=0), dtype=dtype, batch_invariant=flag)


def _check(dtype):
    model = _model(dtype)
    reqs = [Request(f"r{i}", [(7 * i + j) % 300 + 1 for j in range(2 + 3 * i)], max_new_tokens=6) for i in range(4)]
    out = Engine(model, max_running=3).generate(reqs)
    for c in out:
        seq = c.prompt + c.tokens
        n = len(c.prompt)
        for i, (tok, lp) in enumerate(zip(c.tokens, c.logprobs)):
            cache = model.new_cache(1, len(seq))
            logits = model.prefill(torch.tensor(seq[: n + i]), cache, cache.alloc())
            ref = float(bi.log_softmax(logits)[tok])
            assert ref == lp, (c.id, i, ref, lp)


def test_decode_equals_prefill_fp32():
    _check(torch.float32)


def test_decode_equals_prefill_bf16():
    _check(torch.bfloat16)


def test_switch(monkeypatch):
    monkeypatch.setenv(bi.ENV_VAR, "0")
    assert _model(torch.float32, None).batch_invariant is False
    monkeypatch.setenv(bi.ENV_VAR, "1")
    assert _model(torch.float32, None).batch_invariant is True
'''

R_README_BI = r'''
## Batch invariance (zero-mismatch RL)

By default every kernel runs in its batch-invariant form
(`toy_rollout/batch_invariant.py`): a token's logits, and the log-probability
returned with it, have the same bits whether it is decoded alone, in a batch
of any size, or as part of a prefill, and they equal the trainer's
teacher-forced log-probabilities bit for bit (the trainer ships the same
file). `TOY_BATCH_INVARIANT=0` (or `batch_invariant=False`, or
`--batch-invariant 0`) restores the faster, batch-dependent kernels.
'''

ROLLOUT_SERIES = [
    Change(
        subject="cli: pass --seed through to the engine",
        date="2025-02-01T09:00:00+00:00",
        body=SEED_FIX_BODY,
        edits=[SEED_FIX_EDIT],
    ),
    Change(
        subject="Add batch-invariant kernels shared with the trainer",
        date="2025-02-01T09:10:00+00:00",
        body="""
The trainer recomputes the log-probability of every sampled token, and RL
wants it to equal the rollout's bit for bit. It does not today: each kernel
picks its reduction order from the shape of the work (split-K count from
the number of rows, split-KV count from batch and cache length, a BLAS
kernel from the number of rows, one attention code path for prefill and
another for decode), and floating-point addition is not associative.

Add toy_rollout/batch_invariant.py with kernels whose per-row result does
not depend on how many rows are processed together or on decode versus
prefill:

- ordered_sum: pairwise sums in fixed blocks of 16, blocks added left to
  right; zero padding at the end is invisible, so a masked reduction over
  a longer axis equals the reduction over the exact length;
- linear: fixed K chunks of 64 columns, one fixed-shape GEMM call per row,
  chunk results added in fp32 with ordered_sum;
- rms_norm, silu, log_softmax and attention built from ordered_sum and
  element-wise ops only.

The trainer gets the very same file, so both sides share one reduction
order. Nothing uses it yet; TOY_BATCH_INVARIANT (default on) is the switch.
""",
        files={"toy_rollout/batch_invariant.py": BATCH_INVARIANT_PY},
    ),
    Change(
        subject="ops: fixed split sizes for GEMM and RMSNorm",
        date="2025-02-01T09:20:00+00:00",
        body="""
linear() splits K into SPLITK_ROWS // rows slices, so the same row is
summed in 4 pieces in a decode step of 3 sequences and in one piece in a
prefill of 20 tokens, and F.linear itself picks a different kernel for a
single row. rms_norm() adds chunk sums of squares in a loop while the
trainer takes one mean.

When the model is batch-invariant, route linear, rms_norm and silu to
batch_invariant.py: K is always cut into 64-column chunks, whatever the
number of rows, each row is one GEMM call of a fixed shape, and the chunk
sums are added in a fixed order; RMSNorm uses the same ordered sum as the
trainer. ToyModel takes batch_invariant= (None: TOY_BATCH_INVARIANT,
default on) and passes it down. With the switch off, nothing changes.
""",
        edits=[
            ("toy_rollout/ops.py", '''import torch
import torch.nn.functional as F

SPLITK_ROWS''', '''import torch
import torch.nn.functional as F

from . import batch_invariant as bi

SPLITK_ROWS'''),
            ("toy_rollout/ops.py", '''def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T, split along K when there are few rows."""
    rows''', '''def linear(x: torch.Tensor, weight: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    """x @ weight.T, split along K when there are few rows.

    batch_invariant: fixed 64-column K chunks, the same for any number of rows.
    """
    if batch_invariant:
        return bi.linear(x, weight)
    rows'''),
            ("toy_rollout/ops.py", '''def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm; the sum of squares is accumulated RMS_CHUNK columns at a time."""
    xf''', '''def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, batch_invariant: bool = False) -> torch.Tensor:
    """RMSNorm; the sum of squares is accumulated RMS_CHUNK columns at a time."""
    if batch_invariant:
        return bi.rms_norm(x, weight, eps)
    xf'''),
            ("toy_rollout/ops.py", '''def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)''', '''def silu(x: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    if batch_invariant:
        return bi.silu(x)
    return F.silu(x)'''),
            ("toy_rollout/model.py", '''from .attention import decode_attention, prefill_attention
''', '''from . import batch_invariant as bi
from .attention import decode_attention, prefill_attention
'''),
            ("toy_rollout/model.py", '''    """Inference-only model; weights are a dict name -> tensor (see weights.py)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        self.cfg = cfg''', '''    """Inference-only model; weights are a dict name -> tensor (see weights.py).

    batch_invariant: use the kernels of batch_invariant.py (None: the
    TOY_BATCH_INVARIANT environment variable, default on).
    """

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 batch_invariant: bool | None = None):
        self.cfg = cfg
        self.batch_invariant = bi.enabled(batch_invariant)'''),
            ("toy_rollout/model.py", '''    def from_file(cls, path, device="cpu", dtype=torch.float32) -> "ToyModel":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype)''', '''    def from_file(cls, path, device="cpu", dtype=torch.float32, batch_invariant=None) -> "ToyModel":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype, batch_invariant=batch_invariant)'''),
            ("toy_rollout/model.py", '''        return linear(x, self.w[name])''',
             '''        return linear(x, self.w[name], batch_invariant=self.batch_invariant)'''),
            ("toy_rollout/model.py", '''        return rms_norm(x, self.w[name], self.cfg.rms_eps)''',
             '''        return rms_norm(x, self.w[name], self.cfg.rms_eps, batch_invariant=self.batch_invariant)'''),
            ("toy_rollout/model.py", '''        gate = silu(self._proj(h, f"layers.{i}.mlp.gate_proj.weight"))''',
             '''        gate = silu(self._proj(h, f"layers.{i}.mlp.gate_proj.weight"), batch_invariant=self.batch_invariant)'''),
        ],
    ),
    Change(
        subject="attention: decode replays the prefill math over the same keys",
        date="2025-02-01T09:30:00+00:00",
        body="""
A token's attention output came from two different computations: inside a
prefill, one matmul + softmax over the causal row; in a decode step, a
split-KV (flash-decoding) combination whose split count depends on the
batch size and the longest cache in the batch. Neither matches the
trainer's fused SDPA.

When batch-invariant, prefill and decode both call
batch_invariant.attention(): scores, softmax denominator and weighted sum
of values are ordered sums over the key axis with a visibility mask; keys
that are not visible (the causal future in a prefill, cache padding beyond
a sequence's length in a decode batch) contribute exact zeros, which the
ordered sum ignores. So the decode step over a cache of length L and the
prefill's (or the trainer's) row L-1 add the same numbers in the same
order. A test checks decode against a one-shot prefill of the same prefix,
bit for bit, in fp32 and bf16.
""",
        files={"tests/test_batch_invariant.py": R_TEST_BI},
        edits=[
            ("toy_rollout/attention.py", '''import torch

KV_SPLIT_MIN_KEYS''', '''import torch

from . import batch_invariant as bi

KV_SPLIT_MIN_KEYS'''),
            ("toy_rollout/attention.py", '''def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over one sequence. q, k, v: [T, heads, head_dim]."""
    t = q.shape[0]
''', '''def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    """Causal attention over one sequence. q, k, v: [T, heads, head_dim]."""
    t = q.shape[0]
    if batch_invariant:
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return bi.attention(q[None], k[None], v[None], causal[None])[0]
'''),
            ("toy_rollout/attention.py", '''def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """One query per sequence against its cached keys.

    q: [B, heads, d]; k, v: [B, L, heads, d], valid up to lengths[b]; returns [B, heads, d].
    """
''', '''def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                     batch_invariant: bool = False) -> torch.Tensor:
    """One query per sequence against its cached keys.

    q: [B, heads, d]; k, v: [B, L, heads, d], valid up to lengths[b]; returns [B, heads, d].
    batch_invariant: the prefill's reduction over the same keys, no KV split.
    """
    if batch_invariant:
        valid = torch.arange(k.shape[1], device=q.device)[None, :] < lengths[:, None]
        return bi.attention(q[:, None], k, v, valid[:, None, :])[:, 0]
'''),
            ("toy_rollout/model.py", '''            a = prefill_attention(q, k, v)''',
             '''            a = prefill_attention(q, k, v, batch_invariant=self.batch_invariant)'''),
            ("toy_rollout/model.py", '''            a = decode_attention(q, keys, values, lengths)''',
             '''            a = decode_attention(q, keys, values, lengths, batch_invariant=self.batch_invariant)'''),
        ],
    ),
    Change(
        subject="engine: score sampled tokens with the shared log-softmax",
        date="2025-02-01T09:40:00+00:00",
        body="""
The log-probability returned with each sampled token came from
torch.log_softmax, whose reduction the trainer does not share (on GPUs
its kernel and vector width depend on the row length and alignment).
When the model is batch-invariant, sample from and score with
batch_invariant.log_softmax, the trainer's function.

The command line gets --batch-invariant {0,1} (default:
TOY_BATCH_INVARIANT, on), and the README says what the switch does:
off is the upstream behaviour, the negative control of the bitwise test.
""",
        files={"README.md": R_README_1 + R_README_ENGINE + R_README_CLI + R_README_BI},
        edits=[
            ("toy_rollout/engine.py", '''import torch

from .model import ToyModel
''', '''import torch

from . import batch_invariant as bi
from .model import ToyModel
'''),
            ("toy_rollout/engine.py", '''        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
''', '''        if self.model.batch_invariant:
            logprobs = bi.log_softmax(logits).cpu()
        else:
            logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
'''),
            ("toy_rollout/__main__.py", '''    p.add_argument("--seed", type=int, default=0, help="seeds the prompts and the sampling")
''', '''    p.add_argument("--seed", type=int, default=0, help="seeds the prompts and the sampling")
    p.add_argument("--batch-invariant", choices=["0", "1"], default=None,
                   help="zero-mismatch kernels on (1) or off (0); default: TOY_BATCH_INVARIANT, on")
'''),
            ("toy_rollout/__main__.py", '''    dtype = DTYPES[args.dtype]
    if args.weights:
        model = ToyModel.from_file(args.weights, device=args.device, dtype=dtype)
''', '''    dtype = DTYPES[args.dtype]
    flag = None if args.batch_invariant is None else args.batch_invariant == "1"
    if args.weights:
        model = ToyModel.from_file(args.weights, device=args.device, dtype=dtype, batch_invariant=flag)
'''),
            ("toy_rollout/__main__.py", '''        model = ToyModel(cfg, random_weights(cfg, seed=args.seed), device=args.device, dtype=dtype)
''', '''        model = ToyModel(cfg, random_weights(cfg, seed=args.seed), device=args.device, dtype=dtype,
                         batch_invariant=flag)
'''),
        ],
    ),
]


# ===========================================================================
# toy-trainer upstream
# ===========================================================================

T_README_1 = r'''# toy-trainer

A tiny policy trainer for experiments with reinforcement learning on language
models, in plain PyTorch: a decoder-only transformer (learned positions,
RMSNorm, SiLU-gated MLP, weights in one safetensors file) run teacher-forced
over prompt + response in one pass, training style.
'''

T_README_2 = r'''
## Usage

```python
from toy_trainer import ToyPolicy, response_logprobs, train_step

policy = ToyPolicy.from_file("weights.safetensors")
logprobs = response_logprobs(policy, prompts, responses)  # one tensor per sequence
loss = train_step(policy, prompts, responses, advantages, lr=1e-3)
```

Sequences are right-padded into one [batch, time] tensor; the log-probability
of response token i comes from the logits at position len(prompt) - 1 + i.
'''

T_PYPROJECT = r'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "toy-trainer"
version = "0.1.0"
description = "A tiny policy trainer: teacher-forced log-probs and a policy-gradient step"
requires-python = ">=3.9"
dependencies = ["torch", "safetensors"]
'''

T_INIT_1 = r'''"""toy_trainer: a tiny policy trainer (teacher-forced forward, policy-gradient step)."""

from .weights import ModelConfig, load_weights, random_weights, save_weights

__all__ = ["ModelConfig", "load_weights", "random_weights", "save_weights"]
'''

T_OPS = r'''"""Building blocks of the training forward pass."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Causal self-attention over right-padded sequences.

    q, k, v: [B, T, heads, d]; lengths: [B]. With right padding the causal
    mask alone keeps every real token away from the padding.
    """
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)
'''

T_MODEL = r'''"""The policy: a decoder-only transformer, teacher-forced over whole sequences."""

from __future__ import annotations

import torch

from .ops import attention, linear, rms_norm, silu
from .weights import ModelConfig, load_weights


def _attr(name: str) -> str:
    return name.replace(".", "__")


class ToyPolicy(torch.nn.Module):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg = cfg
        for name, t in weights.items():
            self.register_parameter(_attr(name), torch.nn.Parameter(t.to(device=device, dtype=dtype)))

    @classmethod
    def from_file(cls, path, device="cpu", dtype=torch.float32) -> "ToyPolicy":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype)

    def weight(self, name: str) -> torch.Tensor:
        return getattr(self, _attr(name))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids: [B, T] right-padded, lengths: [B]; returns logits [B, T, vocab]."""
        cfg = self.cfg
        w = self.weight
        b, t = ids.shape
        x = w("embed.weight")[ids] + w("pos_embed.weight")[torch.arange(t, device=ids.device)]
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            h = rms_norm(x, w(p + "attn_norm.weight"), cfg.rms_eps)
            q = linear(h, w(p + "attn.q_proj.weight")).view(b, t, cfg.num_heads, cfg.head_dim)
            k = linear(h, w(p + "attn.k_proj.weight")).view(b, t, cfg.num_heads, cfg.head_dim)
            v = linear(h, w(p + "attn.v_proj.weight")).view(b, t, cfg.num_heads, cfg.head_dim)
            a = attention(q, k, v, lengths).reshape(b, t, cfg.hidden_size)
            x = x + linear(a, w(p + "attn.o_proj.weight"))
            h = rms_norm(x, w(p + "mlp_norm.weight"), cfg.rms_eps)
            gate = silu(linear(h, w(p + "mlp.gate_proj.weight")))
            x = x + linear(gate * linear(h, w(p + "mlp.up_proj.weight")), w(p + "mlp.down_proj.weight"))
        return linear(rms_norm(x, w("norm.weight"), cfg.rms_eps), w("lm_head.weight"))
'''

T_LOGPROBS = r'''"""Log-probabilities of response tokens, teacher-forced."""

from __future__ import annotations

import torch

from .model import ToyPolicy


def pack(prompts, responses, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad prompt + response of every sequence into ids [B, T]; also return lengths."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    ids = torch.zeros(len(seqs), max(len(s) for s in seqs), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    return ids.to(device), torch.tensor([len(s) for s in seqs], device=device)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)


def response_logprobs(policy: ToyPolicy, prompts, responses) -> list[torch.Tensor]:
    """One fp32 tensor per sequence: log p(response[i] | prompt, response[:i])."""
    device = next(policy.parameters()).device
    ids, lengths = pack(prompts, responses, device)
    logp = log_softmax(policy(ids, lengths))
    out = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        start = len(p) - 1
        tokens = torch.tensor(list(r), device=device)
        out.append(logp[i, start:start + len(r)].gather(-1, tokens[:, None])[:, 0])
    return out
'''

T_TRAIN = r'''"""One policy-gradient step."""

from __future__ import annotations

import torch

from .logprobs import response_logprobs
from .model import ToyPolicy


def train_step(policy: ToyPolicy, prompts, responses, advantages, lr: float = 1e-3) -> float:
    """REINFORCE with given advantages, plain SGD; returns the loss.

    loss = -sum_i A_i * sum_t logp_i,t / (number of response tokens)
    """
    for p in policy.parameters():
        p.grad = None
    logprobs = response_logprobs(policy, prompts, responses)
    tokens = sum(lp.numel() for lp in logprobs)
    loss = -sum(float(a) * lp.sum() for a, lp in zip(advantages, logprobs)) / tokens
    loss.backward()
    with torch.no_grad():
        for p in policy.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    return float(loss.detach())
'''

T_TESTS = r'''import torch

from toy_trainer import ModelConfig, ToyPolicy, random_weights, response_logprobs, train_step


def _policy(dtype=torch.float32):
    cfg = ModelConfig()
    return ToyPolicy(cfg, random_weights(cfg, seed=0), dtype=dtype)


PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
RESPONSES = [[10, 11], [12], [13, 14, 15, 16]]


def test_logprobs_shapes():
    with torch.no_grad():
        out = response_logprobs(_policy(), PROMPTS, RESPONSES)
    assert [t.numel() for t in out] == [2, 1, 4]
    assert all(bool((t <= 0).all()) for t in out)


def test_train_step_moves_the_policy():
    policy = _policy()
    before = policy.weight("lm_head.weight").detach().clone()
    loss = train_step(policy, PROMPTS, RESPONSES, advantages=[1.0, -0.5, 0.25], lr=1e-2)
    assert loss == loss  # not NaN
    assert not torch.equal(before, policy.weight("lm_head.weight").detach())
'''

T_TEST_BI = r'''"""Log-probs must not depend on the other sequences of the batch when batch-invariant."""

import torch

from toy_trainer import ModelConfig, ToyPolicy, random_weights, response_logprobs, train_step
from toy_trainer import batch_invariant as bi

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [12]]
RESPONSES = [[10, 11], [12], [13, 14, 15, 16, 17, 18]]


def _policy(dtype, flag=True):
    cfg = ModelConfig()
    return ToyPolicy(cfg, random_weights(cfg, seed=0), dtype=dtype, batch_invariant=flag)


def test_alone_equals_in_batch():
    for dtype in (torch.float32, torch.bfloat16):
        policy = _policy(dtype)
        with torch.no_grad():
            batch = response_logprobs(policy, PROMPTS, RESPONSES)
            for i in range(len(PROMPTS)):
                alone = response_logprobs(policy, PROMPTS[i:i + 1], RESPONSES[i:i + 1])[0]
                assert torch.equal(alone, batch[i]), (dtype, i)


def test_backward_through_the_invariant_kernels():
    policy = _policy(torch.float32)
    loss = train_step(policy, PROMPTS, RESPONSES, advantages=[1.0, -1.0, 0.5], lr=1e-2)
    assert loss == loss


def test_switch(monkeypatch):
    monkeypatch.setenv(bi.ENV_VAR, "0")
    assert _policy(torch.float32, None).batch_invariant is False
'''

T_README_BI = r'''
## Batch invariance (zero-mismatch RL)

By default the forward pass uses the batch-invariant kernels of
`toy_trainer/batch_invariant.py`, the same file as the rollout engine's: each
token's log-probability has the same bits whatever the batch, the padding and
the sequence length around it, and equals the log-probability the rollout
engine returned when it sampled the token. `TOY_BATCH_INVARIANT=0` (or
`ToyPolicy(..., batch_invariant=False)`) restores the upstream kernels (fused
SDPA, BLAS GEMMs), which are faster but only close, not equal.
'''

TRAINER_HISTORY = [
    Change(
        subject="Initial import: model configuration and safetensors weights",
        date="2025-01-07T08:00:00+00:00",
        body="""
ModelConfig, the tensor names and shapes of the policy, seeded random
weights, and loading/saving one safetensors file with the configuration in
its metadata. Same layout as toy-rollout's, so a checkpoint moves between
the two unchanged.
""",
        files={
            "README.md": T_README_1,
            "pyproject.toml": T_PYPROJECT,
            "toy_trainer/__init__.py": T_INIT_1,
            "toy_trainer/weights.py": WEIGHTS_PY,
        },
    ),
    Change(
        subject="model: teacher-forced forward with fused SDPA attention",
        date="2025-01-08T13:00:00+00:00",
        body="""
ToyPolicy (a torch.nn.Module, one Parameter per weight) runs right-padded
[batch, time] token ids in one pass: F.linear GEMMs over all rows, RMSNorm
with a mean of squares, F.scaled_dot_product_attention with a causal
mask.
""",
        files={"toy_trainer/ops.py": T_OPS, "toy_trainer/model.py": T_MODEL},
        edits=[
            ("toy_trainer/__init__.py", 'from .weights import', 'from .model import ToyPolicy\nfrom .weights import'),
            ("toy_trainer/__init__.py", '__all__ = ["ModelConfig",', '__all__ = ["ModelConfig", "ToyPolicy",'),
        ],
    ),
    Change(
        subject="logprobs: score the response tokens of a padded batch",
        date="2025-01-10T17:30:00+00:00",
        body="""
response_logprobs() packs prompt + response of every sequence into one
right-padded batch, runs the policy once and gathers, for response token
i, the log-softmax of the logits at position len(prompt) - 1 + i.
""",
        files={"toy_trainer/logprobs.py": T_LOGPROBS, "README.md": T_README_1 + T_README_2},
        edits=[
            ("toy_trainer/__init__.py", 'from .model import ToyPolicy\n',
             'from .logprobs import pack, response_logprobs\nfrom .model import ToyPolicy\n'),
            ("toy_trainer/__init__.py", '"ToyPolicy",', '"ToyPolicy", "pack", "response_logprobs",'),
        ],
    ),
    Change(
        subject="train: policy-gradient step with plain SGD",
        date="2025-01-13T10:00:00+00:00",
        body="""
train_step() computes the response log-probs with autograd on, the
REINFORCE loss with the given per-sequence advantages, runs backward and
applies one SGD update.
""",
        files={"toy_trainer/train.py": T_TRAIN},
        edits=[
            ("toy_trainer/__init__.py", 'from .model import ToyPolicy\n',
             'from .model import ToyPolicy\nfrom .train import train_step\n'),
            ("toy_trainer/__init__.py", '"response_logprobs",', '"response_logprobs", "train_step",'),
        ],
    ),
    Change(
        subject="Add tests",
        date="2025-01-15T09:30:00+00:00",
        body="""
Shapes and signs of the log-probs; a train step moves the weights.
""",
        files={"tests/test_trainer.py": T_TESTS},
    ),
]

TRAINER_LATER = [
    Change(
        subject="Add a changelog",
        date="2025-02-04T11:00:00+00:00",
        body="""
Start a changelog for the 0.1 series.
""",
        files={"CHANGELOG.md": r'''# Changelog

## 0.1.0

- Teacher-forced forward (fused SDPA), response log-probs of a padded
  batch, policy-gradient step with SGD.
'''},
    ),
]

TRAINER_SERIES = [
    Change(
        subject="Add batch-invariant kernels shared with the rollout engine",
        date="2025-02-01T10:00:00+00:00",
        body="""
The rollout engine returns a log-probability with every sampled token and
this trainer recomputes it; for RL they must agree bit for bit. Add
toy_trainer/batch_invariant.py, byte for byte the rollout engine's file:
GEMM with fixed 64-column K chunks and one fixed-shape call per row, an
ordered sum (pairwise in fixed blocks of 16, blocks left to right, blind
to zero padding), and RMSNorm, SiLU, log-softmax and masked attention
built from it. One reduction order, shared by both sides.

Nothing uses it yet; TOY_BATCH_INVARIANT (default on) is the switch.
""",
        files={"toy_trainer/batch_invariant.py": BATCH_INVARIANT_PY},
    ),
    Change(
        subject="ops: batch-invariant GEMM, RMSNorm and SiLU",
        date="2025-02-01T10:10:00+00:00",
        body="""
F.linear over the [batch * time, hidden] rows lets BLAS choose its kernel
and blocking from the number of rows, so a token's projection changes with
the batch and the padding around it, and never equals the rollout's
decode-step projection of the same token. The mean of squares in RMSNorm
is another reduction order than the rollout's.

ToyPolicy takes batch_invariant= (None: TOY_BATCH_INVARIANT, default on);
when set, linear, rms_norm and silu go to batch_invariant.py: per-row
GEMMs of one fixed shape, fixed K chunks added in a fixed order, the
shared ordered sum for RMSNorm. All of it is differentiable, so
train_step's backward runs through the same kernels.
""",
        edits=[
            ("toy_trainer/ops.py", '''import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()''', '''import torch
import torch.nn.functional as F

from . import batch_invariant as bi


def linear(x: torch.Tensor, weight: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    if batch_invariant:
        return bi.linear(x, weight)
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, batch_invariant: bool = False) -> torch.Tensor:
    if batch_invariant:
        return bi.rms_norm(x, weight, eps)
    xf = x.float()'''),
            ("toy_trainer/ops.py", '''def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)''', '''def silu(x: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    if batch_invariant:
        return bi.silu(x)
    return F.silu(x)'''),
            ("toy_trainer/model.py", '''import torch

from .ops import''', '''import torch

from . import batch_invariant as bi
from .ops import'''),
            ("toy_trainer/model.py", '''class ToyPolicy(torch.nn.Module):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg = cfg
''', '''class ToyPolicy(torch.nn.Module):
    """batch_invariant: use the kernels of batch_invariant.py (None: the
    TOY_BATCH_INVARIANT environment variable, default on)."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 batch_invariant: bool | None = None):
        super().__init__()
        self.cfg = cfg
        self.batch_invariant = bi.enabled(batch_invariant)
'''),
            ("toy_trainer/model.py", '''    def from_file(cls, path, device="cpu", dtype=torch.float32) -> "ToyPolicy":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype)''', '''    def from_file(cls, path, device="cpu", dtype=torch.float32, batch_invariant=None) -> "ToyPolicy":
        cfg, weights = load_weights(path)
        return cls(cfg, weights, device=device, dtype=dtype, batch_invariant=batch_invariant)'''),
            ("toy_trainer/model.py", '''        cfg = self.cfg
        w = self.weight
        b, t = ids.shape
''', '''        cfg = self.cfg
        w = self.weight
        b, t = ids.shape
        inv = self.batch_invariant

        def linear(x, weight):
            return _linear(x, weight, batch_invariant=inv)

        def rms_norm(x, weight, eps):
            return _rms_norm(x, weight, eps, batch_invariant=inv)

'''),
            ("toy_trainer/model.py", '''from .ops import attention, linear, rms_norm, silu
''', '''from .ops import attention
from .ops import linear as _linear
from .ops import rms_norm as _rms_norm
from .ops import silu
'''),
            ("toy_trainer/model.py", '''            gate = silu(linear(h, w(p + "mlp.gate_proj.weight")))''',
             '''            gate = silu(linear(h, w(p + "mlp.gate_proj.weight")), batch_invariant=inv)'''),
        ],
    ),
    Change(
        subject="attention: causal rows in the rollout's decode order",
        date="2025-02-01T10:20:00+00:00",
        body="""
The fused SDPA kernel tiles the key axis its own way; the rollout engine
computes a token's attention in a decode step over exactly the keys before
it. When batch-invariant, use batch_invariant.attention() with the
visibility mask (causal, and key < sequence length): for the query at
position t the keys after t and the padding contribute exact zeros, which
the ordered sum ignores, so row t is reduced over keys 0..t in the very
order of the rollout's decode step with a cache of length t + 1,
whatever T and the batch are.

A test checks that a sequence scored alone and inside a padded batch gets
the same bits (fp32 and bf16), and that backward runs.
""",
        files={"tests/test_batch_invariant.py": T_TEST_BI},
        edits=[
            ("toy_trainer/ops.py", '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Causal self-attention over right-padded sequences.

    q, k, v: [B, T, heads, d]; lengths: [B]. With right padding the causal
    mask alone keeps every real token away from the padding.
    """
''', '''def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
              batch_invariant: bool = False) -> torch.Tensor:
    """Causal self-attention over right-padded sequences.

    q, k, v: [B, T, heads, d]; lengths: [B]. With right padding the causal
    mask alone keeps every real token away from the padding.
    batch_invariant: each row reduced over exactly its visible keys, in the
    rollout's decode order.
    """
    if batch_invariant:
        t = q.shape[1]
        pos = torch.arange(t, device=q.device)
        valid = (pos[None, :] <= pos[:, None])[None] & (pos[None, None, :] < lengths[:, None, None])
        return bi.attention(q, k, v, valid)
'''),
            ("toy_trainer/model.py", '''            a = attention(q, k, v, lengths).reshape''',
             '''            a = attention(q, k, v, lengths, batch_invariant=inv).reshape'''),
        ],
    ),
    Change(
        subject="logprobs: score with the shared log-softmax",
        date="2025-02-01T10:30:00+00:00",
        body="""
torch.log_softmax reduces over the vocabulary in its own kernel; the
rollout engine scores the token it samples with batch_invariant.
log_softmax. When the policy is batch-invariant, use that function here
too, so the last reduction is shared as well. Document the switch:
TOY_BATCH_INVARIANT=0 restores the upstream kernels, the negative control
of the bitwise test.
""",
        files={"README.md": T_README_1 + T_README_2 + T_README_BI},
        edits=[
            ("toy_trainer/logprobs.py", '''import torch

from .model import ToyPolicy
''', '''import torch

from . import batch_invariant as bi
from .model import ToyPolicy
'''),
            ("toy_trainer/logprobs.py", '''def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)
''', '''def log_softmax(logits: torch.Tensor, batch_invariant: bool = False) -> torch.Tensor:
    if batch_invariant:
        return bi.log_softmax(logits)
    return torch.log_softmax(logits.float(), dim=-1)
'''),
            ("toy_trainer/logprobs.py", '''    logp = log_softmax(policy(ids, lengths))
''', '''    logp = log_softmax(policy(ids, lengths), batch_invariant=policy.batch_invariant)
'''),
        ],
    ),
]


# ===========================================================================
# generation
# ===========================================================================

@dataclass
class Component:
    key: str
    bundle: str
    who: tuple[str, str]
    history: list[Change]
    later: list[Change]
    series: list[Change]


COMPONENTS = [
    Component("rollout", "toy-rollout", ROLLOUT_UPSTREAM, ROLLOUT_HISTORY, ROLLOUT_LATER, ROLLOUT_SERIES),
    Component("trainer", "toy-trainer", TRAINER_UPSTREAM, TRAINER_HISTORY, TRAINER_LATER, TRAINER_SERIES),
]

MANIFEST = """model: demo
title: Demo (toy rollout engine + toy trainer)
components:
  rollout:
    upstream: upstreams/toy-rollout.bundle
    commit: {rollout}
    track: main
    smoke:
      - name: import
        run: python -c "import toy_rollout"
        timeout: 300
  trainer:
    upstream: upstreams/toy-trainer.bundle
    commit: {trainer}
    track: main
    smoke:
      - name: import
        run: python -c "import toy_trainer"
        timeout: 300
smoke:
  - name: bitwise-logprobs
    needs: [rollout, trainer]
    run: python scripts/demo_bitwise.py
    timeout: 900
"""

ENV: dict[str, str] = {}


def write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def bundle_heads(path: Path) -> str:
    proc = subprocess.run(["git", *GIT_OPTS, "bundle", "list-heads", str(path)],
                          env=ENV, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def build_component(comp: Component, work: Path, out: Path) -> dict:
    repo = work / comp.bundle
    repo.mkdir()
    git(repo, "init", "-q", env=ENV)
    state: dict[str, str] = {}
    history = [commit(repo, state, ch, comp.who) for ch in comp.history]
    pin = history[-1]
    pin_state = dict(state)
    later = [commit(repo, state, ch, comp.who) for ch in comp.later]
    head = later[-1] if later else pin

    # The bundle: branch main (and HEAD), the whole history.
    bundle = out / "upstreams" / f"{comp.bundle}.bundle"
    tmp = work / f"{comp.bundle}.bundle"
    git(repo, "bundle", "create", "-q", str(tmp), "HEAD", "main", env=ENV)
    if bundle.exists() and bundle_heads(bundle) == bundle_heads(tmp):
        pass  # same refs, same commits: keep the file as it is
    else:
        bundle.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp, bundle)

    # The series: commits on top of the pin, exported one mail per commit.
    git(repo, "checkout", "-q", "-b", "zmr-series", pin, env=ENV)
    state = pin_state
    shas = [commit(repo, state, ch, ZMR_AUTHOR) for ch in comp.series]
    pdir = out / "patches" / "demo" / comp.key
    pdir.mkdir(parents=True, exist_ok=True)
    names = []
    for n, (sha, ch) in enumerate(zip(shas, comp.series), 1):
        name = f"{n:04d}-{slug(ch.subject)}.patch"
        text = git(repo, *FORMAT_PATCH, "-1", sha, env=ENV)
        write_if_changed(pdir / name, text.encode("utf-8"))
        names.append(name)
    for stale in pdir.glob("*.patch"):
        if stale.name not in names:
            stale.unlink()
    series = "# Zero-mismatch series for the demo " + comp.key + " (generated by scripts/make_demo.py)\n"
    series += "".join(n + "\n" for n in names)
    write_if_changed(pdir / "series", series.encode("utf-8"))
    return {"repo": repo, "history": history, "pin": pin, "later": later, "head": head, "names": names, "shas": shas}


def patch_id(repo: Path, diff: str) -> str:
    return git(repo, "patch-id", "--stable", env=ENV, input=diff).split()[0]


def self_check(comp: Component, info: dict, out: Path, work: Path) -> list[str]:
    """What must hold for zmr upstreamed/rebase to have something real to do."""
    notes = []
    repo = info["repo"]
    pdir = out / "patches" / "demo" / comp.key
    # 1. A later upstream commit carries the same change as a patch (rollout).
    upstream_ids = {patch_id(repo, git(repo, "show", sha, env=ENV)): sha for sha in info["later"]}
    landed = []
    for name in info["names"]:
        pid = patch_id(repo, (pdir / name).read_text())
        if pid in upstream_ids:
            landed.append(name)
            notes.append(f"{comp.key}: {name} landed upstream as {upstream_ids[pid]}")
    if comp.key == "rollout" and not landed:
        raise SystemExit("self-check: no rollout patch is upstream after the pin")
    # 2. The series applies on the pin, and the rest of it on the newest upstream.
    for base, skip in ((info["pin"], set()), (info["head"], set(landed))):
        tree = work / f"check-{comp.key}-{base[:8]}"
        git(repo, "worktree", "add", "-q", "--detach", str(tree), base, env=ENV)
        env = dict(ENV)
        env.update(GIT_COMMITTER_NAME=ZMR_AUTHOR[0], GIT_COMMITTER_EMAIL=ZMR_AUTHOR[1],
                   GIT_COMMITTER_DATE="2025-03-01T00:00:00+00:00")
        patches = [str(pdir / n) for n in info["names"] if n not in skip]
        git(tree, "am", "-q", "--no-3way", *patches, env=env)
        notes.append(f"{comp.key}: {len(patches)} patches apply on {base}")
    return notes


def generate(out: Path, quiet: bool = False) -> dict:
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="zmr-make-demo-") as tmpdir:
        work = Path(tmpdir)
        (work / "home").mkdir()
        ENV.clear()
        ENV.update(git_env(str(work / "home")))
        pins = {}
        report = {}
        for comp in COMPONENTS:
            info = build_component(comp, work, out)
            notes = self_check(comp, info, out, work)
            pins[comp.key] = info["pin"]
            report[comp.key] = {"pin": info["pin"], "head": info["head"], "later": info["later"],
                                "patches": info["names"], "notes": notes}
        manifest = MANIFEST.format(**pins)
        write_if_changed(out / "manifests" / "demo.yaml", manifest.encode("utf-8"))
    if not quiet:
        for key, r in report.items():
            print(f"{key}: pin {r['pin']}, upstream main {r['head']} ({len(r['later'])} later commits)")
            for name in r["patches"]:
                print(f"  {name}")
            for note in r["notes"]:
                print(f"  - {note}")
    return report


OUTPUTS = [
    "upstreams/toy-rollout.bundle", "upstreams/toy-trainer.bundle", "manifests/demo.yaml",
    "patches/demo/rollout", "patches/demo/trainer",
]


def check(root: Path) -> int:
    """Regenerate into a temporary folder and compare with root; 0 if equal."""
    with tempfile.TemporaryDirectory(prefix="zmr-make-demo-check-") as tmp:
        generate(Path(tmp), quiet=True)
        bad = []
        for rel in OUTPUTS:
            a, b = Path(tmp) / rel, root / rel
            if a.suffix == ".bundle":
                if not b.exists() or bundle_heads(a) != bundle_heads(b):
                    bad.append(rel)
            elif a.is_dir():
                cmp = filecmp.dircmp(a, b) if b.is_dir() else None
                if cmp is None or cmp.left_only or cmp.right_only or filecmp.cmpfiles(a, b, os.listdir(a), shallow=False)[1:] != ([], []):
                    bad.append(rel)
            elif not b.exists() or a.read_bytes() != b.read_bytes():
                bad.append(rel)
    for rel in bad:
        print(f"differs: {rel} (run python scripts/make_demo.py)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repository)")
    p.add_argument("--check", action="store_true", help="compare a fresh generation with --out; exit 1 on difference")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.check:
        return check(args.out.resolve())
    generate(args.out, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
