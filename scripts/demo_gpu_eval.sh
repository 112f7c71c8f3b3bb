#!/usr/bin/env bash
# The demo's zero-mismatch evidence on one GPU, from the repository root of a fresh machine
# (torch with CUDA and Triton installed, zmr not): build the release trees, export them, then
#   1. the kernel tests of both trees (tests/test_batch_invariant_kernels.py; the GPU ones run here);
#   2. scripts/demo_bitwise.py: fp32 and bf16, batches 8 and 128 (decode steps of 128 rows),
#      hidden 2048, 4 layers, once per TOY_BI_GEMM_DTYPE in BITWISE_GEMMS: after == 0, before > 0;
#   3. scripts/demo_throughput.py: three arms interleaved (toy upstream, fastest standard path,
#      zero-mismatch), hidden 2048, 4 layers, 128 requests x 32 new tokens, REPS reps, per dtype in
#      DTYPES and per --max-running in BATCHES; then one profiled run per arm (--reps 0 --profile:
#      dispatched ops and GPU kernel time per token, by kernel, over the first PROFILE_WAVES waves of
#      --max-running requests), in a process of its own.
# Writes $OUT/demo_gpu_eval.json (commit ids, versions, every summary) and $OUT/demo_gpu_eval.log.
# With every default, more than 10 minutes on one H200 (the toy upstream arm at batch 8 takes minutes;
# THROUGHPUT_ARMS leaves it out); each step has a time limit (STEP_TIMEOUT) and no step starts that could
# end after DEADLINE seconds (what is skipped is recorded as null). DEVICE, HIDDEN, LAYERS, HEADS, REQUESTS,
# NEW_TOKENS, REPS, BITWISE_BATCHES override the defaults (e.g. DEVICE=cpu HIDDEN=64 LAYERS=2 HEADS=4
# for a dry run); INSTALL=0 skips the pip install (keeps a shared virtual environment as it is);
# BUILD=0 uses release branches built elsewhere; BITWISE=0 skips the bitwise runs, PROFILE=0 the profiled runs (PROFILE_ARMS: which arms), KERNEL_TESTS=0 the kernel tests;
# THROUGHPUT_ARMS picks the timed arms (the toy upstream at batch 8 takes minutes).
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
KERNEL_TESTS=${KERNEL_TESTS:-1}
BITWISE_GEMMS=${BITWISE_GEMMS:-native fp32}
DTYPES=${DTYPES:-bf16 fp32}
BATCHES=${BATCHES:-128 8}
THROUGHPUT_ARMS=${THROUGHPUT_ARMS:-upstream,standard,zero_mismatch}
PROFILE_WAVES=${PROFILE_WAVES:-4}
PROFILE_ARMS=${PROFILE_ARMS:-standard,zero_mismatch}  # the profiler's per-op cost makes the upstream arm's run long
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
DEADLINE=${DEADLINE:-560}
mkdir -p "$OUT"
LOG=$OUT/demo_gpu_eval.log
: >"$LOG"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
START=$SECONDS
# step NAME COMMAND: run the shell COMMAND under STEP_TIMEOUT unless DEADLINE has passed; its status goes to $WORK/NAME.rc
step() {
    local name=$1
    if [ $((SECONDS - START + STEP_TIMEOUT)) -gt "$DEADLINE" ]; then
        say "skipped $name (it could end after DEADLINE=${DEADLINE}s)"
        return 0
    fi
    say "$name"
    local rc=0
    timeout "$STEP_TIMEOUT" bash -o pipefail -c "$2" || rc=$?
    echo "$rc" >"$WORK/$name.rc"
    [ "$rc" = 0 ] || { say "$name: exit $rc"; status=1; }
}

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
if [ "${BUILD:-1}" = 1 ]; then
    "$PY" -m zmr build demo 2>&1 | tee -a "$LOG"
else  # BUILD=0: the release branches are already in this repository (built elsewhere with zmr build demo)
    say "BUILD=0: using the rollout/demo and trainer/demo branches as they are"
fi
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
kernel_tests() { (cd "$WORK/$1" && "$PY" -m pytest -q -rs tests/test_batch_invariant_kernels.py) 2>&1 | tee -a "$LOG"; }
bitwise() {
    TOY_BI_GEMM_DTYPE=$1 "$PY" scripts/demo_bitwise.py --rollout "$WORK/rollout" --trainer "$WORK/trainer" \
        --artifacts "$WORK/bitwise-$1" --device "$DEVICE" --dtypes fp32,bf16 --batch-sizes "$BITWISE_BATCHES" \
        --max-running 128 --hidden "$HIDDEN" --heads "$HEADS" --layers "$LAYERS" --vocab 1024 \
        --prompt-len 16:64 --new-tokens 8:24 2>&1 | tee -a "$LOG"
}
throughput() {  # DTYPE BATCH REPS [--profile] > json
    "$PY" scripts/demo_throughput.py --rollout "$WORK/rollout" --device "$DEVICE" --dtype "$1" --hidden "$HIDDEN" \
        --layers "$LAYERS" --heads "$HEADS" --vocab 512 --requests "$REQUESTS" --max-running "$2" \
        --new-tokens "$NEW_TOKENS" --reps "$3" --arms "$THROUGHPUT_ARMS" "${@:4}" 2>>"$LOG" | tail -1
}
export -f say kernel_tests bitwise throughput
export THROUGHPUT_ARMS PY WORK LOG DEVICE HIDDEN LAYERS HEADS REQUESTS NEW_TOKENS BITWISE_BATCHES
if [ "$KERNEL_TESTS" = 1 ]; then
    for c in rollout trainer; do step "kernel-tests-$c" "kernel_tests $c"; done
