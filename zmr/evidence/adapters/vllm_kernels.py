"""Experimental: the trainer's teacher-forced forward through vLLM's own CPU kernels (the TorchTitan approach).

A Hugging Face Llama / Qwen2 model's weights, run the way vLLM's CPU worker
runs the model in eager mode (``enforce_eager=True``: custom ops on):

- GEMMs through ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``
  (oneDNN ``onednn_mm`` for fp32, the sgl ``weight_packed_linear`` on AMX for
  bf16, ...), with q/k/v and gate/up merged into one weight as vLLM merges
  them (``QKVParallelLinear``, ``MergedColumnParallelLinear``);
- RMSNorm and the fused residual add as vLLM's IR ops (``vllm.ir.ops``);
- rotary embedding with vLLM's cos/sin cache and ``ops.rotary_embedding``;
- SiLU-and-mul as vLLM's ``SiluAndMul`` on the CPU;
- attention with vLLM's CPU attention kernel (``cpu_attn_reshape_and_cache``
  + ``cpu_attention_with_kv_cache``) over a paged KV cache built for the
  batch (block size and ISA as vLLM picks them);
- logits as vLLM's ``LogitsProcessor`` (the LM head through the same GEMM
  dispatch), then ``log_softmax(float32)``.

Sequences are packed without padding (vLLM's varlen layout), so padding
side does not arise. Forward only (no backward): enough for the
rollout-vs-trainer check; a trainer would need backward passes for these
kernels (TorchTitan writes them). CPU only; needs vLLM installed.

    from zmr.evidence.adapters import hf, vllm_kernels
    model = hf.load(path, dtype="float32")
    lps = vllm_kernels.teacher_forced_logprobs(model, seqs)
"""

from __future__ import annotations

from collections.abc import Sequence as _Seq
from typing import Any, cast

from zmr.evidence.adapters.common import as_sequences

__all__ = ["teacher_forced_logprobs", "describe"]

_ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


def describe() -> dict[str, Any]:
    """What this forward uses (for provenance)."""
    return {
        "gemm": "vllm dispatch_cpu_unquantized_gemm (merged qkv / gate_up)",
        "rms_norm": "vllm.ir.ops rms_norm / fused_add_rms_norm (native)",
        "rotary": "vllm ops.rotary_embedding, vLLM cos/sin cache",
        "attention": "vllm cpu_attention_with_kv_cache (paged, causal)",
        "logits": "vllm gemm dispatch, then log_softmax(float32)",
        "matches": "vLLM on CPU with enforce_eager=True",
    }


class _Linear:
    """A weight [N, K] (+ bias) with vLLM's CPU GEMM dispatch attached."""

    def __init__(self, weight: Any, bias: Any = None) -> None:
        import torch
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        self.module: Any = cast(Any, torch.nn.Module())  # the GEMM dispatch adds attributes
        self.module.weight = torch.nn.Parameter(weight.detach().contiguous().clone(), requires_grad=False)
        self.module.bias = None if bias is None else torch.nn.Parameter(bias.detach().contiguous().clone(), requires_grad=False)
        dispatch_cpu_unquantized_gemm(self.module, remove_weight=False)

    def __call__(self, x: Any) -> Any:
        return self.module.cpu_linear(x, self.module.weight, self.module.bias)


