#!/usr/bin/env bash
# The demo's zero-mismatch evidence on one GPU, from the repository root of a fresh machine
# (torch with CUDA installed, zmr not): build the release trees, export them, then
#   1. scripts/demo_bitwise.py: fp32 and bf16, batches 8 and 128 (decode steps of 128 rows),
#      hidden 2048, 4 layers, once per TOY_BI_GEMM_DTYPE (fp32, native): after == 0, before > 0;
#   2. scripts/demo_throughput.py: hidden 2048, 4 layers, 128 requests x 32 new tokens,
#      --max-running 128, 5 interleaved reps, fp32 and bf16, per TOY_BI_GEMM_DTYPE.
# Writes $OUT/demo_gpu_eval.json (commit ids, versions, every summary) and $OUT/demo_gpu_eval.log.
# About 5 minutes on one H200. DEVICE, HIDDEN, LAYERS, HEADS, REQUESTS, NEW_TOKENS, REPS,
# BITWISE_BATCHES override the defaults (e.g. DEVICE=cpu HIDDEN=64 LAYERS=2 HEADS=4 for a dry run);
# INSTALL=0 skips the pip install (keeps a shared virtual environment as it is); BITWISE=0 skips
# the bitwise runs; PROFILE=0 times without the profiler (its per-op cost slows the upstream path most);
# GEMMS and DTYPES pick the TOY_BI_GEMM_DTYPE values and dtypes of the throughput runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/demo-gpu-eval}
DEVICE=${DEVICE:-cuda}
HIDDEN=${HIDDEN:-2048}
LAYERS=${LAYERS:-4}
HEADS=${HEADS:-16}
REQUESTS=${REQUESTS:-128}
NEW_TOKENS=${NEW_TOKENS:-32}
REPS=${REPS:-5}
BITWISE_BATCHES=${BITWISE_BATCHES:-8,128}
PY=${PYTHON:-python3}
INSTALL=${INSTALL:-1}
BITWISE=${BITWISE:-1}
PROFILE=${PROFILE:-1}
GEMMS=${GEMMS:-fp32 native}
DTYPES=${DTYPES:-bf16 fp32}
mkdir -p "$OUT"
LOG=$OUT/demo_gpu_eval.log
: >"$LOG"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

# zmr needs PyYAML, typer and rich only. Offline-safe: no index, no build isolation; if the
# install fails, run it from the source tree with the dependencies already present.
if [ "$INSTALL" = 1 ] && ! "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . >>"$LOG" 2>&1; then
    say "pip install -e . failed; using PYTHONPATH=$ROOT"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c 'import yaml, typer, rich' || { say "zmr needs PyYAML, typer and rich"; exit 2; }

# Release branches need a git repository; a copied working tree may have none.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    say "no git repository here: git init (the release commit ids do not depend on it)"
    git init -q .
fi
"$PY" -m zmr build --all 2>&1 | tee -a "$LOG"
ROLLOUT_COMMIT=$(git rev-parse rollout/demo)
TRAINER_COMMIT=$(git rev-parse trainer/demo)
for c in rollout trainer; do
    mkdir -p "$WORK/$c"
    git archive "$c/demo" | tar -x -C "$WORK/$c"
done
say "trees: rollout/demo $ROLLOUT_COMMIT, trainer/demo $TRAINER_COMMIT"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")' | tee -a "$LOG"

status=0
for gemm in $GEMMS; do
    [ "$BITWISE" = 1 ] || continue
    say "bitwise, TOY_BI_GEMM_DTYPE=$gemm"
    TOY_BI_GEMM_DTYPE=$gemm "$PY" scripts/demo_bitwise.py --rollout "$WORK/rollout" --trainer "$WORK/trainer" \
        --artifacts "$WORK/bitwise-$gemm" --device "$DEVICE" --dtypes fp32,bf16 --batch-sizes "$BITWISE_BATCHES" \
        --max-running 128 --hidden "$HIDDEN" --heads "$HEADS" --layers "$LAYERS" --vocab 1024 \
        --prompt-len 16:64 --new-tokens 8:24 2>&1 | tee -a "$LOG" || status=1
done
for gemm in $GEMMS; do
    for dtype in $DTYPES; do
        say "throughput, $dtype, TOY_BI_GEMM_DTYPE=$gemm"
        TOY_BI_GEMM_DTYPE=$gemm "$PY" scripts/demo_throughput.py --rollout "$WORK/rollout" --device "$DEVICE" \
            --dtype "$dtype" --hidden "$HIDDEN" --layers "$LAYERS" --heads "$HEADS" --vocab 512 \
            --requests "$REQUESTS" --max-running 128 --new-tokens "$NEW_TOKENS" --reps "$REPS" $([ "$PROFILE" = 1 ] && echo --profile) \
            >"$WORK/throughput-$dtype-$gemm.json" 2>>"$LOG" || status=1
        tee -a "$LOG" <"$WORK/throughput-$dtype-$gemm.json"
    done
done

ROLLOUT_COMMIT=$ROLLOUT_COMMIT TRAINER_COMMIT=$TRAINER_COMMIT WORK=$WORK "$PY" - "$OUT/demo_gpu_eval.json" <<'EOF' | tee -a "$LOG"
import json, os, sys
from pathlib import Path

import torch

work = Path(os.environ["WORK"])
result = {
    "commits": {"rollout/demo": os.environ["ROLLOUT_COMMIT"], "trainer/demo": os.environ["TRAINER_COMMIT"]},
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    "bitwise": {}, "throughput": {},
}
for gemm in ("fp32", "native"):
    summary = work / f"bitwise-{gemm}" / "summary.json"
    result["bitwise"][gemm] = json.loads(summary.read_text()) if summary.exists() else None
    for dtype in ("bf16", "fp32"):
        path = work / f"throughput-{dtype}-{gemm}.json"
        text = path.read_text().strip() if path.exists() else ""
        result["throughput"][f"{dtype}/{gemm}"] = json.loads(text.splitlines()[-1]) if text else None
Path(sys.argv[1]).write_text(json.dumps(result, indent=2) + "\n")
print("bitwise ok:", {g: (s or {}).get("ok") for g, s in result["bitwise"].items()})
for key, r in result["throughput"].items():
    if r:
        print(f"{key:12} upstream {r['tokens_per_s_upstream']:>8} tok/s  batch-invariant "
              f"{r['tokens_per_s_batch_invariant']:>8} tok/s  overhead {r['overhead_percent']}%")
EOF
say "done (exit $status); results in $OUT/demo_gpu_eval.json"
exit $status
