"""python -m toy_rollout: serve random prompts, print one JSON line per request."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from .engine import Engine, Request
from .model import ToyModel
from .weights import ModelConfig, random_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toy_rollout", description=__doc__)
    p.add_argument("--weights", help="safetensors file (default: random weights of the size below)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=320)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-running", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=16, help="longest prompt (lengths vary from 1)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="seeds the prompts and the sampling")
    args = p.parse_args(argv)

    dtype = DTYPES[args.dtype]
    if args.weights:
        model = ToyModel.from_file(args.weights, device=args.device, dtype=dtype)
    else:
        cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers,
                          num_heads=args.heads, intermediate_size=3 * args.hidden)
        model = ToyModel(cfg, random_weights(cfg, seed=args.seed), device=args.device, dtype=dtype)
    g = torch.Generator().manual_seed(args.seed)
    requests = []
    for i in range(args.requests):
        n = int(torch.randint(1, args.prompt_len + 1, (1,), generator=g))
        prompt = torch.randint(0, model.cfg.vocab_size, (n,), generator=g).tolist()
        requests.append(Request(f"req-{i}", prompt, args.max_new_tokens))
    engine = Engine(model, max_running=args.max_running)
    for c in engine.generate(requests):
        json.dump({"id": c.id, "tokens": c.tokens, "logprobs": c.logprobs}, sys.stdout)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
