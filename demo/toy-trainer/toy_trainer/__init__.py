"""toy_trainer: a tiny policy trainer (teacher-forced forward, policy-gradient step)."""

from .logprobs import pack, response_logprobs
from .model import ToyPolicy
from .train import train_step
from .weights import ModelConfig, load_weights, random_weights, save_weights

__all__ = ["ModelConfig", "ToyPolicy", "pack", "response_logprobs", "train_step", "load_weights", "random_weights", "save_weights"]
