"""Continuous batching: requests join when a slot frees up and leave when done."""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

import torch

from .model import ToyModel


@dataclass
class Request:
    id: str
    prompt: list[int]
    max_new_tokens: int


@dataclass
class Completion:
    """What the engine made of one request.

    tokens are the sampled response tokens and logprobs[i] is the log-probability
    of tokens[i] under the distribution it was sampled from. joined_step and
    finished_step are the engine steps at which the sequence entered and left the
    running batch.
    """

    id: str
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    joined_step: int = -1
    finished_step: int = -1


class Engine:
    """Serve a list of requests with continuous batching and seeded sampling."""

    def __init__(self, model: ToyModel, max_running: int = 4, seed: int = 0):
        self.model = model
        self.max_running = max_running
        self.seed = seed

    def _generator(self, request: Request) -> torch.Generator:
        # One generator per request: what a request samples does not depend
        # on which other requests share its batch.
        return torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{request.id}".encode()))

    def _sample(self, logits: torch.Tensor, generators: list[torch.Generator]):
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
        tokens, chosen = [], []
        for row, g in zip(logprobs, generators):
            tok = int(torch.multinomial(row.exp(), 1, generator=g))
            tokens.append(tok)
            chosen.append(float(row[tok]))
        return tokens, chosen

    def generate(self, requests: list[Request]) -> list[Completion]:
        model = self.model
        max_len = max(len(r.prompt) + r.max_new_tokens for r in requests)
        if max_len > model.cfg.max_positions:
            raise ValueError(f"sequence of {max_len} tokens, the model has {model.cfg.max_positions} positions")
        cache = model.new_cache(self.max_running, max_len)
        done = {r.id: Completion(r.id, list(r.prompt)) for r in requests}
        waiting = deque(requests)
        running: list[tuple[Request, int, torch.Generator]] = []
        step = 0
        while waiting or running:
            joined = []
            while waiting and len(running) < self.max_running:
                req = waiting.popleft()
                slot = cache.alloc()
                gen = self._generator(req)
                ids = torch.tensor(req.prompt, device=model.device)
                logits = model.prefill(ids, cache, slot)
                (tok,), (lp,) = self._sample(logits[None], [gen])
                comp = done[req.id]
                comp.joined_step = step
                comp.tokens.append(tok)
                comp.logprobs.append(lp)
                running.append((req, slot, gen))
                joined.append(req.id)
            decoding = [r for r in running if r[0].id not in joined and len(done[r[0].id].tokens) < r[0].max_new_tokens]
            if decoding:
                ids = torch.tensor([done[r.id].tokens[-1] for r, _, _ in decoding], device=model.device)
                logits = model.decode(ids, [slot for _, slot, _ in decoding], cache)
                tokens, lps = self._sample(logits, [g for _, _, g in decoding])
                for (req, _, _), tok, lp in zip(decoding, tokens, lps):
                    done[req.id].tokens.append(tok)
                    done[req.id].logprobs.append(lp)
            still = []
            for req, slot, gen in running:
                comp = done[req.id]
                if len(comp.tokens) >= req.max_new_tokens:
                    comp.finished_step = step
                    cache.release(slot)
                else:
                    still.append((req, slot, gen))
            running = still
            step += 1
        return [done[r.id] for r in requests]
