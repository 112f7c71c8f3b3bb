#!/usr/bin/env python3
"""Bitwise log-probs across parallel layouts: the demo rollout at tensor parallel N against the trainer at
TP 1 and at context parallel N.

Starts max(TP, CP) processes joined by torch.distributed (gloo on CPU, NCCL
with --device cuda: one GPU per rank). In every process, per dtype and mode:

  rollout      toy_rollout.parallel.TPEngine over a TPModel sharded over ranks
               0..TP-1 (column-parallel q/k/v, gate/up and LM head, row-parallel
               o_proj and down_proj, the vocabulary split for the log-softmax);
               every request of each batch size, continuous batching, seeded
               sampling (every TP rank samples the same tokens);
  trainer CP   toy_trainer.parallel.response_logprobs over ranks 0..CP-1, the
               sequence split across them, on the rollout's tokens;
  trainer TP1  the same in one process (rank 0).

Modes: "invariant" (layout_invariant=True: every split sum in the fixed order
of layout_invariant.py) must give 0 differing tokens in every comparison;
"standard" (one GEMM per rank and an all-reduce, torch's sums, the
ring-attention merge; the trainer at TP 1 is the release ToyPolicy) is the
negative control: the rollout at TP N must differ from both trainers in every
dtype, and the trainer at CP N from the trainer at TP 1 (where only the
attention combine differs) in at least one dtype (at size 1 the standard path
is the series' single-process path, so only split layouts must differ). Tokens "differ" when the float64 bit
patterns of the two log-probs differ. Exit 0 when both hold, 1 otherwise, 2 on
bad input.

--locate DIR records, per TP rank, the rollout's intermediate tensors (this
rank's shards) and the trainer's at TP 1 cut to the same shards, runs
`zmr locate` on each pair and names the first differing operation and the
rank it starts on; --break-rank R makes rank R compute its row-parallel
partial products with one GEMM over its whole share of K (a broken layout).

  python scripts/demo_parallel.py --rollout T/rollout --trainer T/trainer --tp 2 --cp 2
  python scripts/demo_parallel.py --rollout T/rollout --trainer T/trainer --locate build/tp-locate --break-rank 1
  python scripts/demo_parallel.py --moe --rollout M/rollout --trainer M/trainer --tp 2 --cp 2   # demo-moe trees

--moe: the mixture-of-experts model (trees of demo-moe): the rollout is
toy_rollout.moe.MoETPModel, attention tensor parallel and the experts split
over the same TP ranks (expert parallel N = TP N; N must divide --experts),
the trainer toy_trainer.moe.MoEPolicy (every expert on every CP rank). The
invariant mode gathers the expert slots and combines them in one fixed order;
the standard mode adds each rank's experts into a partial sum as they arrive
and all-reduces it (the negative control). --standard-part ep-combine is that
combine alone in the invariant mode.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import demo_bitwise as db  # noqa: E402  (make_requests, dumps, comparison, zmr mismatch)
import demo_locate  # noqa: E402  (trace_engine: the rollout recorded step by step)

sys.path.remove(str(HERE))

DTYPES = db.DTYPES
MODES = (("standard", False), ("invariant", True))
# --standard-part: one split sum of the invariant mode done the standard way, on every side that splits it
STANDARD_PARTS = {
    "row": "row-parallel o_proj/down_proj: one GEMM over the rank's K, all-reduce",
    "column": "column-parallel GEMMs: one GEMM per rank over its columns (no fixed blocks)",
    "vocab": "log-softmax over the split vocabulary: torch sums, all-reduce",
    "cp-attention": "attention across CP ranks: per-rank partial softmax, log-sum-exp merge",
    "ep-combine": "--moe: the expert-parallel combine: each rank's experts added as they arrive, all-reduce",
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout", default=os.environ.get("ZMR_TREE_ROLLOUT"), help="toy rollout tree (default: $ZMR_TREE_ROLLOUT)")
    p.add_argument("--trainer", default=os.environ.get("ZMR_TREE_TRAINER"), help="toy trainer tree (default: $ZMR_TREE_TRAINER)")
    p.add_argument("--artifacts", default=os.environ.get("ZMR_ARTIFACTS") or str(REPO / "build" / "demo-parallel"),
                   help="output folder (default: $ZMR_ARTIFACTS, else build/demo-parallel)")
    p.add_argument("--tp", type=int, default=2, help="tensor parallel size of the rollout (default 2)")
    p.add_argument("--cp", type=int, default=2, help="context parallel size of the trainer (default 2)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (rank r on cuda:r; default cpu)")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16, fp16 (default fp32,bf16)")
    p.add_argument("--batch-sizes", default="8,128", help="requests per run, comma list (default 8,128)")
    p.add_argument("--max-running", type=int, default=16, help="rows of a decode step at most (default 16)")
    p.add_argument("--hidden", type=int, default=64)
    db.add_model_args(p)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per process (default 1)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run; then every process is killed")
    p.add_argument("--locate", default=None, metavar="DIR", help="record per-rank dumps into DIR and run zmr locate")
    p.add_argument("--break-rank", type=int, default=None, help="with --locate: the rank whose row-parallel partials are broken")
    p.add_argument("--standard-part", choices=sorted(STANDARD_PARTS), default=None,
                   help="which split sum matters: the invariant mode with this one part done the standard way on both sides "
                        "(reports only: exit 0 when the run completes)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    db.add_moe_args(p)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        return args
    if not args.rollout or not args.trainer:
        p.error("need the two trees: --rollout/--trainer or ZMR_TREE_ROLLOUT/ZMR_TREE_TRAINER")
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if any(d not in DTYPES for d in args.dtypes):
        p.error(f"--dtypes: use {', '.join(DTYPES)}")
    db.parse_sizes(p, args)
    if args.tp < 1 or args.cp < 1 or args.hidden % args.heads:
        p.error("--tp and --cp are >= 1, --hidden a multiple of --heads")
    if args.break_rank is not None and not (args.locate and 0 <= args.break_rank < args.tp):
        p.error("--break-rank needs --locate and a rank below --tp")
    if args.standard_part and args.locate:
        p.error("--standard-part is for the bitwise comparison, not --locate")
    if args.moe and (args.locate or args.experts % args.tp or not 1 <= args.top_k <= args.experts):
        p.error("--moe: --tp (the expert-parallel size too) must divide --experts, 1 <= --top-k <= --experts; no --locate")
    if args.standard_part == "ep-combine" and not args.moe:
        p.error("--standard-part ep-combine needs --moe")
    return args


# ---------------------------------------------------------------------------
# the parent: start the ranks, wait, compare
# ---------------------------------------------------------------------------

def run_world(world: int, run_dir: Path, config: dict, timeout: float, device: str) -> list[dict]:
    """Run `world` worker processes on config; return each rank's result. Every process is gone on return."""
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("TOY_BATCH_INVARIANT", "PYTHONPATH")}
    if device == "cpu" and "GLOO_SOCKET_IFNAME" not in env and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on the loopback device: no dependence on the host name
    procs = []
    logs = []
    try:
        for rank in range(world):
            log = open(run_dir / f"rank{rank}.log", "w", encoding="utf-8")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(rank), "--run-dir", str(run_dir)],
                                          stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        deadline = time.monotonic() + timeout
        failed = None
        while any(p.poll() is None for p in procs):
            bad = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if bad:
                failed = f"rank {bad[0]} exited {procs[bad[0]].returncode}"
                break
            if time.monotonic() > deadline:
                failed = f"timed out after {timeout:.0f} s"
                break
            time.sleep(0.05)
        if failed is None:
            bad = [r for r, p in enumerate(procs) if p.returncode != 0]
            failed = f"rank {bad[0]} exited {procs[bad[0]].returncode}" if bad else None
    finally:
        for p in procs:  # only the processes started here, each by its own process group
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, 9)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
        for log in logs:
            log.close()
    if failed:
        tails = []
        for rank in range(world):
            text = (run_dir / f"rank{rank}.log").read_text(encoding="utf-8", errors="replace").strip()
            if text:
                tails.append(f"--- rank {rank} ---\n" + "\n".join(text.splitlines()[-25:]))
        raise SystemExit(f"error: the distributed run failed: {failed}\n" + "\n".join(tails))
    return [json.loads((run_dir / f"rank{rank}.json").read_text(encoding="utf-8")) for rank in range(world)]


