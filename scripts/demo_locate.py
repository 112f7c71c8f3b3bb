#!/usr/bin/env python3
"""Record the demo's intermediate tensors on both sides, for `zmr locate`.

Runs the toy rollout engine (continuous batching, seeded sampling) and then
the toy trainer on the sampled tokens, like scripts/demo_bitwise.py, with
zmr.evidence.locate recording every GEMM, RMSNorm, SiLU and attention call of both
and the log-probability of every sampled token. Neither tree is edited: the
functions are wrapped while the run lasts (zmr.evidence.locate.trace_functions).

  python scripts/demo_locate.py --rollout T/rollout --trainer T/trainer --out build/locate
  zmr locate build/locate/rollout build/locate/trainer --map build/locate/names.yaml

Writes OUT/rollout/step-*.safetensors (one file per prefill or decode step:
rows are (request id, position) of the tokens of the step), OUT/trainer/
(one step: the trainer's teacher-forced batch, rows (request id, position)
for every position the rollout also computed), and OUT/names.yaml (the
rollout's prefill_attention/decode_attention are the trainer's attention).

Trees come from --rollout/--trainer or ZMR_TREE_ROLLOUT/ZMR_TREE_TRAINER
(e.g. `git worktree add` of rollout/demo and trainer/demo after `zmr build
demo`, or the upstream pins for the "before" picture).

--moe: the mixture-of-experts model (trees of demo-moe: toy_rollout.moe.MoEModel,
toy_trainer.moe.MoEPolicy), recording also the router (route), the expert GEMMs
(expert_outputs) and the combine of each MoE layer; --moe-combine standard runs
it with TOY_MOE_COMBINE=standard (each side's own arrival-order combine in
place of the fixed one).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
ROLLOUT_FUNCTIONS = {
    "toy_rollout.ops": ["linear", "rms_norm", "silu"],
    "toy_rollout.attention": ["prefill_attention", "decode_attention"],
}
TRAINER_FUNCTIONS = {"toy_trainer.ops": ["linear", "rms_norm", "silu", "attention"]}
MOE_FUNCTIONS = {"{pkg}.moe_invariant": ["route", "expert_outputs"], "{pkg}.moe": ["combine"]}  # with --moe, both sides


def _functions(base: dict[str, list[str]], pkg: str, moe: bool) -> dict[str, list[str]]:
    return {**base, **{m.format(pkg=pkg): names for m, names in MOE_FUNCTIONS.items()}} if moe else base
NAME_MAP = """\
# zmr locate --map: rollout operation names -> the trainer's
rollout:
  prefill_attention: attention
  decode_attention: attention
"""


def import_trees(rollout: Path, trainer: Path):
    """toy_rollout and toy_trainer from the given trees (any earlier import of them dropped)."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("toy_rollout", "toy_trainer"):
            del sys.modules[name]
    for tree in (rollout, trainer):
        while str(tree) in sys.path:
            sys.path.remove(str(tree))
    sys.path[:0] = [str(rollout), str(trainer)]
    try:
        mods = [importlib.import_module("toy_rollout"), importlib.import_module("toy_trainer")]
    finally:
        for tree in (rollout, trainer):
            while str(tree) in sys.path:
                sys.path.remove(str(tree))
    for mod, tree in zip(mods, (rollout, trainer)):
        if tree.resolve() not in Path(mod.__file__).resolve().parents:
            raise SystemExit(f"error: {mod.__name__} was imported from {mod.__file__}, not from {tree}")
    return mods


def make_requests(count: int, vocab: int, prompt_len, new_tokens, seed: int):
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < count:
        prompt = [rng.randrange(1, vocab) for _ in range(rng.randint(*prompt_len))]
        if tuple(prompt) in seen:
            continue
        seen.add(tuple(prompt))
        out.append((f"r{len(out):02d}", prompt, rng.randint(*new_tokens)))
    return out


def _traced(stack: contextlib.ExitStack, functions: dict[str, list[str]]) -> None:
    from zmr.evidence import locate

    for module, names in functions.items():
        stack.enter_context(locate.trace_functions(importlib.import_module(module), names))


