"""Trainer side with a Hugging Face causal LM: teacher-forced log-probs of the response tokens.

    from zmr.evidence.adapters import hf
    seqs = [hf.Sequence(prompt_ids, response_ids, id="p0"), ...]
    lps = hf.teacher_forced_logprobs(model, seqs, padding="left", batch_size=8)
    write_dump("train.jsonl", hf.records(seqs, lps), provenance=hf.provenance(model))

`teacher_forced_logprobs` runs ``model(input_ids=, attention_mask=,
position_ids=)`` over prompt + response (no KV cache, one forward per batch,
like a trainer's ``compute_log_prob``) and returns, per sequence, a float32
tensor with the log-prob of each response token (`zmr.evidence.adapters.common`:
layout and formula). `model` is any callable with that signature returning
an object with ``.logits`` (a ``transformers`` ``PreTrainedModel``) or the
logits tensor itself. Padding side, batch size and temperature are
arguments; the result for a sequence does not depend on the padding side or
on its batch-mates beyond what the model's kernels do.

Caveat (transformers, not this adapter): a float64 model with eager
attention and left padding can return NaN for real tokens (the two mask
minima of a fully masked padding row add up to -inf; 0 * NaN leaks into
later layers). Use right padding, sdpa, or the trainer's own dtype.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence as _Seq
from typing import Any, cast

from zmr.evidence.adapters import finish_provenance
from zmr.evidence.adapters.common import Sequence, as_sequences, chunks, gather_logprobs, pack, response_logits, to_records, unpack

__all__ = ["Sequence", "teacher_forced_logprobs", "records", "provenance", "load"]


def _logits(out: Any) -> Any:
    return out.logits if hasattr(out, "logits") else (out[0] if isinstance(out, tuple) else out)


def teacher_forced_logprobs(
    model: Any,
    sequences: _Seq[Any],
    *,
    padding: str = "right",
    batch_size: int | None = None,
    pad_id: int | None = None,
    temperature: float = 1.0,
    device: Any = None,
) -> list[Any]:
    """Per sequence, a float32 tensor: log p(response[j] | prompt + response[:j]).

    `sequences`: `Sequence`s, (prompt, response) pairs or dicts. `padding`:
    "left" or "right". `batch_size`: sequences per forward (None: all at
    once). `pad_id`: the padding token (default: the model config's
    pad_token_id, else 0; it never influences real tokens: the attention
    mask hides it). `device`: where inputs go (default: the model's).
    """
    import torch

    seqs = as_sequences(sequences)
    if pad_id is None:
        pad_id = getattr(getattr(model, "config", None), "pad_token_id", None)
        pad_id = 0 if pad_id is None else int(pad_id)
    if device is None:
        device = _device_of(model)
    out: list[Any] = []
    with torch.inference_mode():
        for _, chunk in chunks(seqs, batch_size):
            packed = pack(chunk, padding=padding, pad_id=pad_id, device=device)
            kwargs = {"input_ids": packed.input_ids, "attention_mask": packed.attention_mask, "position_ids": packed.position_ids}
            if _accepts_use_cache(model):
                kwargs["use_cache"] = False
            logits = _logits(model(**kwargs))
            lp = gather_logprobs(response_logits(logits, packed), packed.targets, temperature=temperature)
            out.extend(unpack(lp, packed))
    return out


def _device_of(model: Any) -> Any:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return None


def _accepts_use_cache(model: Any) -> bool:
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "use_cache")


def records(sequences: _Seq[Any], logprobs: _Seq[Any]) -> list[dict[str, Any]]:
    """Dump records from `sequences` and `teacher_forced_logprobs`' result (dtype from the tensors)."""
    return to_records(as_sequences(sequences), logprobs)


def load(path: str, *, dtype: str = "float32", attn_implementation: str | None = "eager", device: str = "cpu") -> Any:
    """``AutoModelForCausalLM.from_pretrained(path)`` in `dtype` (float32, bfloat16, float16), eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[_dtype_name(dtype)]
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        kwargs["torch_dtype"] = kwargs.pop("dtype")
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return cast(Any, model).to(device).eval()  # transformers' stubs type `.to` too narrowly


def _dtype_name(dtype: Any) -> str:
    name = str(dtype).replace("torch.", "")
    return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}.get(name, name)


def provenance(model: Any = None, *, batch_size: int | None = None, padding: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance for a trainer-side dump: transformers/torch versions, model, dtype, attention kernel, env switches."""
    prov: dict[str, Any] = {"engine": "transformers", "side": "trainer"}
    torch = sys.modules.get("torch")
    if torch is not None:
        prov["torch_version"] = str(torch.__version__)
        prov["torch_threads"] = int(torch.get_num_threads())
    tf = sys.modules.get("transformers")
    if tf is not None:
        prov["transformers_version"] = str(tf.__version__)
    if model is not None:
        config = getattr(model, "config", None)
        if config is not None:
            prov["model"] = str(getattr(config, "_name_or_path", "") or type(model).__name__)
            prov["architecture"] = type(model).__name__
            impl = getattr(config, "_attn_implementation", None)
            if impl:
                prov["attn_implementation"] = str(impl)
        try:
            prov["dtype"] = _dtype_name(next(model.parameters()).dtype)
            prov["device"] = str(next(model.parameters()).device)
        except (AttributeError, StopIteration, TypeError):
            pass
    return finish_provenance(prov, batch_size=batch_size, padding=padding, extra=extra)
