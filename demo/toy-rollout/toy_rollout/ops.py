"""Dense building blocks of the model: GEMM, RMSNorm, SiLU.

Tuned for serving: with few rows in flight the GEMM splits its reduction
dimension so that more cores work on a decode step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SPLITK_ROWS = 16  # from this many rows on, no split
SPLITK_MAX = 4
SPLITK_MIN_COLS = 32  # columns per split at least
RMS_CHUNK = 32


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


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm; the sum of squares is accumulated RMS_CHUNK columns at a time."""
    xf = x.float()
    sum_sq = torch.zeros(*xf.shape[:-1], 1, dtype=torch.float32, device=x.device)
    for chunk in xf.split(RMS_CHUNK, dim=-1):
        sum_sq = sum_sq + chunk.pow(2).sum(-1, keepdim=True)
    return (xf * torch.rsqrt(sum_sq / xf.shape[-1] + eps)).to(x.dtype) * weight


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)
