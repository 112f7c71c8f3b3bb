"""Model configuration and weights (one safetensors file).

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
