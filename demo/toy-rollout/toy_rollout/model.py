"""The model: a tiny decoder-only transformer over a slot KV cache."""

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
