"""toy_rollout: a tiny rollout engine (decoder-only transformer over a KV cache)."""

from .engine import Completion, Engine, Request
from .model import ToyModel
from .weights import ModelConfig, load_weights, random_weights, save_weights

__all__ = ["Completion", "Engine", "ModelConfig", "Request", "ToyModel", "load_weights", "random_weights", "save_weights"]