def model_config(args) -> dict:
    longest = args.prompt_len[1] + args.new_tokens[1]
    return {"vocab_size": args.vocab, "hidden_size": args.hidden, "num_layers": args.layers, "num_heads": args.heads,
            "intermediate_size": args.intermediate or 3 * args.hidden, "max_positions": max(256, longest), "rms_eps": 1e-5}


def compare_records(a: list[dict], b: list[dict], folder: Path, names: tuple[str, str], prov: dict) -> dict:
    db.write_dump(folder / f"{names[0]}.jsonl", a, dict(prov, side=names[0]))
    db.write_dump(folder / f"{names[1]}.jsonl", b, dict(prov, side=names[1]))
    stats = db.compare(folder / f"{names[0]}.jsonl", folder / f"{names[1]}.jsonl")
    rc = db.zmr_mismatch(folder / f"{names[0]}.jsonl", folder / f"{names[1]}.jsonl", folder / f"{names[0]}-vs-{names[1]}.mismatch.json")
    stats["zmr_mismatch_exit"] = rc
    return stats


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker(args.worker, Path(args.run_dir))
    t0 = time.time()
    rollout, trainer = Path(args.rollout).resolve(), Path(args.trainer).resolve()
    for name, tree in (("rollout", rollout), ("trainer", trainer)):
        if not (tree / f"toy_{name}" / "parallel.py").is_file():
            print(f"error: {tree} has no toy_{name}/parallel.py (a tree with the parallel patches?)", file=sys.stderr)
            return 2
    artifacts = Path(args.artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    if args.locate:
        return main_locate(args, rollout, trainer, t0)
    cfg = model_config(args)
    world = max(args.tp, args.cp)
    config = {"task": "bitwise", "rollout": str(rollout), "trainer": str(trainer), "artifacts": str(artifacts), "cfg": cfg,
              "tp": args.tp, "cp": args.cp, "world": world, "device": args.device, "dtypes": args.dtypes,
              "batch_sizes": args.batch_sizes, "max_running": args.max_running, "seed": args.seed, "threads": args.threads,
              "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "timeout": args.timeout,
              "standard_part": args.standard_part,
              "moe": {"num_experts": args.experts, "top_k": args.top_k} if args.moe else None}
    with tempfile.TemporaryDirectory(prefix="run-", dir=artifacts) as tmp:
        ranks = run_world(world, Path(tmp), config, args.timeout, args.device)
    main_rank = ranks[0]
    problems: list[str] = []
    # every TP rank sampled the same tokens with the same log-probs, every CP rank holds the same gathered log-probs
    for r in range(1, world):
        for dtype in args.dtypes:
            for mode, _ in MODES:
                got, want = ranks[r]["results"][dtype][mode], main_rank["results"][dtype][mode]
                for part, n in (("rollout", args.tp), ("trainer_cp", args.cp)):
                    if r < n and got[part] != want[part]:
                        problems.append(f"{dtype}/{mode}: {part} of rank {r} differs from rank 0")
    tp_name, cp_name = f"rollout-tp{args.tp}" + (f"-ep{args.tp}" if args.moe else ""), f"trainer-cp{args.cp}"
    results: dict = {}
    lines = []
    trees = {k: c for k, c in (("rollout", db.tree_commit(rollout)), ("trainer", db.tree_commit(trainer))) if c}
    for dtype in args.dtypes:
        for mode, _ in MODES:
            rec = main_rank["results"][dtype][mode]
            folder = artifacts / mode / dtype
            prov = {"model": "demo-moe" if args.moe else "demo", "mode": mode, "dtype": dtype, "device": args.device, "tp": args.tp, "cp": args.cp}
            if trees:
                prov["trees"] = trees
            # the negative control must differ where the two sides' layouts differ (at size 1 the standard path
            # is the series' single-process path on both sides)
            split = {f"{tp_name}_vs_trainer-tp1"} if args.tp > 1 else set()
            if args.tp > 1 or args.cp > 1:
                split.add(f"{tp_name}_vs_{cp_name}")
            res = {
                f"{tp_name}_vs_trainer-tp1": compare_records(rec["rollout"], rec["trainer_tp1"], folder, (tp_name, "trainer-tp1"), prov),
                f"{tp_name}_vs_{cp_name}": compare_records(rec["rollout"], rec["trainer_cp"], folder, (tp_name, cp_name), prov),
                f"{cp_name}_vs_trainer-tp1": compare_records(rec["trainer_cp"], rec["trainer_tp1"], folder, (cp_name, "trainer-tp1"), prov),
            }
            results.setdefault(dtype, {})[mode] = res
            for what, stats in res.items():
                rc = stats["zmr_mismatch_exit"]
                if rc is not None and rc != (0 if stats["differ"] == 0 else 1):
                    problems.append(f"{mode}/{dtype}/{what}: zmr mismatch exited {rc}, but {stats['differ']} tokens differ")
                if args.standard_part:
                    pass  # an ablation: reported, not judged
                elif mode == "invariant" and stats["differ"]:
                    problems.append(f"{dtype}: {what} differs in {stats['differ']} tokens with the layout-invariant path")
                elif mode == "standard" and not stats["differ"] and what.startswith("rollout") and what in split:
                    problems.append(f"{dtype}: the negative control {what} shows no mismatch")
                per = ", ".join(f"batch {k[2:]} {v['differ']}/{v['tokens']}" for k, v in sorted(stats["per_batch"].items(), key=lambda kv: int(kv[0][2:])))
                lines.append(f"{dtype} {mode:>9}: {what.replace('_vs_', ' vs ')}: {db.fmt(stats)} ({per})")
    # trainer CP N against TP 1 alone (only the attention combine differs): in bf16 the rounding of the attention
    # output can absorb it; it must show in some dtype
    cp_only = f"{cp_name}_vs_trainer-tp1"
    if args.cp > 1 and not args.standard_part and not any(results[d]["standard"][cp_only]["differ"] for d in args.dtypes):
        problems.append(f"the negative control {cp_only} shows no mismatch in any dtype")
    ok = not problems
    elapsed = time.time() - t0
    summary = {"ok": ok, "tp": args.tp, "cp": args.cp, "device": args.device, "threads": args.threads,
               "torch": main_rank["torch"], "config": cfg, "batch_sizes": args.batch_sizes, "max_running": args.max_running,
               "prompt_len": list(args.prompt_len), "new_tokens": list(args.new_tokens), "seed": args.seed,
               "results": results, "problems": problems, "seconds": round(elapsed, 1), "trees": trees,
               "standard_part": args.standard_part and {args.standard_part: STANDARD_PARTS[args.standard_part]},
               "moe": config["moe"]}
    (artifacts / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    out = sys.stderr if args.json else sys.stdout
    if args.standard_part:
        print(f"ablation: mode invariant with {STANDARD_PARTS[args.standard_part]}", file=out)
    for line in lines + [f"problem: {p}" for p in problems]:
        print(line, file=out)
    verdict = "bitwise identical across layouts with the layout-invariant path" if ok else "see above"
    if args.standard_part:
        verdict = f"ablation run (--standard-part {args.standard_part}), reported, not judged"
    moe_note = f", EP {args.tp}, MoE {args.experts} experts top-{args.top_k}" if args.moe else ""
    print(f"{'OK' if ok else 'FAIL'}: {verdict} "
          f"(TP {args.tp}{moe_note}, CP {args.cp}, {args.device}, hidden {args.hidden}, {elapsed:.1f} s; dumps in {artifacts})", file=out)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# --locate: per-rank dumps, zmr locate per rank
# ---------------------------------------------------------------------------

def main_locate(args, rollout: Path, trainer: Path, t0: float) -> int:
    out = Path(args.locate).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cfg = model_config(args)
    config = {"task": "locate", "rollout": str(rollout), "trainer": str(trainer), "out": str(out), "cfg": cfg,
              "tp": args.tp, "cp": 1, "world": args.tp, "device": args.device, "dtypes": args.dtypes[:1],
              "batch_sizes": args.batch_sizes[:1], "max_running": args.max_running, "seed": args.seed, "threads": args.threads,
              "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "break_rank": args.break_rank, "timeout": args.timeout}
    with tempfile.TemporaryDirectory(prefix="run-", dir=out) as tmp:
        run_world(args.tp, Path(tmp), config, args.timeout, args.device)
    per_rank = []
    for rank in range(args.tp):
        ran = db.run_zmr("locate", str(out / f"rollout-rank{rank}"), str(out / f"trainer-rank{rank}"), "--json")
        if ran is None:
            print("error: zmr cannot be imported here: run the demo from a checkout of zmr with its dependencies installed", file=sys.stderr)
            return 2
        code, stdout, stderr = ran
        if code not in (0, 1):
            print(f"error: zmr locate on rank {rank} exited {code}: {stdout}{stderr}", file=sys.stderr)
            return 2
        report = json.loads(stdout)
        (out / f"locate-rank{rank}.json").write_text(stdout, encoding="utf-8")
        per_rank.append({"rank": rank, "exit": code, "first": report["first"]})
    diverged = [r for r in per_rank if r["first"]]
    first = min(diverged, key=lambda r: (r["first"]["order"], r["rank"])) if diverged else None
    summary = {"tp": args.tp, "break_rank": args.break_rank, "ranks": per_rank, "seconds": round(time.time() - t0, 1),
               "first": None if first is None else {"rank": first["rank"], "op": first["first"]["op"], "order": first["first"]["order"],
                                                    "inputs_verdict": first["first"]["inputs_verdict"], "row": first["first"]["row"]}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for r in per_rank:
        f = r["first"]
        print(f"rank {r['rank']}: " + ("no divergence" if not f else
              f"first divergence {f['op']} (operation {f['order'] + 1}), inputs {f['inputs_verdict']}, "
              f"sequence {f['row']['seq_id']!r} position {f['row']['position']}"))
    if first:
        f = first["first"]
        print(f"first differing operation: {f['op']} (operation {f['order'] + 1} in execution order) on rank {first['rank']}; "
              f"inputs {f['inputs_verdict']}: {'this operation on that rank introduces it' if f['inputs_verdict'] == 'equal' else 'look earlier'}")
        print(f"  zmr locate {out / ('rollout-rank%d' % first['rank'])} {out / ('trainer-rank%d' % first['rank'])}")
    else:
        print("no divergence on any rank")
    if args.json:
        print(json.dumps(summary, indent=2))
    return 1 if first else 0


# ---------------------------------------------------------------------------
# the worker: one rank
# ---------------------------------------------------------------------------

class _Args:
    def __init__(self, config: dict):
        self.seed = config["seed"]
        self.prompt_len = tuple(config["prompt_len"])
        self.new_tokens = tuple(config["new_tokens"])
        self.vocab = config["cfg"]["vocab_size"]


def worker(rank: int, run_dir: Path) -> int:
    from datetime import timedelta

    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    import torch
    import torch.distributed as dist

    if config["threads"] > 0:
        torch.set_num_threads(config["threads"])
    toy_rollout, toy_trainer, _ = db.import_trees(Path(config["rollout"]), Path(config["trainer"]))
    rpar = importlib.import_module("toy_rollout.parallel")
    tpar = importlib.import_module("toy_trainer.parallel")
    rli = importlib.import_module("toy_rollout.layout_invariant")
    tli = importlib.import_module("toy_trainer.layout_invariant")
    device = config["device"]
    if device.startswith("cuda"):
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    world = config["world"]
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", init_method=f"file://{run_dir / 'rendezvous'}",
                            rank=rank, world_size=world, timeout=timedelta(seconds=max(60, int(config["timeout"]))))
    try:
        tp_pg = dist.new_group(list(range(config["tp"])))
        cp_pg = dist.new_group(list(range(config["cp"])))
        tp_group = rli.Group.of(tp_pg) if rank < config["tp"] else None
        cp_group = tli.Group.of(cp_pg) if rank < config["cp"] else None
        mcfg = toy_rollout.ModelConfig(**config["cfg"])
        tcfg = toy_trainer.ModelConfig(**config["cfg"])
        if config.get("moe"):
            rmoe = importlib.import_module("toy_rollout.moe")
            moe = rmoe.MoEConfig(**config["moe"])
            weights = rmoe.random_moe_weights(mcfg, moe, seed=config["seed"])
        else:
            weights = toy_rollout.random_weights(mcfg, seed=config["seed"])
        if config["task"] == "locate":
            result = locate_worker(config, rank, toy_rollout, toy_trainer, rpar, tpar, rli, tli, mcfg, tcfg, weights, tp_group, device)
        else:
            result = bitwise_worker(config, rank, toy_rollout, toy_trainer, rpar, tpar, tli, mcfg, tcfg, weights, tp_group, cp_group, device)
        result["torch"] = torch.__version__
        dist.barrier()
    finally:
        dist.destroy_process_group()
    (run_dir / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


def _rollout(config, toy_rollout, rpar, mcfg, weights, group, device, dtype, invariant, requests):
    if config.get("moe"):
        rmoe = importlib.import_module("toy_rollout.moe")
        model = rmoe.MoETPModel(mcfg, rmoe.MoEConfig(**config["moe"]), weights, group, device=device, dtype=dtype,
                                layout_invariant=invariant)
    else:
        model = rpar.TPModel(mcfg, weights, group, device=device, dtype=dtype, layout_invariant=invariant)
    engine = rpar.TPEngine(model, max_running=min(len(requests), config["max_running"]), seed=config["seed"])
    return engine.generate([toy_rollout.Request(rid, prompt, n) for rid, prompt, n in requests])


def bitwise_worker(config, rank, toy_rollout, toy_trainer, rpar, tpar, tli, mcfg, tcfg, weights, tp_group, cp_group, device) -> dict:
    import torch
    import torch.distributed as dist

    results: dict = {}
    if config.get("standard_part") == "ep-combine":
        _standard_ep_combine(importlib.import_module("toy_rollout.moe"))
    elif config.get("standard_part"):
        for li in (importlib.import_module("toy_rollout.layout_invariant"), tli):
            _standard_part(li, config["standard_part"])
    for dtype_name in config["dtypes"]:
        dtype = getattr(torch, DTYPES[dtype_name])
        if config.get("moe"):
            tmoe = importlib.import_module("toy_trainer.moe")
            policy = tmoe.MoEPolicy(tcfg, tmoe.MoEConfig(**config["moe"]), weights, device=device, dtype=dtype, batch_invariant=True)
        else:
            policy = toy_trainer.ToyPolicy(tcfg, weights, device=device, dtype=dtype, batch_invariant=True)
        for mode, invariant in MODES:
            out = results.setdefault(dtype_name, {}).setdefault(mode, {"rollout": [], "trainer_cp": [], "trainer_tp1": []})
            for batch in config["batch_sizes"]:
                requests = db.make_requests(batch, _Args(config))
                done = None
                if tp_group is not None:
                    done = [(c.id, c.prompt, c.tokens, c.logprobs)
                            for c in _rollout(config, toy_rollout, rpar, mcfg, weights, tp_group, device, dtype, invariant, requests)]
                box = [done]
                dist.broadcast_object_list(box, src=0)  # rank 0's completions for the trainer
                done = box[0] if done is None else done
                out["rollout"] += [{"id": i, "step": 0, "tokens": list(t), "logprobs": list(lp)} for i, _, t, lp in done]
                prompts, responses = [p for _, p, _, _ in box[0]], [t for _, _, t, _ in box[0]]
                with torch.no_grad():
                    if cp_group is not None:
                        lps = tpar.response_logprobs(policy, prompts, responses, cp_group, layout_invariant=invariant)
                        out["trainer_cp"] += _records(box[0], lps)
                    if rank == 0:
                        if invariant:
                            lps = tpar.response_logprobs(policy, prompts, responses, tli.SINGLE, layout_invariant=True)
                        else:  # the release trainer, one process
                            lps = toy_trainer.response_logprobs(policy, prompts, responses)
                        out["trainer_tp1"] += _records(box[0], lps)
    return {"rank": rank, "results": results}


def _standard_part(li, part: str) -> None:
    """--standard-part: replace one layout-invariant function of li by its standard counterpart (every caller's view)."""
    if part == "row":
        li.row_linear = lambda x, weight, chunk, group, residual=None: li.standard_row_linear(x, weight, group, residual=residual)
    elif part == "column":
        li.column_linear = lambda x, weight, block: li.bi.linear(x, weight)
    elif part == "vocab":
        li.log_softmax = lambda logits, block, group=li.SINGLE: li.standard_log_softmax(logits, group)
    elif part == "cp-attention":  # only where the keys are split: one process keeps the fixed tree
        invariant = li.cp_attention
        li.cp_attention = lambda q, k, v, lengths, group: (li.standard_cp_attention if group.size > 1 else invariant)(q, k, v, lengths, group)


def _standard_ep_combine(rmoe) -> None:
    """--standard-part ep-combine: MoETPModel's layer with the standard expert-parallel combine in the invariant mode."""
    mi = rmoe.mi

    def mlp_residual(self, i, x):
        p = f"layers.{i}.moe."
        h = self._norm(x, f"layers.{i}.mlp_norm.weight")
        weights, ids = mi.route(h, self.w[p + "router.weight"], self.moe.top_k)
        return mi.standard_expert_parallel(x, h, ids, weights, self.w[p + "w13"], self.w[p + "w2"], self.group)

    rmoe.MoETPModel._mlp_residual = mlp_residual


def _records(done, lps) -> list[dict]:
    return [{"id": i, "step": 0, "tokens": list(t), "logprobs": [float(x) for x in lp.float().cpu().tolist()]}
            for (i, _, t, _), lp in zip(done, lps)]


def locate_worker(config, rank, toy_rollout, toy_trainer, rpar, tpar, rli, tli, mcfg, tcfg, weights, tp_group, device) -> dict:
    """Record this rank's rollout shards and the trainer at TP 1 cut to the same shards."""
    import torch
    import torch.distributed as dist

    from zmr.evidence import locate

    out = Path(config["out"])
    dtype = getattr(torch, DTYPES[config["dtypes"][0]])
    tp, r = tp_group.size, tp_group.rank
    requests = db.make_requests(config["batch_sizes"][0], _Args(config))
    rbi = importlib.import_module("toy_rollout.batch_invariant")
    tbi = importlib.import_module("toy_trainer.batch_invariant")
    if config["break_rank"] == rank:  # the broken layout: this rank's partial products in one GEMM over its whole K
        rli.local_partial = lambda x, weight, chunk: rbi.linear(x.float().contiguous(), weight.float().contiguous())

    # -- the rollout: this rank's shards as they are --
    model = rpar.TPModel(mcfg, weights, tp_group, device=device, dtype=dtype, layout_invariant=True)
    engine = rpar.TPEngine(model, max_running=min(len(requests), config["max_running"]), seed=config["seed"])
    rec = locate.Recorder(out / f"rollout-rank{rank}", side=f"rollout rank {rank} of TP {tp}", overwrite=True)
    close_step = demo_locate.trace_engine(model, engine, requests, rec, sample_inputs=False)
    with rec, _wrapped(rbi, rli, tp, r, side="rollout"):
        completions = engine.generate([toy_rollout.Request(rid, prompt, n) for rid, prompt, n in requests])
        close_step()
    done = [(c.id, c.prompt, c.tokens) for c in completions]
    box = [done]
    dist.broadcast_object_list(box, src=0)  # the trainer scores rank 0's tokens (all ranks sample alike unless broken)
    done = box[0]

    # -- the trainer at TP 1, cut to this rank's shards --
    policy = toy_trainer.ToyPolicy(tcfg, weights, device=device, dtype=dtype, batch_invariant=True)
    prompts, responses = [p for _, p, _ in done], [t for _, _, t in done]
    ids, lengths = toy_trainer.pack(prompts, responses, device)
    width = tpar.padded_length(ids.shape[1], 1)
    ids_pad = torch.nn.functional.pad(ids, (0, width - ids.shape[1]))
    rows = locate.padded_rows([i for i, _, _ in done], [int(n) - 1 for n in lengths], width, tokens=ids_pad)
    seqs, positions, tokens = [], [], []
    for b, (sid, p, t) in enumerate(done):
        for i in range(len(t)):
            seqs.append(sid)
            positions.append(len(p) - 1 + i)
            tokens.append(int(ids_pad[b, len(p) - 1 + i]))
    with locate.Recorder(out / f"trainer-rank{rank}", side=f"trainer TP 1 as rank {rank} of {tp}", overwrite=True) as trec, \
            _wrapped(tbi, tli, tp, r, side="trainer"):
        with trec.step(rows, label="score"), torch.no_grad():
            lps = tpar.response_logprobs(policy, prompts, responses, tli.SINGLE, layout_invariant=True)
            locate.dump("token_logprob", torch.cat([lp.float() for lp in lps]), rows=locate.Rows.make(seqs, positions, tokens))
    return {"rank": rank, "tokens": sum(len(t) for _, _, t in done)}


@contextlib.contextmanager
def _wrapped(bi_mod, li_mod, tp: int, r: int, side: str):
    """Record rms_norm, column_linear, row_partial, row_linear and attention; on the trainer side, rank r's shard of each.

    The rollout records what the rank computes: its column shard, its heads, its subtree of the row-parallel
    K chunks (the "partial"), and the replicated results. The trainer (one process) records the same cut of
    its full tensors: the same columns and heads, and for the partial the same function on the same share of K.
    """
    from zmr.evidence import locate

    orig = {"rms_norm": bi_mod.rms_norm, "column_linear": li_mod.column_linear, "local_partial": li_mod.local_partial,
            "row_linear": li_mod.row_linear, "causal_attention": li_mod.causal_attention, "cp_attention": li_mod.cp_attention}
    trainer = side == "trainer"

    def rms_norm(x, weight, eps):
        out = orig["rms_norm"](x, weight, eps)
        locate.dump("rms_norm", out, inputs={"x": x})
        return out

    def column_linear(x, weight, block):
        out = orig["column_linear"](x, weight, block)
        view = out
        if trainer:  # columns of `parts` concatenated projections, rank r's 1/tp of each
            parts = out.shape[-1] // (block * li_mod.N_BLOCKS)
            view = out.reshape(*out.shape[:-1], parts, tp, -1)[..., r, :].reshape(*out.shape[:-1], -1)
        locate.dump("column_linear", view, inputs={"x": x})
        return out

    def local_partial(x, weight, chunk):
        if trainer:  # rank r's share of K, through the same function
            k = x.shape[-1] // tp
            xs, ws = x[..., r * k:(r + 1) * k].contiguous(), weight[:, r * k:(r + 1) * k].contiguous()
            locate.dump("row_partial", orig["local_partial"](xs, ws, chunk), inputs={"x": xs})
            return orig["local_partial"](x, weight, chunk)
        out = orig["local_partial"](x, weight, chunk)
        locate.dump("row_partial", out, inputs={"x": x})
        return out

    def row_linear(*a, **kw):
        out = orig["row_linear"](*a, **kw)
        locate.dump("row_linear", out)
        return out

    def causal_attention(q, *a, **kw):  # the rollout's: [1, n] (prefill) or [B, 1] (decode) queries
        out = orig["causal_attention"](q, *a, **kw)
        locate.dump("attention", out.reshape(-1, *out.shape[2:]))
        return out

    def cp_attention(q, *a, **kw):  # the trainer's [B, T, heads, d]: rank r's heads
        out = orig["cp_attention"](q, *a, **kw)
        h = out.shape[2] // tp
        locate.dump("attention", out[:, :, r * h:(r + 1) * h])
        return out

    bi_mod.rms_norm, li_mod.column_linear, li_mod.local_partial = rms_norm, column_linear, local_partial
    li_mod.row_linear, li_mod.causal_attention, li_mod.cp_attention = row_linear, causal_attention, cp_attention
    try:
        yield
    finally:
        bi_mod.rms_norm, li_mod.column_linear, li_mod.local_partial = orig["rms_norm"], orig["column_linear"], orig["local_partial"]
        li_mod.row_linear, li_mod.causal_attention, li_mod.cp_attention = orig["row_linear"], orig["causal_attention"], orig["cp_attention"]


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
