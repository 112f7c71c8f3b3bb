"""Dump adapters: turn what an engine or a trainer computed into log-prob dump records.

Optional extras, never imported by zmr's commands. Each module imports its
framework (vLLM, torch, megatron-core) only inside its functions, so
``import zmr.evidence.adapters.vllm`` works without vLLM installed, and records built
from saved outputs need no framework at all.

Every adapter returns plain dicts ``{"id", "step", "tokens", "logprobs",
"dtype"}`` that `zmr.evidence.mismatch.write_dump` writes bit-exactly (docs/reference.md
§10), plus a provenance dict for the dump's metadata line:

- `zmr.evidence.adapters.vllm`: the rollout side. `response_records` takes the
  ``RequestOutput``s of ``LLM.generate(..., SamplingParams(logprobs=0 or 1))``
  (sampled tokens and their log-probs); `prompt_records` the prompt's
  log-probs (``prompt_logprobs=0``); `provenance` the vLLM version, dtype,
  batch size and the environment switches that change numerics
  (``VLLM_BATCH_INVARIANT`` and the like).
- `zmr.evidence.adapters.hf`: the trainer side with a Hugging Face causal LM: a
  teacher-forced forward over prompt + response giving the response tokens'
  log-probs, batched with padding (left or right), attention mask and
  position ids.
- `zmr.evidence.adapters.megatron`: the same teacher-forced function for a
  Megatron-core ``GPTModel`` (its mask convention: True = masked out).
- `zmr.evidence.adapters.verl`: records from a verl training step's ``DataProto``
  (``rollout_log_probs`` and the actor's recomputed ``old_log_probs``, over
  ``responses`` and ``response_mask``).
- `zmr.evidence.adapters.common`: what they share (torch only): `Sequence`, `pack`,
  `gather_logprobs`, `unpack`.

A record pairs across dumps by (``step``, ``id``): give the rollout and the
trainer side the same ids (e.g. the prompt's index, ``"<prompt>/<sample>"``
for several samples per prompt).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENV_SWITCHES = (
    # vLLM: numerics-relevant switches (batch invariance, attention backend, kernels, V1 engine layout)
    "VLLM_BATCH_INVARIANT",
    "VLLM_ATTENTION_BACKEND",
    "VLLM_USE_V1",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_FLAT_LOGPROBS",
    "VLLM_USE_TRITON_FLASH_ATTN",
    "VLLM_FLASH_ATTN_VERSION",
    "VLLM_USE_DEEP_GEMM",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_CPU_SGL_KERNEL",
    "VLLM_CPU_ATTN_SPLIT_KV",  # CPU attention: batch-dependent split of the KV range (1, the default) or not (0)
    "VLLM_CPU_CI_ENV",
    # torch / BLAS / NCCL: thread counts and reduction algorithms change summation order
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "DNNL_DEFAULT_FPMATH_MODE",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "CUDA_LAUNCH_BLOCKING",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO",
    "NVTE_FUSED_ATTN",
    "NVTE_FLASH_ATTN",
)
"""Environment variables recorded in provenance when set (besides any other ``VLLM_*``)."""

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "URL", "URI", "ENDPOINT", "HOST")
# run-time identifiers vLLM sets for itself (shared-memory names, ports, ...): noise, not numerics
_RUNTIME_WORDS = ("IDENT", "SHM", "BUFFER_NAME", "PORT", "_IP", "RPC", "INSTANCE_ID", "MULTIPROC_METHOD")


def env_switches(environ: Mapping[str, str] | None = None, prefixes: tuple[str, ...] = ("VLLM_",)) -> dict[str, str]:
    """The set variables of `ENV_SWITCHES` and any ``VLLM_*`` one, minus names that may hold secrets or addresses."""
    import os

    environ = os.environ if environ is None else environ
    out = {}
    for name in sorted(environ):
        if name in ENV_SWITCHES or name.startswith(prefixes):
            if any(word in name.upper() for word in _SECRET_WORDS + _RUNTIME_WORDS):
                continue
            out[name] = str(environ[name])
    return out


def smoke_trees(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{component: commit}`` of the release trees a ``zmr smoke`` test runs on (from ZMR_COMMIT_*), for provenance.trees."""
    import os
    import re

    environ = os.environ if environ is None else environ
    commit = re.compile(r"[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?")
    trees = {}
    for name, value in environ.items():
        if name.startswith("ZMR_COMMIT_") and commit.fullmatch(value or ""):
            trees[name[len("ZMR_COMMIT_") :].lower().replace("_", "-")] = value
    if not trees and environ.get("ZMR_COMPONENT") and commit.fullmatch(environ.get("ZMR_COMMIT", "")):
        trees[environ["ZMR_COMPONENT"]] = environ["ZMR_COMMIT"]
    return trees


def finish_provenance(
    prov: dict[str, Any], *, batch_size: int | None = None, padding: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The tail every adapter's provenance shares: batch size, padding, env switches, release trees, extras."""
    if batch_size is not None:
        prov["batch_size"] = int(batch_size)
    if padding is not None:
        prov["padding"] = padding
    prov["env"] = env_switches()
    trees = smoke_trees()
    if trees:
        prov["trees"] = trees
    if extra:
        prov.update(extra)
    return prov