def trace_engine(model, engine, requests, rec, *, sample_inputs: bool):
    """Record *engine*'s run with *rec*: one step per prefill or decode, each row named (sequence, position, token), the
    logits of a prefill's last position, and the sampled token's log-prob (with the logits as its input where
    *sample_inputs*). Installs the wrappers on *model* and *engine*; returns the function that closes the last step."""
    import torch

    from zmr.evidence import locate

    by_prompt = {tuple(p): rid for rid, p, _ in requests}
    slot_seq: dict[int, str] = {}
    state: dict = {"step": None, "rows": None, "last": None}

    def open_step(rows, label):
        close_step()
        ctx = rec.step(rows, label=label)
        ctx.__enter__()
        state["step"], state["rows"] = ctx, rows

    def close_step():
        if state["step"] is not None:
            ctx, state["step"] = state["step"], None
            ctx.__exit__(None, None, None)

    prefill, decode, logits_of, sample = model.prefill, model.decode, model._logits, engine._sample

    def traced_prefill(ids, cache, slot):
        slot_seq[slot] = sid = by_prompt[tuple(ids.tolist())]
        n = ids.shape[0]
        open_step(locate.Rows.make(sid, range(n), ids), "prefill")
        state["last"] = state["rows"].narrow(slice(n - 1, n))
        return prefill(ids, cache, slot)

    def traced_decode(ids, slots, cache):
        rows = locate.Rows.make([slot_seq[s] for s in slots], [cache.lengths[s] for s in slots], ids)
        open_step(rows, "decode")
        state["last"] = rows
        return decode(ids, slots, cache)

    def traced_logits(x):
        # A prefill computes logits for its last position only.
        with rec.rows(state["last"]) if x.shape[0] != state["rows"].size else contextlib.nullcontext():
            return logits_of(x)

    def traced_sample(logits, generators):
        tokens, chosen = sample(logits, generators)
        inputs = {"logits": logits} if sample_inputs else None
        locate.dump("token_logprob", torch.tensor(chosen, dtype=torch.float32), inputs=inputs, rows=state["last"])
        close_step()
        return tokens, chosen

    model.prefill, model.decode, model._logits, engine._sample = traced_prefill, traced_decode, traced_logits, traced_sample
    return close_step


def record_rollout(toy_rollout, weights, cfg, requests, out: Path, dtype, max_running: int, seed: int, moe=None):
    """Serve *requests* with the engine, one step file per prefill or decode; returns the completions."""
    from zmr.evidence import locate

    if moe is not None:
        model = importlib.import_module("toy_rollout.moe").MoEModel(cfg, moe, weights, dtype=dtype)
    else:
        model = toy_rollout.ToyModel(cfg, weights, dtype=dtype)
    engine = toy_rollout.Engine(model, max_running=max_running, seed=seed)
    rec = locate.Recorder(out, side="rollout", overwrite=True)
    close_step = trace_engine(model, engine, requests, rec, sample_inputs=True)
    reqs = [toy_rollout.Request(rid, prompt, n) for rid, prompt, n in requests]
    with rec, contextlib.ExitStack() as stack:
        _traced(stack, _functions(ROLLOUT_FUNCTIONS, "toy_rollout", moe is not None))
        completions = engine.generate(reqs)
        close_step()
    return completions


def record_trainer(toy_trainer, weights, cfg, completions, out: Path, dtype, moe=None) -> None:
    """Score the completions teacher-forced in one batch, as one step."""
    import torch

    from zmr.evidence import locate

    if moe is not None:
        tmoe = importlib.import_module("toy_trainer.moe")
        policy = tmoe.MoEPolicy(cfg, tmoe.MoEConfig(num_experts=moe.num_experts, top_k=moe.top_k), weights, dtype=dtype)
    else:
        policy = toy_trainer.ToyPolicy(cfg, weights, dtype=dtype)
    prompts = [c.prompt for c in completions]
    responses = [c.tokens for c in completions]
    ids, lengths = toy_trainer.pack(prompts, responses, "cpu")
    width = ids.shape[1]
    # The last token of each sequence is never fed through the rollout engine: leave it out.
    rows = locate.padded_rows([c.id for c in completions], [int(n) - 1 for n in lengths], width, tokens=ids)
    captured = {}
    forward = policy.forward

    def traced_forward(*args, **kwargs):
        captured["logits"] = out_ = forward(*args, **kwargs)
        return out_

    policy.forward = traced_forward
    seqs, positions, tokens, logits_rows, values = [], [], [], [], []
    with locate.Recorder(out, side="trainer", overwrite=True) as rec, contextlib.ExitStack() as stack:
        _traced(stack, _functions(TRAINER_FUNCTIONS, "toy_trainer", moe is not None))
        with rec.step(rows, label="score"), torch.no_grad():
            scored = toy_trainer.response_logprobs(policy, prompts, responses)
            for b, (c, lp) in enumerate(zip(completions, scored)):
                start = len(c.prompt) - 1
                for i in range(len(c.tokens)):
                    seqs.append(c.id)
                    positions.append(start + i)
                    tokens.append(int(ids[b, start + i]))
                    logits_rows.append(captured["logits"][b, start + i])
                values.append(lp.float())
            locate.dump("token_logprob", torch.cat(values), inputs={"logits": torch.stack(logits_rows)},
                        rows=locate.Rows.make(seqs, positions, tokens))


