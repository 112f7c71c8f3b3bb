"""Slot KV cache: one slot per running sequence, preallocated."""

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
