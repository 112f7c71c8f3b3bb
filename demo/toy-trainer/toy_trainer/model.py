"""The policy: a decoder-only transformer, teacher-forced over whole sequences."""

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