def record(rollout_tree, trainer_tree, out, *, dtype: str = "fp32", requests: int = 4, max_running: int = 3,
           prompt_len=(2, 12), new_tokens=(3, 8), seed: int = 0, threads: int = 1, moe: dict | None = None,
           moe_combine: str = "fixed") -> dict:
    """Record both sides into OUT/rollout and OUT/trainer, write OUT/names.yaml; returns a summary.

    moe: {"num_experts": E, "top_k": k} for the MoE model (trees of demo-moe); moe_combine "standard": run with
    TOY_MOE_COMBINE=standard."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    toy_rollout, toy_trainer = import_trees(Path(rollout_tree).resolve(), Path(trainer_tree).resolve())
    cfg = toy_rollout.ModelConfig()
    moe_cfg = None
    if moe is not None:
        rmoe = importlib.import_module("toy_rollout.moe")
        moe_cfg = rmoe.MoEConfig(**moe)
        weights = rmoe.random_moe_weights(cfg, moe_cfg, seed=seed)
    else:
        weights = toy_rollout.random_weights(cfg, seed=seed)
    tcfg = toy_trainer.ModelConfig(**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__})
    torch_dtype = getattr(torch, DTYPES[dtype])
    reqs = make_requests(requests, cfg.vocab_size, prompt_len, new_tokens, seed)
    saved = os.environ.get("TOY_MOE_COMBINE")
    os.environ["TOY_MOE_COMBINE"] = moe_combine
    try:
        completions = record_rollout(toy_rollout, weights, cfg, reqs, out / "rollout", torch_dtype, max_running, seed, moe_cfg)
        record_trainer(toy_trainer, weights, tcfg, completions, out / "trainer", torch_dtype, moe_cfg)
    finally:
        if saved is None:
            os.environ.pop("TOY_MOE_COMBINE", None)
        else:
            os.environ["TOY_MOE_COMBINE"] = saved
    (out / "names.yaml").write_text(NAME_MAP, encoding="utf-8")
    return {
        "rollout": str(out / "rollout"), "trainer": str(out / "trainer"), "map": str(out / "names.yaml"),
        "steps": len(list((out / "rollout").glob("step-*.safetensors"))),
        "tokens": sum(len(c.tokens) for c in completions),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout", default=os.environ.get("ZMR_TREE_ROLLOUT"), help="toy rollout tree (default: $ZMR_TREE_ROLLOUT)")
    p.add_argument("--trainer", default=os.environ.get("ZMR_TREE_TRAINER"), help="toy trainer tree (default: $ZMR_TREE_TRAINER)")
    p.add_argument("--out", default=str(REPO / "build" / "demo-locate"), help="output folder (default build/demo-locate)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-running", type=int, default=3)
    p.add_argument("--prompt-len", default="2:12", help="MIN:MAX (default 2:12)")
    p.add_argument("--new-tokens", default="3:8", help="MIN:MAX (default 3:8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--moe", action="store_true", help="the mixture-of-experts model (trees of demo-moe)")
    p.add_argument("--experts", type=int, default=8, help="--moe: experts per layer (default 8)")
    p.add_argument("--top-k", type=int, default=2, help="--moe: experts per token (default 2)")
    p.add_argument("--moe-combine", choices=["fixed", "standard"], default="fixed",
                   help="--moe: the fixed-order combine, or each side's own (TOY_MOE_COMBINE=standard)")
    args = p.parse_args(argv)
    if not args.rollout or not args.trainer:
        p.error("need the two trees: --rollout/--trainer or ZMR_TREE_ROLLOUT/ZMR_TREE_TRAINER")
    try:
        prompt_len = tuple(int(x) for x in args.prompt_len.split(":"))
        new_tokens = tuple(int(x) for x in args.new_tokens.split(":"))
        assert len(prompt_len) == 2 and len(new_tokens) == 2 and min(prompt_len + new_tokens) >= 1
    except (ValueError, AssertionError):
        p.error("--prompt-len and --new-tokens are MIN:MAX with MIN >= 1")
    summary = record(args.rollout, args.trainer, args.out, dtype=args.dtype, requests=args.requests,
                     max_running=args.max_running, prompt_len=prompt_len, new_tokens=new_tokens,
                     seed=args.seed, threads=args.threads,
                     moe={"num_experts": args.experts, "top_k": args.top_k} if args.moe else None,
                     moe_combine=args.moe_combine)
    print(f"{summary['tokens']} tokens, {summary['steps']} rollout steps; now run:")
    print(f"  zmr locate {summary['rollout']} {summary['trainer']} --map {summary['map']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
