#!/usr/bin/env python3
"""vLLM smoke-test template: are the rollout engine's log-probs bitwise self-consistent, and equal to the trainer's?

For a release branch of vLLM (installed in the interpreter that runs this),
on a small model, for each dtype asked for:

  1 batch-invariance  each prompt generated alone gives the same log-probs
                      (and tokens) as inside one batch of prompts of mixed
                      lengths and response lengths;
  2 decode-prefill    the decode log-probs of each response equal the
                      ``prompt_logprobs`` of prompt + response fed back;
  3 rollout-trainer   the engine's log-probs equal a trainer's teacher-forced
                      forward over the same token ids (Hugging Face
                      ``transformers``, `zmr.evidence.adapters.hf`).

Every comparison goes through ``python -m zmr mismatch ROLLOUT TRAIN --json``
(dumps written with `zmr.evidence.mismatch.write_dump`); each report is written as
``<artifacts>/[<ZMR_TEST>.]<dtype>.<check>.mismatch.json``, so ``zmr smoke
--record`` attaches the metrics to the test's evidence. Each check has a
negative control, ``<check>.control``: the same comparison with one log-prob
of the second dump moved by one unit in the last place, which must come out
as exactly one differing token (proof that the check compares bits and is
not vacuous). With ``--trainer-negative`` (default on when the trainer runs
vLLM's own kernels) check 3 also compares against the plain ``transformers``
forward, expected to differ.

``--trainer vllm-kernels`` (CPU, with ``--enforce-eager``): the trainer's
teacher-forced forward runs through vLLM's own CPU kernels
(`zmr.evidence.adapters.vllm_kernels`, the approach TorchTitan took with vLLM's
batch-invariant kernels); it is also compared with the engine's prefill
(``rollout-trainer.trainer-vs-prefill``, for information).

Pass/fail is a policy (``--require``, repeatable):

  bitwise:1,2          checks 1 and 2 must be bitwise zero (every dtype)
  bitwise:3@fp32       check 3 must be bitwise zero in fp32
  max-abs:3=2e-5       check 3's max |delta logprob| must be <= 2e-5
  max-abs:3@bf16=0.25  ... in bf16 only
  ran:3                check 3 must run (any result)

Default: ``bitwise:`` every check that runs. A check that cannot run (an
exception, token ids that diverge) fails whatever the policy says about its
numbers; a control that does not detect its one-ulp change fails the run.

Exit status: 0 policy met; 1 a required check failed (or a control); 2 bad
usage. The summary goes to stderr (``--json``: the summary as JSON on
stdout) and to ``<artifacts>/[<ZMR_TEST>.]vllm-smoke.summary.json``.

In a manifest: a model-level test (cwd = this repository, so the template's
path resolves) that needs the vLLM component; the interpreter must have that
tree's vLLM installed (a venv built from ``$ZMR_TREE_ROLLOUT``, or a
``pip install`` of it earlier in ``run``)::

    smoke:
      - name: vllm-logprobs
        needs: [rollout]
        run: python templates/vllm-smoke/check.py --model /models/tiny --require bitwise:1,2
        timeout: 1800

The engine runs in a child process per dtype (``--worker``): vLLM spawns
processes of its own and one process cannot host two engines cleanly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

CHECKS = {1: "batch-invariance", 2: "decode-prefill", 3: "rollout-trainer"}
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SENTENCES = [
    "The rollout engine samples tokens and the trainer scores them again.",
    "Bitwise equal log probabilities keep the importance ratio at exactly one.",
    "A batch of mixed lengths must not change what one prompt computes.",
    "Decode one token at a time, or prefill the whole sequence at once.",
    "Small models run on the CPU in a few seconds.",
    "def add(a, b):\n    return a + b\n",
    "Seven quiet rivers cross the green mountain before morning.",
    "One two three four five six seven eight nine ten.",
]


class Usage(Exception):
    """Bad arguments: exit 2."""


# ---------------------------------------------------------------------------
# arguments and policy
# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model folder or name (loaded by vLLM and by transformers)")
    p.add_argument("--tokenizer", default=None, help="tokenizer (default: the model's)")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16, fp16 (default fp32,bf16)")
    p.add_argument("--checks", default="1,2,3", help="which checks to run, comma list of 1, 2, 3 (default all)")
    p.add_argument("--require", action="append", default=[], metavar="RULE",
                   help="pass/fail rule (repeatable): bitwise:IDS[@DTYPE], max-abs:ID[@DTYPE]=X, ran:IDS "
                        "(default: bitwise for every check run)")
    p.add_argument("--artifacts", default=os.environ.get("ZMR_ARTIFACTS") or "build/vllm-smoke",
                   help="output folder (default $ZMR_ARTIFACTS, else build/vllm-smoke)")
    p.add_argument("--prefix", default=None,
                   help="file name prefix of the mismatch reports (default: $ZMR_TEST + '.', if set)")
    p.add_argument("--num-prompts", type=int, default=6, help="prompts per batch (default 6)")
    p.add_argument("--prompt-file", default=None, help="one prompt per line (default: built-in sentences)")
    p.add_argument("--prompt-len", default="4:80", help="MIN:MAX prompt length in tokens, spread over the prompts (default 4:80)")
    p.add_argument("--max-tokens", default="4:24", help="MIN:MAX response length, spread over the prompts (default 4:24)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--enforce-eager", action="store_true", help="vLLM without torch.compile (CUDA graphs / inductor off)")
    p.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                   help="KV cache size (default: 512 MiB on a CPU platform, the engine's default elsewhere)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra vllm.LLM keyword argument (VALUE parsed as JSON if it parses, else a string)")
    p.add_argument("--in-process", action="store_true",
                   help="run vLLM's engine core and worker inside the child process "
                        "(VLLM_ENABLE_V1_MULTIPROCESSING=0, distributed_executor_backend=uni): faster start on a CPU")
    p.add_argument("--trainer", choices=("hf", "vllm-kernels"), default="hf",
                   help="trainer side of check 3: hf (transformers forward, the usual trainer) or vllm-kernels "
                        "(the same forward through vLLM's CPU kernels, the TorchTitan approach)")
    p.add_argument("--trainer-negative", action=argparse.BooleanOptionalAction, default=None,
                   help="also compare check 3 against the plain transformers forward, expected to differ "
                        "(default: on with --trainer vllm-kernels)")
    p.add_argument("--attn-implementation", default="eager", help="transformers attention (default eager)")
    p.add_argument("--trainer-batch-size", type=int, default=4, help="sequences per trainer forward (default 4)")
    p.add_argument("--trainer-padding", choices=("left", "right"), default="right")
    p.add_argument("--step", type=int, default=0, help="the step written into the dumps (default 0)")
    p.add_argument("--timeout", type=float, default=1500, help="seconds per engine child process (default 1500)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: run the engine for one dtype
    args = p.parse_args(argv)
    try:
        args.dtypes = _list(args.dtypes, DTYPES, "--dtypes")
        args.checks = sorted({int(c) for c in _list(args.checks, {str(k): k for k in CHECKS}, "--checks")})
        args.prompt_len = _range(args.prompt_len, "--prompt-len")
        args.max_tokens = _range(args.max_tokens, "--max-tokens")
        args.engine_args = _engine_args(args.engine_arg)
        args.policy = parse_policy(args.require, args.checks, args.dtypes)
        if args.num_prompts < 2:
            raise Usage("--num-prompts must be at least 2 (a batch)")
    except Usage as err:
        p.error(str(err))
    if args.trainer_negative is None:
        args.trainer_negative = args.trainer == "vllm-kernels"
    if args.prefix is None:
        args.prefix = f"{os.environ['ZMR_TEST']}." if os.environ.get("ZMR_TEST") else ""
    return args


def _list(text, known, flag):
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in known]
    if bad or not items:
        raise Usage(f"{flag}: unknown {bad[0]!r}; use {', '.join(known)}" if bad else f"{flag}: empty")
    return items


def _range(text, flag):
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise Usage(f"{flag}: expected MIN:MAX, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise Usage(f"{flag}: expected 1 <= MIN <= MAX, got {text!r}")
    return lo, hi


def _engine_args(items):
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise Usage(f"--engine-arg {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def parse_policy(rules, checks, dtypes):
    """Rules -> list of (kind, check, dtype or None, bound). Default: bitwise for every check run."""
    if not rules:
        return [("bitwise", c, None, None) for c in checks]
    policy = []
    for rule in rules:
        for part in rule.split(";"):
            part = part.strip()
            if not part:
                continue
            kind, sep, rest = part.partition(":")
            if not sep or kind not in ("bitwise", "max-abs", "ran"):
                raise Usage(f"--require {part!r}: expected bitwise:IDS[@DTYPE], max-abs:ID[@DTYPE]=X or ran:IDS")
            bound = None
            if kind == "max-abs":
                rest, sep, value = rest.partition("=")
                try:
                    bound = float(value)
                except ValueError:
                    raise Usage(f"--require {part!r}: max-abs needs =X, a number") from None
            rest, _, dtype = rest.partition("@")
            if dtype and dtype not in DTYPES:
                raise Usage(f"--require {part!r}: unknown dtype {dtype!r}; use {', '.join(DTYPES)}")
            for c in rest.split(","):
                try:
                    cid = int(c)
                except ValueError:
                    raise Usage(f"--require {part!r}: {c!r} is not a check number (1, 2, 3)") from None
                if cid not in CHECKS:
                    raise Usage(f"--require {part!r}: no check {cid}; checks are 1, 2, 3")
                if cid not in checks:
                    raise Usage(f"--require {part!r}: check {cid} is not run (--checks)")
                policy.append((kind, cid, dtype or None, bound))
    return policy


# ---------------------------------------------------------------------------
# prompts
# ---------------------------------------------------------------------------

def spread(lo, hi, n, i):
    """The i-th of n values spread from lo to hi (a fixed, mixed pattern: not sorted)."""
    if n == 1:
        return lo
    order = [(k * 7 + 3) % n for k in range(n)]  # a permutation for n not divisible by 7
    if len(set(order)) != n:
        order = list(range(n))
    return lo + (hi - lo) * order[i] // (n - 1)


def make_prompts(args, tokenizer):
    """Token-id prompts of mixed lengths (from sentences or --prompt-file), with one max_tokens each."""
    if args.prompt_file:
        texts = [line.rstrip("\n") for line in Path(args.prompt_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        texts = SENTENCES
    pool = []
    for t in texts:
        pool.extend(tokenizer.encode(t, add_special_tokens=False))
    if not pool:
        raise Usage("the prompts tokenize to nothing")
    bos = [tokenizer.bos_token_id] if getattr(tokenizer, "bos_token_id", None) is not None else []
    prompts, max_tokens = [], []
    for i in range(args.num_prompts):
        n = spread(args.prompt_len[0], args.prompt_len[1], args.num_prompts, i)
        start = (i * 13) % len(pool)
        body = [pool[(start + k) % len(pool)] for k in range(max(1, n - len(bos)))]
        prompts.append(bos + body)
        max_tokens.append(spread(args.max_tokens[0], args.max_tokens[1], args.num_prompts, (i + 1) % args.num_prompts))
    return prompts, max_tokens


# ---------------------------------------------------------------------------
# the engine side (child process, one per dtype)
# ---------------------------------------------------------------------------

def rollout_worker(args, dtype: str) -> int:
    """Run vLLM for one dtype: batched, one-by-one and fed-back generations; write dumps and outputs."""
    if args.in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        args.engine_args.setdefault("distributed_executor_backend", "uni")
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    try:
        from vllm.inputs import TokensPrompt
    except ImportError:  # older layouts
        from vllm.inputs.data import TokensPrompt  # type: ignore
    from zmr.evidence.adapters import vllm as zv
    from zmr.evidence.mismatch import write_dump

    out = Path(args.artifacts) / dtype
    out.mkdir(parents=True, exist_ok=True)
    kwargs = dict(
        model=args.model, tokenizer=args.tokenizer or args.model, dtype=DTYPES[dtype], seed=args.seed,
        max_model_len=args.max_model_len, enable_prefix_caching=False, enforce_eager=args.enforce_eager,
    )
    kv = args.kv_cache_memory_bytes
    if kv is None and current_platform.device_type == "cpu":
        kv = 512 << 20
    if kv is not None:
        kwargs["kv_cache_memory_bytes"] = kv
    kwargs.update(args.engine_args)
    t0 = time.monotonic()
    llm = LLM(**kwargs)
    timings = {"engine_start_s": round(time.monotonic() - t0, 3)}
    tokenizer = llm.get_tokenizer()
    prompts, max_tokens = make_prompts(args, tokenizer)
    ids = [f"p{i}" for i in range(len(prompts))]

    def params(i, **extra):
        return SamplingParams(
            max_tokens=max_tokens[i], temperature=args.temperature, seed=args.seed + 1000 + i, logprobs=0,
            ignore_eos=True, **extra,
        )

    sps = [params(i) for i in range(len(prompts))]
    t0 = time.monotonic()
    batch = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps, use_tqdm=False)
    timings["batch_s"] = round(time.monotonic() - t0, 3)
    prov = lambda bs, sp, **extra: zv.provenance(llm, batch_size=bs, sampling_params=sp, extra={"check_template": "vllm-smoke", **extra})  # noqa: E731
    write_dump(out / "rollout-batch.jsonl", zv.response_records(batch, ids=ids, step=args.step),
               provenance=prov(len(prompts), sps[0], run="batch"))
    saved = {"batch": [zv.output_to_json(o) for o in batch]}
    responses = [list(o.outputs[0].token_ids) for o in batch]

    if 1 in args.checks:
        t0 = time.monotonic()
        solo = []
        for i, p in enumerate(prompts):
            solo.extend(llm.generate([TokensPrompt(prompt_token_ids=p)], [sps[i]], use_tqdm=False))
        timings["solo_s"] = round(time.monotonic() - t0, 3)
        write_dump(out / "rollout-solo.jsonl", zv.response_records(solo, ids=ids, step=args.step),
                   provenance=prov(1, sps[0], run="solo"))
        saved["solo"] = [zv.output_to_json(o) for o in solo]

    if 2 in args.checks:
        fed = [TokensPrompt(prompt_token_ids=p + r) for p, r in zip(prompts, responses)]
        sp = SamplingParams(max_tokens=1, temperature=args.temperature, seed=args.seed, prompt_logprobs=0, logprobs=0)
        t0 = time.monotonic()
        prefill = llm.generate(fed, [sp] * len(fed), use_tqdm=False)
        timings["prefill_s"] = round(time.monotonic() - t0, 3)
        write_dump(out / "prefill.jsonl",
                   zv.prompt_records(prefill, ids=ids, step=args.step, start=[len(p) for p in prompts]),
                   provenance=prov(len(prompts), sp, run="prefill (prompt + response fed back, prompt_logprobs=0)"))
        saved["prefill"] = [zv.output_to_json(o) for o in prefill]

    meta = {
        "dtype": dtype, "model": args.model, "prompts": prompts, "responses": responses, "ids": ids,
        "max_tokens": max_tokens, "provenance": prov(len(prompts), sps[0]), "timings": timings,
        "platform": current_platform.device_type, "pad_token_id": tokenizer.pad_token_id,
    }
    (out / "rollout.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "request-outputs.json").write_text(json.dumps(saved) + "\n")
    return 0


# ---------------------------------------------------------------------------
# the trainer side (parent process)
# ---------------------------------------------------------------------------

def trainer_dump(args, dtype, meta, target: Path, kernels: str) -> dict:
    """Teacher-forced log-probs of the responses with transformers (kernels 'hf') or vLLM's kernels."""
    from zmr.evidence.adapters import hf
    from zmr.evidence.mismatch import write_dump

    model = hf.load(args.model, dtype=DTYPES[dtype], attn_implementation=args.attn_implementation)
    extra = {"check_template": "vllm-smoke", "trainer_kernels": kernels}
    seqs = [hf.Sequence(p, r, id=i, step=args.step) for p, r, i in zip(meta["prompts"], meta["responses"], meta["ids"])]
    t0 = time.monotonic()
    if kernels == "vllm-kernels":
        from zmr.evidence.adapters import vllm_kernels

        extra["kernels"] = vllm_kernels.describe()
        lps = vllm_kernels.teacher_forced_logprobs(model, seqs, batch_size=args.trainer_batch_size)
    else:
        lps = hf.teacher_forced_logprobs(model, seqs, padding=args.trainer_padding, batch_size=args.trainer_batch_size,
                                         pad_id=meta.get("pad_token_id"))
    seconds = time.monotonic() - t0
    write_dump(target, hf.records(seqs, lps),
               provenance=hf.provenance(model, batch_size=args.trainer_batch_size, padding=args.trainer_padding, extra=extra))
    del model
    return {"trainer_s": round(seconds, 3)}


