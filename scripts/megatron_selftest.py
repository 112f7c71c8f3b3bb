#!/usr/bin/env python3
"""Self-test of zmr.evidence.adapters.megatron on a tiny GPTModel: a GPU with megatron-core (the CPU runs a dry run of the plumbing).

    python scripts/megatron_selftest.py [float32|bfloat16 ...]   # prints JSON

A tiny ``GPTModel`` (local layer spec, RoPE, TP = PP = 1): the adapter against
plain forwards. Compares, per response token: batched right padding vs one
sequence at a time, left vs right padding, both against a manual forward of
the unpadded sequence with ``log_softmax`` (so masks and positions are right
when the numbers agree up to the GEMM's batch-shape rounding), and the two
log-prob methods; a control with a deliberately wrong mask must differ. The
H200 figures are cases/vllm-cpu/evidence/megatron-selftest-h200.json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from zmr.evidence.adapters import megatron as zm
from zmr.evidence.adapters.common import Sequence, response_logits, unpack


def tiny_gpt(dtype: str, seed: int, device: str) -> Any:
    """A two-layer GPTModel (RMSNorm, SwiGLU, RoPE, GQA) on *device*, parallel state initialised for one process."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    if device == "cuda":
        torch.cuda.set_device(0)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if device == "cuda":
        model_parallel_cuda_manual_seed(seed)
    else:
        torch.manual_seed(seed)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    config = TransformerConfig(
        num_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=256,
        params_dtype=torch_dtype,
        bf16=dtype == "bfloat16",
        init_method_std=0.08,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=device != "cuda",
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=512,
        max_sequence_length=256,
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
    )
    return model.to(device).eval()


def random_sequences(seed: int, count: int = 8) -> list[Sequence]:
    import torch

    g = torch.Generator().manual_seed(seed)
    seqs = []
    for i in range(count):
        p = torch.randint(4, 512, (int(torch.randint(3, 60, (1,), generator=g)),), generator=g).tolist()
        r = torch.randint(4, 512, (int(torch.randint(2, 30, (1,), generator=g)),), generator=g).tolist()
        seqs.append(Sequence(p, r, id=f"s{i}"))
    return seqs


def manual_logprobs(model: Any, s: Sequence, device: str) -> Any:
    """One unpadded sequence through a plain forward and ``log_softmax``: the reference."""
    import torch

    ids = torch.tensor([list(s.prompt) + list(s.response)], device=device)
    T = ids.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)[None, None]
    with torch.inference_mode():
        logits = zm.model_logits(model(ids, torch.arange(T, device=device)[None], mask))
    lp = torch.log_softmax(logits[0].float(), -1)
    P = len(s.prompt)
    return torch.stack([lp[P - 1 + j, t] for j, t in enumerate(s.response)]).cpu()


def stats(a: list[Any], b: list[Any]) -> dict[str, Any]:
    import torch

    x, y = torch.cat(a), torch.cat(b)
    return {"tokens": int(x.numel()), "bitwise_equal": int((x.view(torch.int32) == y.view(torch.int32)).sum()), "max_abs_diff": float((x - y).abs().max())}


def selftest(dtype: str = "float32", *, seed: int = 0, device: str | None = None) -> dict[str, Any]:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = tiny_gpt(dtype, seed, device)
    seqs = random_sequences(seed)
    right = zm.teacher_forced_logprobs(model, seqs, padding="right", batch_size=8)
    left = zm.teacher_forced_logprobs(model, seqs, padding="left", batch_size=8)
    alone = [(zm.teacher_forced_logprobs(model, [s]) or [None])[0] for s in seqs]
    man = [manual_logprobs(model, s, device) for s in seqs]
    vp = zm.teacher_forced_logprobs(model, seqs, padding="right", batch_size=8, method="vocab_parallel")
    # a control: positions/mask deliberately wrong (left padding without the padding mask) must differ
    packed, _ = zm.build_inputs(seqs, padding="left", device=device)
    causal_only = zm.causal_padding_mask(torch.ones_like(packed.attention_mask))
    with torch.inference_mode():
        bad_logits = zm.model_logits(model(packed.input_ids, packed.position_ids, causal_only))
    bad = unpack(zm.logprobs_from_logits(response_logits(bad_logits, packed), packed.targets), packed)
    assert right is not None and left is not None and vp is not None  # one pipeline stage: the last
    return {
        "dtype": dtype,
        "megatron_core": zm.provenance(model).get("megatron_core_version"),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "sequences": len(seqs),
        "right_padded_batch_vs_alone": stats(right, alone),
        "left_vs_right_padding": stats(left, right),
        "alone_vs_manual": stats(alone, man),
        "right_padded_batch_vs_manual": stats(right, man),
        "vocab_parallel_vs_log_softmax": stats(vp, right),
        "control_left_padding_without_padding_mask_vs_manual": stats(bad, man),
    }


if __name__ == "__main__":
    print(json.dumps({d: selftest(d) for d in (sys.argv[1:] or ["float32", "bfloat16"])}, indent=1))
