"""One policy-gradient step."""

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
