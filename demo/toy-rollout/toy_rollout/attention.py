"""Attention: causal prefill over one sequence, decode over a slot cache."""

from __future__ import annotations

import math

import torch

KV_SPLIT_MIN_KEYS = 16  # keys per split at least
KV_SPLIT_MAX = 8
KV_TARGET_WORK = 8  # aim for batch * splits >= this


def num_kv_splits(batch: int, max_len: int) -> int:
    """Flash-decoding split count for a decode step."""
    by_len = max(1, max_len // KV_SPLIT_MIN_KEYS)
    by_batch = max(1, -(-KV_TARGET_WORK // max(batch, 1)))
    return min(KV_SPLIT_MAX, by_len, by_batch)


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
    batch, length = k.shape[:2]
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
