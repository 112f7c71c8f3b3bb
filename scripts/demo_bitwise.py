#!/usr/bin/env python3
"""Bitwise log-prob check of the demo model: toy rollout engine vs toy trainer.

The rollout engine serves seeded prompts of mixed lengths with continuous
batching and returns each sampled token's log-probability; the trainer scores
the same tokens teacher-forced. For every dtype and batch size the two dumps
(JSON Lines, docs/reference.md §10) are compared bit for bit, twice:

  before  the zero-mismatch path off (TOY_BATCH_INVARIANT=0: upstream kernels),
          the negative control, which must show a mismatch;
  after   the zero-mismatch path on (default of the patched trees), which must
          show none.

Exit 0 when after == 0 tokens differ everywhere and before > 0; 1 otherwise;
2 on bad input. With --expect-mismatch (plain upstream trees): exit 0 when the
trees do mismatch. Trees come from ZMR_TREE_ROLLOUT / ZMR_TREE_TRAINER (or
--rollout / --trainer), artifacts go to ZMR_ARTIFACTS (or --artifacts).

  python scripts/demo_bitwise.py --rollout T/rollout --trainer T/trainer
  python scripts/demo_bitwise.py ... --device cuda --hidden 2048 --heads 16 --batch-sizes 8,64,128
  python scripts/demo_bitwise.py --moe --rollout T/rollout --trainer T/trainer   # the MoE model (demo-moe)

--moe: the mixture-of-experts model of the trees' moe.py (toy_rollout.moe.MoEModel,
toy_trainer.moe.MoEPolicy; --experts, --top-k) in place of the dense one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV_SWITCH = "TOY_BATCH_INVARIANT"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout", default=os.environ.get("ZMR_TREE_ROLLOUT"),
                   help="toy rollout tree (default: $ZMR_TREE_ROLLOUT)")
    p.add_argument("--trainer", default=os.environ.get("ZMR_TREE_TRAINER"),
                   help="toy trainer tree (default: $ZMR_TREE_TRAINER)")
    p.add_argument("--artifacts", default=os.environ.get("ZMR_ARTIFACTS") or str(REPO / "build" / "demo-bitwise"),
                   help="output folder (default: $ZMR_ARTIFACTS, else build/demo-bitwise)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16, fp16 (default fp32,bf16)")
    p.add_argument("--batch-sizes", default="1,3,8", help="requests per run, comma list (default 1,3,8)")
    p.add_argument("--max-running", type=int, default=4,
                   help="rows of a decode step at most; more requests wait and join later (default 4)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    add_model_args(p)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (torch.set_num_threads); 0: torch's default (default 1: no OpenMP stalls "
                        "on a busy machine)")
    p.add_argument("--expect-mismatch", action="store_true",
                   help="the trees are expected to mismatch (plain upstream): exit 0 if they do")
    p.add_argument("--cuda-graphs", choices=["auto", "0", "1"], default="auto",
                   help="decode steps as CUDA graphs (trees with rollout 0008): auto (the engine's default: on where the "
                        "model can be captured, i.e. the zero-mismatch kernels on a GPU), 0 or 1")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    add_moe_args(p)
    args = p.parse_args(argv)
    if not args.rollout or not args.trainer:
        p.error("need the two trees: --rollout/--trainer or ZMR_TREE_ROLLOUT/ZMR_TREE_TRAINER")
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in args.dtypes:
        if d not in DTYPES:
            p.error(f"--dtypes: unknown {d!r}; use fp32, bf16 or fp16")
    parse_sizes(p, args)
    if args.hidden % args.heads:
        p.error("--hidden must be a multiple of --heads")
    return args


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model's shape (less --hidden), the request lengths and the seed: the options demo_parallel.py shares."""
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=None, help="MLP size (default 3 * hidden)")
    p.add_argument("--vocab", type=int, default=320)
    p.add_argument("--prompt-len", default="2:32", help="MIN:MAX prompt length (default 2:32)")
    p.add_argument("--new-tokens", default="4:24", help="MIN:MAX response length (default 4:24)")
    p.add_argument("--seed", type=int, default=0)


def add_moe_args(p: argparse.ArgumentParser) -> None:
    """--moe, --experts, --top-k: the options of the MoE model (trees with moe.py), shared with demo_parallel.py and demo_locate.py."""
    p.add_argument("--moe", action="store_true", help="the mixture-of-experts model (moe.py of both trees) in place of the dense one")
    p.add_argument("--experts", type=int, default=8, help="--moe: experts per layer (default 8)")
    p.add_argument("--top-k", type=int, default=2, help="--moe: experts per token (default 2)")


def moe_config(toy_rollout, args):
    """The rollout tree's MoEConfig of --experts/--top-k, or None without --moe."""
    if not getattr(args, "moe", False):
        return None
    from importlib import import_module

    return import_module(f"{toy_rollout.__name__}.moe").MoEConfig(num_experts=args.experts, top_k=args.top_k)