# ---------------------------------------------------------------------------
# comparisons (through `zmr mismatch --json`)
# ---------------------------------------------------------------------------

def zmr_mismatch(a: Path, b: Path, report: Path) -> dict:
    """Run ``python -m zmr mismatch A B --json``; write its report to *report*; return it (or an error dict)."""
    proc = subprocess.run([sys.executable, "-m", "zmr", "mismatch", str(a), str(b), "--json"],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        return {"error": (proc.stderr or proc.stdout).strip() or f"zmr mismatch exited {proc.returncode}"}
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return {"error": f"zmr mismatch printed no JSON: {proc.stdout[:200]!r} {proc.stderr[:200]!r}"}
    report.parent.mkdir(parents=True, exist_ok=True)
    tmp = report.with_name(report.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, report)
    return data


def _read_records(path: Path):
    from zmr.evidence.mismatch import read_dump

    dump = read_dump(path)
    return dump, [{"id": r.id, "step": r.step, "dtype": r.dtype, "tokens": r.tokens.tolist(), "logprobs": r.logprobs.tolist()} for r in dump]


def align_tokens(a: Path, b: Path, folder: Path, name: str) -> tuple[Path, Path, list[dict]]:
    """When sampled tokens diverge (check 1), cut both dumps to the common prefix; return paths and divergences."""
    from zmr.evidence.mismatch import write_dump

    da, ra = _read_records(a)
    db, rb = _read_records(b)
    index = {(r["step"], r["id"]): r for r in rb}
    diverged = []
    for r in ra:
        other = index.get((r["step"], r["id"]))
        if other is None:
            continue
        n = 0
        while n < min(len(r["tokens"]), len(other["tokens"])) and r["tokens"][n] == other["tokens"][n]:
            n += 1
        if n < len(r["tokens"]) or n < len(other["tokens"]):
            diverged.append({"id": r["id"], "step": r["step"], "first_token_divergence": n,
                             "tokens": [len(r["tokens"]), len(other["tokens"])]})
            for rec in (r, other):
                rec["tokens"], rec["logprobs"] = rec["tokens"][:n], rec["logprobs"][:n]
    if not diverged:
        return a, b, []
    ca, cb = folder / f"{name}.common-prefix.a.jsonl", folder / f"{name}.common-prefix.b.jsonl"
    write_dump(ca, ra, provenance=da.provenance)
    write_dump(cb, rb, provenance=db.provenance)
    return ca, cb, diverged


def nudge(src: Path, dst: Path) -> dict:
    """Copy a dump with the first log-prob moved by one ulp of its dtype (toward -inf)."""
    import numpy as np

    from zmr.evidence.mismatch import write_dump

    dump, recs = _read_records(src)
    for rec in recs:
        if len(rec["logprobs"]):
            lp = np.array(rec["logprobs"], dtype=np.float64)
            old = lp[0]
            if rec["dtype"] == "float32":
                lp = lp.astype(np.float32)
                lp[0] = np.nextafter(lp[0], np.float32(-np.inf))
            elif rec["dtype"] == "float64":
                lp[0] = np.nextafter(lp[0], -np.inf)
            elif old == 0:  # bfloat16 zero: the negative subnormal next to it
                lp[0] = -float(np.array([1 << 16], dtype=np.uint32).view(np.float32)[0])
            else:  # bfloat16: step the 16-bit pattern (magnitude up for negatives, down for positives)
                bits = np.array([old], dtype=np.float32).view(np.uint32)
                bits = bits + np.uint32(1 << 16) if old < 0 else bits - np.uint32(1 << 16)
                lp[0] = float(bits.view(np.float32)[0])
            rec["logprobs"] = [float(v) for v in lp]
            write_dump(dst, recs, provenance=dump.provenance)
            return {"id": rec["id"], "position": 0, "from": float(old), "to": float(lp[0])}
    raise RuntimeError(f"{src}: no log-prob to nudge")


def summarize(data: dict) -> dict:
    if "error" in data:
        return {"error": data["error"]}
    o = data["overall"]
    return {
        "bitwise_equal": bool(data["bitwise_equal"]),
        "tokens": o["tokens"],
        "tokens_bitwise_equal": o["bitwise_equal"],
        "fraction_bitwise_equal": o["fraction_bitwise_equal"],
        "sequences": o["sequences"],
        "sequences_diverged": o["sequences_diverged"],
        "max_abs_diff": o["max_abs_diff"],
        "mean_abs_diff": o["mean_abs_diff"],
        "k3": o["k3"],
        "ratio_max": o["ratio_max"],
    }


def compare(args, folder: Path, dtype: str, check: int, a: Path, b: Path, label: str | None = None) -> dict:
    name = label or CHECKS[check]
    base = Path(args.artifacts)
    entry: dict = {"check": check, "name": name, "dtype": dtype, "rollout": str(a), "trainer": str(b)}
    diverged = []
    if check == 1:
        a, b, diverged = align_tokens(a, b, folder, name)
    report = base / f"{args.prefix}{dtype}.{name}.mismatch.json"
    data = zmr_mismatch(a, b, report)
    entry.update(summarize(data))
    entry["report"] = str(report)
    if diverged:
        entry["token_divergence"] = diverged
        entry["bitwise_equal"] = False
        entry["note"] = f"sampled tokens diverged in {len(diverged)} sequence(s); compared the common prefix"
    if "error" not in data and label is None:
        # negative control: one log-prob moved by one ulp must show as exactly one differing token
        # (against the rollout side when the check is bitwise zero, else against the unmoved dump itself)
        control = folder / f"{name}.control.jsonl"
        moved = nudge(b, control)
        first = a if entry["bitwise_equal"] else b
        cdata = zmr_mismatch(first, control, base / f"{args.prefix}{dtype}.{name}.control.mismatch.json")
        detected = "error" not in cdata and not cdata["bitwise_equal"]
        ok = detected and cdata["overall"]["tokens"] - cdata["overall"]["bitwise_equal"] == 1
        entry["control"] = {"kind": "one-ulp", "against": "rollout" if first == a else "itself", "moved": moved,
                            "detected": bool(detected), "ok": bool(ok)}
        if "error" in cdata:
            entry["control"]["error"] = cdata["error"]
    return entry


# ---------------------------------------------------------------------------
# policy and main
# ---------------------------------------------------------------------------

def evaluate(policy, results):
    """(ok, failures): every rule against every matching result; controls and errors always count."""
    failures = []
    for r in results:
        if "error" in r:
            failures.append(f"{r['dtype']} {r['name']}: {r['error'].splitlines()[0]}")
        ctl = r.get("control")
        if ctl is not None and not ctl["ok"]:
            failures.append(f"{r['dtype']} {r['name']}: its one-ulp control was not detected as exactly one differing token")
        if r.get("expect") == "mismatch" and r.get("bitwise_equal"):
            failures.append(f"{r['dtype']} {r['name']}: the negative control came out bitwise equal (the check cannot tell)")
    for kind, check, dtype, bound in policy:
        matching = [r for r in results if r["check"] == check and r.get("role", "check") == "check" and (dtype is None or r["dtype"] == dtype)]
        if not matching and dtype is not None:
            failures.append(f"rule {kind}:{check}@{dtype}: that dtype was not run")
        for r in matching:
            if "error" in r:
                continue
            if kind == "bitwise" and not r.get("bitwise_equal"):
                failures.append(f"{r['dtype']} {r['name']}: required bitwise zero, got {r['tokens'] - r['tokens_bitwise_equal']} of "
                                f"{r['tokens']} tokens differing (max |delta| {r['max_abs_diff']})"
                                + (f"; sampled tokens diverged in {len(r['token_divergence'])} sequence(s)" if r.get("token_divergence") else ""))
            elif kind == "max-abs":
                value = r.get("max_abs_diff")
                if value is None or (isinstance(value, float) and math.isnan(value)) or value > bound or r.get("token_divergence"):
                    failures.append(f"{r['dtype']} {r['name']}: max |delta| {value} > {bound}")
    return not failures, failures


def run_worker(args, dtype, argv) -> tuple[int, str]:
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", dtype]
    log = Path(args.artifacts) / dtype / "engine.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=args.timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, str(log)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        return rollout_worker(args, args.worker)
    base = Path(args.artifacts)
    base.mkdir(parents=True, exist_ok=True)
    results, runs = [], {}
    started = time.monotonic()
    for dtype in args.dtypes:
        folder = base / dtype
        t0 = time.monotonic()
        rc, log = run_worker(args, dtype, argv)
        run = {"engine_rc": rc, "engine_log": log, "engine_wall_s": round(time.monotonic() - t0, 3)}
        runs[dtype] = run
        if rc != 0:
            tail = Path(log).read_text(errors="replace").splitlines()[-15:]
            for c in args.checks:
                results.append({"check": c, "name": CHECKS[c], "dtype": dtype, "error": f"the vLLM engine run failed (exit {rc}); see {log}",
                                "log_tail": tail})
            continue
        meta = json.loads((folder / "rollout.json").read_text())
        run.update(meta["timings"])
        run["provenance"] = meta["provenance"]
        rollout = folder / "rollout-batch.jsonl"
        if 1 in args.checks:
            results.append(compare(args, folder, dtype, 1, folder / "rollout-solo.jsonl", rollout))
        if 2 in args.checks:
            results.append(compare(args, folder, dtype, 2, rollout, folder / "prefill.jsonl"))
        if 3 in args.checks:
            try:
                run.update(trainer_dump(args, dtype, meta, folder / "trainer.jsonl", args.trainer))
                results.append(compare(args, folder, dtype, 3, rollout, folder / "trainer.jsonl"))
                if args.trainer == "vllm-kernels" and 2 in args.checks:
                    # the trainer against the engine's own prefill: what the same kernels can promise
                    info = compare(args, folder, dtype, 3, folder / "prefill.jsonl", folder / "trainer.jsonl",
                                   label="rollout-trainer.trainer-vs-prefill")
                    info.update(role="info")
                    results.append(info)
                if args.trainer_negative:
                    trainer_dump(args, dtype, meta, folder / "trainer-plain.jsonl", "hf")
                    neg = compare(args, folder, dtype, 3, rollout, folder / "trainer-plain.jsonl", label="rollout-trainer.negative-plain-hf")
                    neg.update(role="negative-control", expect="mismatch")
                    results.append(neg)
            except Exception as exc:  # the trainer side failed: the check did not run
                results.append({"check": 3, "name": CHECKS[3], "dtype": dtype, "error": f"{type(exc).__name__}: {exc}"})
    ok, failures = evaluate(args.policy, results)
    notes = []
    if args.trainer == "vllm-kernels" and not args.enforce_eager:
        notes.append("--trainer vllm-kernels reproduces vLLM's eager mode (custom ops); without --enforce-eager the engine "
                     "runs torch.compile'd (inductor-fused) norms and activations, which the trainer does not reproduce")
    summary = {
        "template": "vllm-smoke",
        "ok": ok,
        "policy": [f"{k}:{c}" + (f"@{d}" if d else "") + (f"={b}" if b is not None else "") for k, c, d, b in args.policy],
        "failures": failures,
        "notes": notes,
        "bitwise_zero": {d: [r["check"] for r in results if r["dtype"] == d and r.get("role", "check") == "check" and r.get("bitwise_equal")]
                         for d in args.dtypes},
        "results": results,
        "runs": runs,
        "model": args.model,
        "trainer": args.trainer,
        "wall_s": round(time.monotonic() - started, 3),
    }
    (base / f"{args.prefix}vllm-smoke.summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print_summary(summary, sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=1))
    return 0 if ok else 1


def print_summary(summary, out):
    print(f"vllm-smoke: {summary['model']} (trainer: {summary['trainer']})", file=out)
    for r in summary["results"]:
        role = "" if r.get("role", "check") == "check" else f" [{r['role']}]"
        if "error" in r:
            print(f"  {r['dtype']:5} {r['check']} {r['name']:<38}{role} ERROR {r['error'].splitlines()[0]}", file=out)
            continue
        verdict = "bitwise zero" if r.get("bitwise_equal") else "differs"
        ctl = r.get("control")
        ctl_txt = "" if ctl is None else ("  control ok" if ctl["ok"] else "  CONTROL NOT DETECTED")
        print(f"  {r['dtype']:5} {r['check']} {r['name']:<38}{role} {verdict:12} {r['tokens_bitwise_equal']}/{r['tokens']} equal, "
              f"max |d| {r['max_abs_diff']:.3g}{ctl_txt}" if r.get("max_abs_diff") is not None else
              f"  {r['dtype']:5} {r['check']} {r['name']:<38}{role} {verdict:12} {r['tokens_bitwise_equal']}/{r['tokens']} equal{ctl_txt}",
              file=out)
    print(("PASS" if summary["ok"] else "FAIL") + f" (policy {', '.join(summary['policy'])})", file=out)
    for f in summary["failures"]:
        print(f"  - {f}", file=out)
    for n in summary.get("notes", []):
        print(f"  note: {n}", file=out)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Usage as err:
        print(f"check.py: error: {err}", file=sys.stderr)
        sys.exit(2)
