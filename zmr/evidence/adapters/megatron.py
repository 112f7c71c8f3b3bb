"""Trainer side with Megatron-core: teacher-forced log-probs of the response tokens from a ``GPTModel``.

    from zmr.evidence.adapters import megatron as zm
    lps = zm.teacher_forced_logprobs(gpt_model, seqs, batch_size=8)      # on the last pipeline stage
    write_dump("train.jsonl", zm.records(seqs, lps), provenance=zm.provenance(gpt_model))

The forward is ``model(input_ids, position_ids, attention_mask)`` as
``megatron.core.models.gpt.GPTModel.forward`` takes it, returning logits
``[batch, seq, vocab / TP]`` (``labels=None``). The mask follows
Megatron-core's convention: a bool ``[B, 1, T, T]`` tensor, **True where
attention is masked out** (future keys and padding keys); `build_inputs`
makes it with the input ids and position ids (`zmr.evidence.adapters.common.pack`).
With right padding (the default) a causal mask alone already hides the
padding from every real token, so models whose attention is built for a
causal mask type (``AttnMaskType.causal``, Transformer Engine's default)
give correct results; left padding needs a kernel that honours the padding
mask.

Log-probs: with tensor parallelism 1, ``log_softmax(float32(logits))``
gathered at the labels (vLLM's formula, `zmr.evidence.adapters.common`); with TP > 1
the logits are split over the vocabulary and
``megatron.core.tensor_parallel.vocab_parallel_cross_entropy`` gives minus
the log-prob (a different summation order: not bitwise comparable with a
TP = 1 log_softmax). ``method`` picks one explicitly. Pipeline parallelism:
call on the last stage (the one that has logits); others get None.

What needs CUDA is only the model; `build_inputs`, `causal_padding_mask`,
`logprobs_from_logits` and `teacher_forced_logprobs` with any callable of
that signature run on the CPU (the unit tests use a tiny torch model).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence as _Seq
from typing import Any

from zmr.evidence.adapters import finish_provenance
from zmr.evidence.adapters.common import Packed, Sequence, as_sequences, chunks, gather_logprobs, pack, response_logits, to_records, unpack

__all__ = ["Sequence", "build_inputs", "causal_padding_mask", "logprobs_from_logits", "teacher_forced_logprobs", "records", "provenance"]

METHODS = ("auto", "log_softmax", "vocab_parallel")


def causal_padding_mask(attention_mask: Any) -> Any:
    """[B, T] 1/0 (1 = real token) -> bool [B, 1, T, T], True = masked: key after query, or key is padding."""
    import torch

    B, T = attention_mask.shape
    future = torch.ones((T, T), dtype=torch.bool, device=attention_mask.device).triu(1)
    pad_key = attention_mask.eq(0)[:, None, None, :]  # [B, 1, 1, T]
    return future[None, None, :, :] | pad_key


def build_inputs(sequences: _Seq[Any], *, padding: str = "right", pad_id: int = 0, device: Any = None) -> tuple[Packed, Any]:
    """(`Packed` batch, Megatron attention mask) for `sequences`: input_ids, position_ids, mask ready for the forward."""
    packed = pack(as_sequences(sequences), padding=padding, pad_id=pad_id, device=device)
    return packed, causal_padding_mask(packed.attention_mask)


def _tp_size() -> int:
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None:
        return 1
    try:
        return int(ps.get_tensor_model_parallel_world_size()) if ps.model_parallel_is_initialized() else 1
    except Exception:  # pragma: no cover - uninitialised groups
        return 1


def logprobs_from_logits(logits: Any, labels: Any, *, temperature: float = 1.0, method: str = "auto") -> Any:
    """Log-probs of `labels` under `logits` [..., V or V/TP]; method: auto, log_softmax, vocab_parallel."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if method == "auto":
        method = "vocab_parallel" if _tp_size() > 1 else "log_softmax"
    if method == "log_softmax":
        return gather_logprobs(logits, labels, temperature=temperature)
    from megatron.core import tensor_parallel

    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    return -tensor_parallel.vocab_parallel_cross_entropy(z.contiguous(), labels)


def model_logits(out: Any) -> Any:
    """The logits of a forward's output: a tensor, a tuple that starts with it, or an object with ``.logits``."""
    if isinstance(out, tuple):
        out = out[0]
    return getattr(out, "logits", out)


def teacher_forced_logprobs(
    model: Any,
    sequences: _Seq[Any],
    *,
    padding: str = "right",
    batch_size: int | None = None,
    pad_id: int = 0,
    temperature: float = 1.0,
    method: str = "auto",
    device: Any = None,
) -> list[Any] | None:
    """Per sequence, a float32 tensor of log p(response[j] | prompt + response[:j]); None off the last PP stage."""
    import torch

    seqs = as_sequences(sequences)
    if device is None:
        try:
            device = next(model.parameters()).device
        except (AttributeError, StopIteration, TypeError):
            device = None
    out: list[Any] = []
    with torch.inference_mode():
        for _, chunk in chunks(seqs, batch_size):
            packed, mask = build_inputs(chunk, padding=padding, pad_id=pad_id, device=device)
            logits = model_logits(model(packed.input_ids, packed.position_ids, mask))
            if logits is None:  # not the last pipeline stage
                return None
            if logits.shape[:2] != packed.input_ids.shape:  # [s, b, v] layout
                logits = logits.transpose(0, 1)
            lp = logprobs_from_logits(response_logits(logits, packed), packed.targets, temperature=temperature, method=method)
            out.extend(unpack(lp, packed))
    return out


def records(sequences: _Seq[Any], logprobs: _Seq[Any]) -> list[dict[str, Any]]:
    """Dump records from `sequences` and `teacher_forced_logprobs`' result."""
    return to_records(as_sequences(sequences), logprobs)


def provenance(
    model: Any = None, *, batch_size: int | None = None, padding: str | None = None, method: str = "auto", extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Provenance for a Megatron trainer dump: megatron-core/torch/CUDA versions, TP size, dtype, env switches."""
    prov: dict[str, Any] = {"engine": "megatron-core", "side": "trainer"}
    try:
        from importlib import metadata

        prov["megatron_core_version"] = metadata.version("megatron-core")
    except Exception:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        prov["torch_version"] = str(torch.__version__)
        prov["cuda_version"] = getattr(torch.version, "cuda", None)
        if torch.cuda.is_available():
            prov["device_name"] = torch.cuda.get_device_name()
    prov["tensor_parallel_size"] = _tp_size()
    prov["logprob_method"] = ("vocab_parallel" if prov["tensor_parallel_size"] > 1 else "log_softmax") if method == "auto" else method
    if model is not None:
        prov["architecture"] = type(model).__name__
        try:
            prov["dtype"] = str(next(model.parameters()).dtype).replace("torch.", "")
        except (AttributeError, StopIteration, TypeError):
            pass
    return finish_provenance(prov, batch_size=batch_size, padding=padding, extra=extra)
