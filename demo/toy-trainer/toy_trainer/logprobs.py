"""Log-probabilities of response tokens, teacher-forced."""

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