fi
first_gemm=${BITWISE_GEMMS%% *}
if [ "$BITWISE" = 1 ] && [ -n "$first_gemm" ]; then step "bitwise-$first_gemm" "bitwise $first_gemm"; fi
# profiled runs serve the first PROFILE_WAVES waves of requests (per-token figures; the profiler takes minutes over all at batch 8)
profile() { step "profile-$1-$2" "throughput $1 $2 0 --profile --profile-requests $(($2 * PROFILE_WAVES)) --arms $PROFILE_ARMS >$WORK/profile-$1-$2.json"; }
for dtype in $DTYPES; do
    for batch in $BATCHES; do
        step "throughput-$dtype-$batch" "throughput $dtype $batch $REPS >$WORK/throughput-$dtype-$batch.json"
        [ ! -e "$WORK/throughput-$dtype-$batch.json" ] || tee -a "$LOG" <"$WORK/throughput-$dtype-$batch.json"
        # the headline figure's profile right after it; the others at the end
        if [ "$PROFILE" = 1 ] && [ "$dtype/$batch" = "${DTYPES%% *}/${BATCHES%% *}" ]; then profile "$dtype" "$batch"; fi
    done
done
for gemm in ${BITWISE_GEMMS#"$first_gemm"}; do
    if [ "$BITWISE" = 1 ]; then step "bitwise-$gemm" "bitwise $gemm"; fi
done
for dtype in $DTYPES; do
    for batch in $BATCHES; do
        if [ "$PROFILE" = 1 ] && [ ! -e "$WORK/profile-$dtype-$batch.rc" ]; then profile "$dtype" "$batch"; fi
    done
done

ROLLOUT_COMMIT=$ROLLOUT_COMMIT TRAINER_COMMIT=$TRAINER_COMMIT WORK=$WORK BITWISE_GEMMS=$BITWISE_GEMMS DTYPES=$DTYPES BATCHES=$BATCHES "$PY" - "$OUT/demo_gpu_eval.json" <<'EOF' | tee -a "$LOG"
import json, os, sys
from pathlib import Path

import torch

work = Path(os.environ["WORK"])


def read(name, whole=False):
    path = work / name
    text = path.read_text().strip() if path.exists() else ""
    if not text:
        return None
    return json.loads(text if whole else text.splitlines()[-1])


def rc(name):
    path = work / f"{name}.rc"
    return int(path.read_text()) if path.exists() else None


try:
    import triton
    triton_version = triton.__version__
except ImportError:
    triton_version = None
result = {
    "commits": {"rollout/demo": os.environ["ROLLOUT_COMMIT"], "trainer/demo": os.environ["TRAINER_COMMIT"]},
    "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    "kernel_tests": {c: rc(f"kernel-tests-{c}") for c in ("rollout", "trainer")},
    "bitwise": {}, "throughput": {}, "profile": {},
}
for gemm in os.environ["BITWISE_GEMMS"].split():
    result["bitwise"][gemm] = read(f"bitwise-{gemm}/summary.json", whole=True)
for dtype in os.environ["DTYPES"].split():
    for batch in os.environ["BATCHES"].split():
        result["throughput"][f"{dtype}/{batch}"] = read(f"throughput-{dtype}-{batch}.json")
        profile = read(f"profile-{dtype}-{batch}.json")
        result["profile"][f"{dtype}/{batch}"] = profile and profile.get("profile")
Path(sys.argv[1]).write_text(json.dumps(result, indent=2) + "\n")
print("kernel tests (exit status):", result["kernel_tests"])
print("bitwise ok:", {g: (s or {}).get("ok") for g, s in result["bitwise"].items()})
for key, r in result["throughput"].items():
    if r:
        t = r["tokens_per_s"]
        prof = result["profile"].get(key) or {}
        us = {arm: (p or {}).get("kernel_us_per_token") for arm, p in prof.items()}
        print(f"{key:9} upstream {t.get('upstream')} standard {t.get('standard')} zero-mismatch {t.get('zero_mismatch')} tok/s; "
              f"overhead vs standard {r.get('overhead_vs_standard_percent')}%; kernel us/token {us}")
EOF
say "done (exit $status); results in $OUT/demo_gpu_eval.json"
exit $status