def save_model_weights(toy_rollout, path: Path, cfg: dict, args) -> None:
    """Seeded weights of the dense model, or with --moe of the MoE model, written by the rollout tree's own helpers."""
    model_cfg = toy_rollout.ModelConfig(**cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    moe = moe_config(toy_rollout, args)
    if moe is None:
        toy_rollout.save_weights(path, model_cfg, toy_rollout.random_weights(model_cfg, seed=args.seed))
        return
    from importlib import import_module

    m = import_module(f"{toy_rollout.__name__}.moe")
    m.save_moe_weights(path, model_cfg, moe, m.random_moe_weights(model_cfg, moe, seed=args.seed))


def parse_sizes(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--batch-sizes (a comma list), --prompt-len and --new-tokens (MIN:MAX, MIN >= 1) into numbers, in place; demo_parallel.py's too."""
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
        args.prompt_len = tuple(int(x) for x in args.prompt_len.split(":"))
        args.new_tokens = tuple(int(x) for x in args.new_tokens.split(":"))
    except ValueError:
        p.error("--batch-sizes is a comma list of ints, --prompt-len/--new-tokens are MIN:MAX")
    if len(args.prompt_len) != 2 or len(args.new_tokens) != 2 or min(args.prompt_len + args.new_tokens) < 1:
        p.error("--prompt-len and --new-tokens are MIN:MAX with MIN >= 1")


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------

def make_requests(batch: int, args) -> list[tuple[str, list[int], int]]:
    """(id, prompt, max_new_tokens) for one batch: mixed prompt and response lengths."""
    rng = random.Random(args.seed * 100003 + batch)
    out = []
    for i in range(batch):
        n = rng.randint(*args.prompt_len)
        prompt = [rng.randrange(1, args.vocab) for _ in range(n)]
        out.append((f"bs{batch}-{i:03d}", prompt, rng.randint(*args.new_tokens)))
    return out


def tree_commit(tree: Path) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = proc.stdout.strip()
    return sha if proc.returncode == 0 and len(sha) in (40, 64) else None


def import_trees(rollout: Path, trainer: Path):
    for name in list(sys.modules):
        if name.split(".")[0] in ("toy_rollout", "toy_trainer"):
            del sys.modules[name]
    sys.path[:0] = [str(rollout), str(trainer)]
    mods = []
    for name, tree in (("toy_rollout", rollout), ("toy_trainer", trainer)):
        mod = importlib.import_module(name)
        where = Path(mod.__file__).resolve()
        if tree.resolve() not in where.parents:
            raise SystemExit(f"error: {name} was imported from {where}, not from {tree}")
        mods.append(mod)
    switch = all(importlib.util.find_spec(f"{m.__name__}.batch_invariant") is not None for m in mods)
    return mods[0], mods[1], switch


# ---------------------------------------------------------------------------
# dumps and comparison
# ---------------------------------------------------------------------------

def write_dump(path: Path, records: list[dict], provenance: dict | None = None) -> None:
    """JSON Lines per docs/reference.md §10; floats as repr(float) so they read back bit-exactly.

    Uses zmr.evidence.mismatch.write_dump where the zmr package has it, else writes the
    plain format itself.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        from zmr.evidence.mismatch import write_dump as zmr_write_dump  # type: ignore
    except Exception:
        zmr_write_dump = None
    if zmr_write_dump is not None:
        for prov in (provenance, None):
            try:
                zmr_write_dump(path, records, provenance=prov)
                return
            except Exception:
                continue  # an interface we do not know: write it ourselves
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write("{" + f'"id": {json.dumps(r["id"])}, "step": {int(r["step"])}, '
                    f'"tokens": [{", ".join(str(int(t)) for t in r["tokens"])}], '
                    f'"logprobs": [{", ".join(repr(float(x)) for x in r["logprobs"])}]' + "}\n")


def read_dump(path: Path) -> dict:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if "id" in r:  # other lines: metadata (e.g. {"zmr_dump": 1, ...})
                    out[(r.get("step", 0), r["id"])] = r
    return out


def bits(x: float) -> bytes:
    return struct.pack("<d", float(x))


def compare(rollout_path: Path, train_path: Path) -> dict:
    """Own bitwise comparison of two dumps (read back from disk)."""
    a, b = read_dump(rollout_path), read_dump(train_path)
    if set(a) != set(b):
        raise SystemExit(f"error: {rollout_path} and {train_path} hold different sequences")
    tokens = differ = seqs_differ = 0
    max_abs = 0.0
    per_batch: dict[str, list[int]] = {}
    for key in sorted(a):
        ra, rb = a[key], b[key]
        if ra["tokens"] != rb["tokens"]:
            raise SystemExit(f"error: token ids differ for {key}")
        d = 0
        for x, y in zip(ra["logprobs"], rb["logprobs"]):
            tokens += 1
            if bits(x) != bits(y):
                d += 1
                max_abs = max(max_abs, abs(x - y))
        differ += d
        seqs_differ += d > 0
        bucket = per_batch.setdefault(key[1].split("-")[0], [0, 0])
        bucket[0] += len(ra["logprobs"])
        bucket[1] += d
    return {"tokens": tokens, "differ": differ, "max_abs": max_abs, "sequences": len(a),
            "sequences_differ": seqs_differ,
            "per_batch": {k: {"tokens": v[0], "differ": v[1]} for k, v in per_batch.items()}}


_ZMR_HERE: bool | None = None


def run_zmr(*args: str) -> tuple[int, str, str] | None:
    """`zmr ARGS` run in this process by the CLI's own entry point (the zmr of this checkout, as `python -m zmr` with
    PYTHONPATH=REPO runs it): its exit status, stdout and stderr; None when zmr cannot be imported here. Not a new
    interpreter for each call: the demos compare after every pass, and each fresh Python spent a fifth of a second
    of CPU importing zmr and numpy, which this process holds already."""
    global _ZMR_HERE
    if _ZMR_HERE is None:
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        try:
            importlib.import_module("zmr.cli")
            _ZMR_HERE = True
        except ImportError:
            _ZMR_HERE = False
    if not _ZMR_HERE:
        return None
    from zmr.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def zmr_mismatch(rollout_path: Path, train_path: Path, out: Path) -> int | None:
    """Exit status of `zmr mismatch --check --json` (its report saved to out), None if zmr cannot run here."""
    ran = run_zmr("mismatch", str(rollout_path), str(train_path), "--check", "--json")
    if ran is None:
        return None
    code, stdout, stderr = ran
    out.write_text(stdout + (("\n# stderr\n" + stderr) if stderr.strip() else ""), encoding="utf-8")
    return code


# ---------------------------------------------------------------------------
# one pass: rollout then trainer, every batch size, one dtype
# ---------------------------------------------------------------------------

GRAPHS_USED: set[tuple[str, str, bool]] = set()  # (dtype, before/after, engine replayed decode steps as CUDA graphs)


def run_pass(toy_rollout, toy_trainer, weights: Path, dtype_name: str, args, invariant: bool | None):
    import torch

    dtype = getattr(torch, DTYPES[dtype_name])
    if invariant is not None:
        os.environ[ENV_SWITCH] = "1" if invariant else "0"
    if args.moe:
        model = importlib.import_module("toy_rollout.moe").MoEModel.from_file(weights, device=args.device, dtype=dtype)
        policy = importlib.import_module("toy_trainer.moe").MoEPolicy.from_file(weights, device=args.device, dtype=dtype)
    else:
        model = toy_rollout.ToyModel.from_file(weights, device=args.device, dtype=dtype)
        policy = toy_trainer.ToyPolicy.from_file(weights, device=args.device, dtype=dtype)
    rollout_records, train_records = [], []
    for batch in args.batch_sizes:
        reqs = [toy_rollout.Request(rid, prompt, n) for rid, prompt, n in make_requests(batch, args)]
        graphs = {} if args.cuda_graphs == "auto" else {"cuda_graphs": args.cuda_graphs == "1"}
        engine = toy_rollout.Engine(model, max_running=min(batch, args.max_running), seed=args.seed, **graphs)
        GRAPHS_USED.add((dtype_name, "after" if getattr(model, "batch_invariant", False) else "before", getattr(engine, "cuda_graphs", False)))
        completions = engine.generate(reqs)
        with torch.no_grad():
            scored = toy_trainer.response_logprobs(policy, [c.prompt for c in completions],
                                                   [c.tokens for c in completions])
        for c, lp in zip(completions, scored):
            rollout_records.append({"id": c.id, "step": 0, "tokens": list(c.tokens), "logprobs": list(c.logprobs)})
            train_records.append({"id": c.id, "step": 0, "tokens": list(c.tokens),
                                  "logprobs": [float(x) for x in lp.float().cpu().tolist()]})
    return rollout_records, train_records


def fmt(stats: dict) -> str:
    s = f"{stats['differ']} of {stats['tokens']} tokens differ"
    if stats["differ"]:
        s += f" (max |Δ| {stats['max_abs']:.1e})"
    return s


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    rollout, trainer = Path(args.rollout).resolve(), Path(args.trainer).resolve()
    for name, tree in (("rollout", rollout), ("trainer", trainer)):
        if not tree.is_dir():
            print(f"error: {name} tree {tree} does not exist", file=sys.stderr)
            return 2
    artifacts = Path(args.artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    longest = args.prompt_len[1] + args.new_tokens[1]
    cfg = {
        "vocab_size": args.vocab, "hidden_size": args.hidden, "num_layers": args.layers,
        "num_heads": args.heads, "intermediate_size": args.intermediate or 3 * args.hidden,
        "max_positions": max(256, longest), "rms_eps": 1e-5,
    }
    toy_rollout, toy_trainer, switch = import_trees(rollout, trainer)
    # Seeded weights in the layout both packages load, made by the rollout tree's own helpers.
    if args.moe and not all(importlib.util.find_spec(f"{m}.moe") for m in ("toy_rollout", "toy_trainer")):
        print("error: --moe needs trees with moe.py (upstream main of both toy engines; the demo-moe pins)", file=sys.stderr)
        return 2
    weights = artifacts / "weights.safetensors"
    save_model_weights(toy_rollout, weights, cfg, args)
    saved_switch = os.environ.get(ENV_SWITCH)
    trees = {k: c for k, c in (("rollout", tree_commit(rollout)), ("trainer", tree_commit(trainer))) if c}

    # before: zero-mismatch path off (negative control); after: on.
    modes = [("before", False), ("after", True)] if switch else [("before", None)]
    results: dict[str, dict[str, dict]] = {}
    problems: list[str] = []
    try:
        for dtype_name in args.dtypes:
            for mode, invariant in modes:
                r_recs, t_recs = run_pass(toy_rollout, toy_trainer, weights, dtype_name, args, invariant)
                folder = artifacts / mode / dtype_name
                prov = {"model": "demo-moe" if args.moe else "demo", "mode": mode, "dtype": dtype_name, "device": args.device}
                if trees:
                    prov["trees"] = trees
                write_dump(folder / "rollout.jsonl", r_recs, dict(prov, side="rollout"))
                write_dump(folder / "train.jsonl", t_recs, dict(prov, side="trainer"))
                stats = compare(folder / "rollout.jsonl", folder / "train.jsonl")
                rc = zmr_mismatch(folder / "rollout.jsonl", folder / "train.jsonl", folder / f"{mode}-{dtype_name}.mismatch.json")
                stats["zmr_mismatch_exit"] = rc
                if rc is not None and rc != (0 if stats["differ"] == 0 else 1):
                    problems.append(f"{mode}/{dtype_name}: zmr mismatch exited {rc}, "
                                    f"but {stats['differ']} of {stats['tokens']} tokens differ")
                results.setdefault(dtype_name, {})[mode] = stats
    finally:
        if saved_switch is None:
            os.environ.pop(ENV_SWITCH, None)
        else:
            os.environ[ENV_SWITCH] = saved_switch
    if not switch:
        for per in results.values():
            per["after"] = per["before"]

    ok = True
    lines = []
    for dtype_name, per in results.items():
        before, after = per["before"], per["after"]
        lines.append(f"{dtype_name}: mismatch before: {fmt(before)}, after: {fmt(after)}")
        for b in sorted(after["per_batch"], key=lambda k: int(k[2:])):
            pb, pa = before["per_batch"][b], after["per_batch"][b]
            lines.append(f"  batch {b[2:]:>3}: before {pb['differ']}/{pb['tokens']}, after {pa['differ']}/{pa['tokens']}")
        if args.expect_mismatch:
            ok &= after["differ"] > 0
        else:
            ok &= after["differ"] == 0 and before["differ"] > 0
        if before["differ"] == 0:
            problems.append(f"{dtype_name}: the negative control shows no mismatch; the test would be too weak")
    if not switch:
        lines.append("note: the trees have no zero-mismatch switch (plain upstream): before and after are the same run")
    ok &= not problems
    elapsed = time.time() - t0
    summary = {
        "ok": ok, "expect_mismatch": args.expect_mismatch, "zero_mismatch_switch": switch,
        "device": args.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "config": cfg, "moe": {"experts": args.experts, "top_k": args.top_k} if args.moe else None,
        "batch_sizes": args.batch_sizes, "max_running": args.max_running,
        "results": results, "problems": problems, "seconds": round(elapsed, 1),
        "zmr_mismatch": bool(_ZMR_HERE),
        "cuda_graphs": {f"{d}/{mode}": used for d, mode, used in sorted(GRAPHS_USED)},
    }
    (artifacts / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    out = sys.stderr if args.json else sys.stdout
    for line in lines:
        print(line, file=out)
    for p in problems:
        print(f"problem: {p}", file=out)
    verdict = "OK" if ok else "FAIL"
    what = "trees mismatch as expected" if args.expect_mismatch else "bitwise identical with the zero-mismatch path"
    print(f"{verdict}: {what if ok else 'see above'} ({args.device}, {torch.get_num_threads()} threads, "
          f"hidden {args.hidden}, {elapsed:.1f} s; dumps in {artifacts})", file=out)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
