"""What the trainer-side adapters share: batching prompt + response, and gathering log-probs.

Torch is imported inside the functions. The layout of a packed batch:

- ``input_ids`` [B, T]: prompt + response of each sequence, padded to the
  longest with ``pad_id``; ``padding="right"`` puts the padding after the
  tokens, ``"left"`` before them.
- ``attention_mask`` [B, T]: 1 on real tokens, 0 on padding.
- ``position_ids`` [B, T]: 0, 1, ... counted over real tokens only (so a
  left-padded row starts at 0 on its first real token, like the rollout
  engine saw it); 0 on padding.
- ``targets`` [B, R]: the response tokens, right-padded to the longest
  response ``R``; ``target_mask`` [B, R] marks the real ones.
- ``logit_index`` [B, R]: for response token j of row b, the column of the
  logits that predicts it (the position just before it). Padding entries
  point at a valid column; `target_mask` says to ignore them.

The log-prob of token y from a row of logits z is
``log_softmax(float32(z / temperature))[y]``: vLLM's formula (``logits.float()``
then ``log_softmax``), so a trainer that agrees with the engine in every bit
of z agrees in every bit of the log-prob.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence as _Seq
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sequence:
    """One prompt + response to score; `id` and `step` pair it with the rollout dump."""

    prompt: _Seq[int]
    response: _Seq[int]
    id: str | int = 0
    step: int = 0


@dataclass
class Packed:
    """A padded batch (see the module doc for each field)."""

    input_ids: Any
    attention_mask: Any
    position_ids: Any
    targets: Any
    target_mask: Any
    logit_index: Any
    lengths: list[int]  # prompt + response per row
    response_lengths: list[int]
    offsets: list[int]  # first real column of each row (0 with right padding)


def as_sequences(items: Iterable[Any]) -> list[Sequence]:
    """`Sequence`s from Sequences, (prompt, response) pairs or dicts with prompt/response (+ id, step)."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Sequence):
            out.append(item)
        elif isinstance(item, dict):
            out.append(Sequence(list(item["prompt"]), list(item["response"]), item.get("id", i), int(item.get("step", 0))))
        else:
            prompt, response = item
            out.append(Sequence(list(prompt), list(response), i, 0))
    for s in out:
        if len(s.prompt) < 1:
            raise ValueError(f"sequence {s.id!r}: the prompt is empty; the first response token needs a token before it")
        if len(s.response) < 1:
            raise ValueError(f"sequence {s.id!r}: the response is empty")
    return out


def pack(sequences: _Seq[Sequence], *, padding: str = "right", pad_id: int = 0, device: Any = None) -> Packed:
    """Pad prompt + response of each sequence into one batch (module doc: the layout)."""
    import torch

    if padding not in ("left", "right"):
        raise ValueError(f"padding must be 'left' or 'right', not {padding!r}")
    seqs = as_sequences(sequences)
    if not seqs:
        raise ValueError("no sequences to pack")
    lengths = [len(s.prompt) + len(s.response) for s in seqs]
    rlens = [len(s.response) for s in seqs]
    T, R, B = max(lengths), max(rlens), len(seqs)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    targets = torch.full((B, R), pad_id, dtype=torch.long)
    target_mask = torch.zeros((B, R), dtype=torch.bool)
    logit_index = torch.zeros((B, R), dtype=torch.long)
    offsets = []
    for b, s in enumerate(seqs):
        tokens = torch.tensor(list(s.prompt) + list(s.response), dtype=torch.long)
        off = T - lengths[b] if padding == "left" else 0
        offsets.append(off)
        input_ids[b, off : off + lengths[b]] = tokens
        attention_mask[b, off : off + lengths[b]] = 1
        n = rlens[b]
        targets[b, :n] = torch.tensor(list(s.response), dtype=torch.long)
        target_mask[b, :n] = True
        first = off + len(s.prompt) - 1  # logits at the last prompt token predict response[0]
        logit_index[b, :n] = torch.arange(first, first + n)
        logit_index[b, n:] = first
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0) * attention_mask
    if device is not None:
        input_ids, attention_mask, position_ids = input_ids.to(device), attention_mask.to(device), position_ids.to(device)
        targets, target_mask, logit_index = targets.to(device), target_mask.to(device), logit_index.to(device)
    return Packed(input_ids, attention_mask, position_ids, targets, target_mask, logit_index, lengths, rlens, offsets)


def gather_logprobs(logits: Any, labels: Any, *, temperature: float = 1.0) -> Any:
    """log_softmax(float32(logits / temperature)) at `labels`: [..., V] x [...] -> float32 [...]."""
    import torch

    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    return torch.log_softmax(z, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def response_logits(logits: Any, packed: Packed) -> Any:
    """[B, T, V] -> [B, R, V]: the logits rows that predict each response token."""
    import torch

    index = packed.logit_index.to(logits.device)
    return torch.gather(logits, 1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


def unpack(values: Any, packed: Packed) -> list[Any]:
    """[B, R] -> one 1-D tensor per sequence (its response length), on the CPU."""
    values = values.detach().cpu()
    return [values[b, :n].clone() for b, n in enumerate(packed.response_lengths)]


def to_records(sequences: _Seq[Sequence], logprobs: _Seq[Any], *, dtype: str | None = None) -> list[dict[str, Any]]:
    """Dump records (``zmr.evidence.mismatch.write_dump``) from sequences and their per-token log-probs."""
    out = []
    for s, lp in zip(as_sequences(sequences), logprobs):
        rec = {"id": s.id if isinstance(s.id, (str, int)) else str(s.id), "step": int(s.step), "tokens": [int(t) for t in s.response], "logprobs": lp}
        if dtype is not None:
            rec["dtype"] = dtype
        out.append(rec)
    return out


def chunks(items: _Seq[Any], size: int | None) -> Iterable[tuple[int, _Seq[Any]]]:
    """(start, items[start:start+size]) in order; size None or <= 0: one chunk."""
    if not size or size <= 0:
        yield 0, items
        return
    for start in range(0, len(items), size):
        yield start, items[start : start + size]