class _Model:
    def __init__(self, hf_model: Any):
        import torch
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        cfg = hf_model.config
        arch = type(hf_model).__name__
        if arch not in _ARCHS:
            raise ValueError(f"vllm_kernels knows {', '.join(_ARCHS)}, not {arch}")
        sd = {k: v for k, v in hf_model.state_dict().items()}
        self.dtype = sd["model.embed_tokens.weight"].dtype
        self.H, self.KV = cfg.num_attention_heads, cfg.num_key_value_heads
        self.D = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.H
        self.eps = float(cfg.rms_norm_eps)
        self.embed = sd["model.embed_tokens.weight"]
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            q, k, v = (sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
            bias = None
            if p + "self_attn.q_proj.bias" in sd:
                bias = torch.cat([sd[p + f"self_attn.{n}_proj.bias"] for n in "qkv"])
            self.layers.append(
                {
                    "in_norm": sd[p + "input_layernorm.weight"],
                    "qkv": _Linear(torch.cat([q, k, v]), bias),
                    "o": _Linear(sd[p + "self_attn.o_proj.weight"]),
                    "post_norm": sd[p + "post_attention_layernorm.weight"],
                    "gate_up": _Linear(torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])),
                    "down": _Linear(sd[p + "mlp.down_proj.weight"]),
                }
            )
        self.norm = sd["model.norm.weight"]
        head = sd.get("lm_head.weight", self.embed)
        self.vocab = head.shape[0]
        self.lm_head = _Linear(head)
        # vLLM's rotary cache (RotaryEmbedding._compute_cos_sin_cache), in the model dtype
        rope = getattr(cfg, "rope_parameters", None) or {}
        base = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
        if rope.get("rope_type", "default") not in ("default", None):
            raise ValueError(f"vllm_kernels handles default RoPE only, not {rope.get('rope_type')!r}")
        inv_freq = 1.0 / (base ** (torch.arange(0, self.D, 2, dtype=torch.float) / self.D))
        t = torch.arange(cfg.max_position_embeddings, dtype=torch.float)
        freqs = torch.einsum("i,j -> ij", t, inv_freq)
        self.cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(self.dtype)
        self.block_size = 128
        self.isa = _get_attn_isa(self.dtype, self.block_size, self.D, "auto")
        self.scale = float(self.D**-0.5)

    def rms(self, x: Any, w: Any, residual: Any = None) -> tuple[Any, Any]:
        from vllm import ir

        if residual is None:
            return ir.ops.rms_norm.impls["native"].impl_fn(x, w, self.eps, None), None
        return cast("tuple[Any, Any]", ir.ops.fused_add_rms_norm.impls["native"].impl_fn(x, residual, w, self.eps, None))

    def attention(self, q: Any, k: Any, v: Any, lengths: _Seq[int]) -> Any:
        import torch
        from vllm import _custom_ops as ops
        from vllm import envs

        T = q.shape[0]
        bs = self.block_size
        blocks = [(n + bs - 1) // bs for n in lengths]
        table = torch.zeros((len(lengths), max(blocks)), dtype=torch.int32)
        slots = torch.empty(T, dtype=torch.int64)
        nxt, start = 0, 0
        for r, (n, nb) in enumerate(zip(lengths, blocks)):
            ids = torch.arange(nxt, nxt + nb, dtype=torch.int32)
            table[r, :nb] = ids
            pos = torch.arange(n)
            slots[start : start + n] = ids[pos // bs].to(torch.int64) * bs + pos % bs
            nxt, start = nxt + nb, start + n
        cache = torch.zeros((nxt, self.KV, bs, 2 * self.D), dtype=self.dtype)
        kv = cache.view((nxt, self.KV, bs * 2, -1))
        key_cache, value_cache = kv.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(k.view(T, self.KV, self.D), v.view(T, self.KV, self.D), key_cache, value_cache, slots, self.isa)
        qsl = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), 0)
        seq_lens = torch.tensor(lengths, dtype=torch.int32)
        meta = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(lengths),
            num_heads=self.H,
            num_kv_heads=self.KV,
            head_dim=self.D,
            seq_lens=seq_lens,
            dtype=self.dtype,
            query_start_loc=qsl,
            causal=True,
            sliding_window_size=-1,
            isa=self.isa,
            enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
        )
        out = torch.empty((T, self.H, self.D), dtype=self.dtype)
        ops.cpu_attention_with_kv_cache(
            query=q.view(T, self.H, self.D),
            key_cache=key_cache,
            value_cache=value_cache,
            output=out,
            query_start_loc=qsl,
            seq_lens=seq_lens,
            scale=self.scale,
            causal=True,
            alibi_slopes=None,
            sliding_window=-1,
            block_table=table,
            softcap=0,
            scheduler_metadata=meta,
            s_aux=None,
        )
        return out.view(T, self.H * self.D)

    def hidden(self, ids: Any, positions: Any, lengths: _Seq[int]) -> Any:
        import torch
        from vllm import _custom_ops as ops

        h = torch.nn.functional.embedding(ids, self.embed)
        residual = None
        nq, nk = self.H * self.D, self.KV * self.D
        for layer in self.layers:
            if residual is None:
                residual = h
                h, _ = self.rms(h, layer["in_norm"])
            else:
                h, residual = self.rms(h, layer["in_norm"], residual)
            qkv = layer["qkv"](h)
            q, k, v = qkv.split([nq, nk, nk], dim=-1)
            q, k = q.contiguous(), k.contiguous()
            ops.rotary_embedding(positions, q, k, self.D, self.cos_sin, True)
            h = layer["o"](self.attention(q, k, v.contiguous(), lengths))
            h, residual = self.rms(h, layer["post_norm"], residual)
            gu = layer["gate_up"](h)
            d = gu.shape[-1] // 2
            h = layer["down"](torch.nn.functional.silu(gu[..., :d]) * gu[..., d:])
        h, _ = self.rms(h, self.norm, residual)
        return h


_CACHE: dict[int, _Model] = {}


def _model(hf_model: Any) -> _Model:
    key = id(hf_model)
    if key not in _CACHE:
        _CACHE[key] = _Model(hf_model)
    return _CACHE[key]


def teacher_forced_logprobs(hf_model: Any, sequences: _Seq[Any], *, batch_size: int | None = None, temperature: float = 1.0) -> list[Any]:
    """Per sequence, float32 log-probs of the response tokens, computed with vLLM's CPU kernels (see the module doc)."""
    import torch

    from zmr.evidence.adapters.common import chunks

    seqs = as_sequences(sequences)
    m = _model(hf_model)
    out = []
    with torch.inference_mode():
        for _, chunk in chunks(seqs, batch_size):
            toks = [list(s.prompt) + list(s.response) for s in chunk]
            lengths = [len(t) for t in toks]
            ids = torch.tensor([t for seq in toks for t in seq], dtype=torch.long)
            positions = torch.cat([torch.arange(n) for n in lengths]).to(torch.long)
            h = m.hidden(ids, positions, lengths)
            # rows that predict the response tokens, then vLLM's logits path
            rows: list[Any] = []
            labels: list[Any] = []
            start = 0
            for s, n in zip(chunk, lengths):
                first = start + len(s.prompt) - 1
                rows.extend(range(first, first + len(s.response)))
                labels.extend(s.response)
                start += n
            logits = m.lm_head(h[torch.tensor(rows)])[..., : m.vocab]
            z = logits.to(torch.float32)
            if temperature != 1.0:
                z = z / temperature
            lp = torch.log_softmax(z, dim=-1).gather(-1, torch.tensor(labels)[:, None])[:, 0]
            at = 0
            for s in chunk:
                out.append(lp[at : at + len(s.response)].clone())
                at += len(s.response)
    return out
