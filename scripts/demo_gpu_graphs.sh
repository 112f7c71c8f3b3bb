#!/usr/bin/env bash
# The GPU evidence of CUDA graphs, the GPU-bound model, the roofline and the GEMM tiles (cases/demo/recipe.md),
# in parts that each fit a 10-minute device call:
#
#   PART=a  GPU tests of the rollout tree (graphs, kernels) and the trainer's tile tests; GEMM tiles per shape
#           of the GPU-bound model (demo_gemm_tune.py -> $OUT/tiles.json); throughput + roofline of the
#           GPU-bound model with those tiles (TOY_BI_GEMM_TILES); bitwise on the small model with graphs.
#   PART=b  with TILES (part a's tiles.json): the graph tests again; throughput + roofline of the GPU-bound
#           model with those tiles; bitwise on it with graphs and those tiles; throughput of the small model.
#
#   PART=c  with TILES: throughput of both models with a third arm, standard_varlen (PyTorch's varlen
#           FlashAttention / memory-efficient decode kernels reading the cache in place).
#
#   PART=d  fixed-shape cuBLAS (rollout 0012, trainer 0010; ROLLOUT and TRAINER are trees with it, BASE a rollout
#           tree without it, for its Triton GEMM, run with TILES): demo_gemm_chunks.py (checks and times C rows per
#           call against Triton and cuBLAS, writes the chosen rows to $OUT/rows.json, then TOY_BI_GEMM_ROWS);
#           throughput + roofline of both models (standard, standard_varlen, zero_mismatch); bitwise on both models
#           with graphs (negative control included); the decode step (--engine 0) of BASE on both models, the
#           before on the same device; the GPU tests of both trees; a kernel profile of the
#           GPU-bound model at bf16 batch 128. In that order, as far as DEADLINE lets it go.
#   PART=e  trees whose GEMM_ROWS is the choice of demo_gemm_chunks.py --choose-from (part d's JSON): throughput
#           + roofline of the GPU-bound model (standard_varlen, zero_mismatch) and of the small one, bitwise on both.
#
#   PART=moe  trees of demo-moe (the MoE model): bitwise with graphs on a 2048-wide MoE (8 experts of 1024, top-2)
#           and on the GPU-bound MoE preset; the decode step and engine of the GPU-bound MoE (--preset gpu-bound-moe)
#           against the standard grouped-GEMM and per-expert cuBLAS arms, bf16, batches 8 and 128, with the roofline.
#
#   ROLLOUT=tree TRAINER=tree OUT=dir PART=a bash scripts/demo_gpu_graphs.sh
#   ROLLOUT=tree TRAINER=tree OUT=dir PART=b TILES=tiles.json bash scripts/demo_gpu_graphs.sh
#
# Every step runs under `timeout`; its output goes to $OUT/log.txt, its JSON to $OUT/<step>.json.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/build/demo-gpu-graphs}
PART=${PART:-a}
REPS=${REPS:-5}
REQUESTS=${REQUESTS:-128}
mkdir -p "$OUT"
LOG=$OUT/log.txt
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
DEADLINE=${DEADLINE:-570}  # seconds: a step that could end later is skipped
step() {  # name timeout command...
    local name=$1 limit=$2
    shift 2
    if [ $((SECONDS + limit)) -gt "$DEADLINE" ]; then
        limit=$((DEADLINE - SECONDS))
        if [ "$limit" -lt 30 ]; then say "skipped $name (DEADLINE=${DEADLINE}s)"; return 0; fi
    fi
    say "$name (at most ${limit}s)"
    timeout "$limit" bash -c '"$@"' _ "$@" >"$OUT/$name.json" 2> >(tee -a "$LOG" >&2)
    local rc=$?
    say "$name: exit $rc"
    [ -s "$OUT/$name.json" ] || rm -f "$OUT/$name.json"
}
GPU_BOUND=(--hidden 4096 --layers 8 --heads 32 --vocab 32000)
SMALL=(--hidden 2048 --layers 4 --heads 16 --vocab 1024)
bitwise() {  # artifacts-name model-args...
    local name=$1
    shift
    "$PY" scripts/demo_bitwise.py --rollout "$ROLLOUT" --trainer "$TRAINER" --artifacts "/tmp/$name" --device cuda \
        --dtypes fp32,bf16 --batch-sizes 8,128 --max-running 128 --prompt-len 16:64 --new-tokens 8:24 --json "$@"
}
throughput() {  # preset arms extra...
    "$PY" scripts/demo_throughput.py --rollout "$ROLLOUT" --device cuda --preset "$1" --arms "$2" --dtype bf16,fp32 \
        --max-running 8,128 --requests "$REQUESTS" --prompt-len 32 --new-tokens 32 --reps "$REPS" "${@:3}"
}
export -f bitwise throughput
export ROLLOUT TRAINER PY REPS REQUESTS
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
          torch.cuda.get_device_name())' 2>&1 | tee -a "$LOG"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
if [ "$PART" = a ]; then
    say "tests"
    (cd "$ROLLOUT" && timeout 120 "$PY" -m pytest -q -rs tests/test_graphs.py tests/test_batch_invariant_kernels.py) 2>&1 | tail -15 | tee -a "$LOG"
    (cd "$TRAINER" && timeout 40 "$PY" -m pytest -q -rs tests/test_batch_invariant_kernels.py -k "tile") 2>&1 | tail -5 | tee -a "$LOG"
    step gemm-tune 130 "$PY" scripts/demo_gemm_tune.py --rollout "$ROLLOUT" --preset gpu-bound --rows 8,128 --table "$OUT/tiles.json"
    export TOY_BI_GEMM_TILES="$(cat "$OUT/tiles.json" 2>/dev/null || echo '{}')"
    say "TOY_BI_GEMM_TILES=$TOY_BI_GEMM_TILES"
    step throughput-gpu-bound-tuned 200 throughput gpu-bound standard,zero_mismatch
    unset TOY_BI_GEMM_TILES
    step bitwise-small 90 bitwise bitwise-small "${SMALL[@]}"
elif [ "$PART" = d ]; then  # fixed-shape cuBLAS: measured first, then the trees that use it
    export TOY_BI_GEMM_TILES="$(cat "${TILES:?TILES=tiles.json from part a}")"  # for BASE's Triton GEMM only
    step gemm-chunks 200 "$PY" scripts/demo_gemm_chunks.py --rollout "${BASE:?BASE=rollout tree without the cuBLAS GEMM}" \
        --table "$OUT/rows.json"
    unset TOY_BI_GEMM_TILES
    export TOY_BI_GEMM_ROWS="$(cat "$OUT/rows.json" 2>/dev/null || echo '{}')"
    say "TOY_BI_GEMM_ROWS=$TOY_BI_GEMM_ROWS"
    step throughput-gpu-bound 200 throughput gpu-bound standard,standard_varlen,zero_mismatch
    step bitwise-gpu-bound 120 bitwise bitwise-gpu-bound "${GPU_BOUND[@]}"
    # the same decode step on BASE (the Triton GEMM, TILES), in this call: the before of the same device
    TOY_BI_GEMM_TILES="$(cat "$TILES")" ROLLOUT="$BASE" step step-gpu-bound-base 70 throughput gpu-bound standard_varlen,zero_mismatch --engine 0
    step throughput-small 80 throughput small standard,standard_varlen,zero_mismatch
    step bitwise-small 80 bitwise bitwise-small "${SMALL[@]}"
    ROLLOUT="$BASE" step step-small-base 40 throughput small standard_varlen,zero_mismatch --engine 0
    say "tests"
    (cd "$ROLLOUT" && timeout 100 "$PY" -m pytest -q -rs tests/test_batch_invariant_kernels.py tests/test_graphs.py) 2>&1 | tail -6 | tee -a "$LOG"
    (cd "$TRAINER" && timeout 60 "$PY" -m pytest -q -rs tests/test_batch_invariant_kernels.py) 2>&1 | tail -4 | tee -a "$LOG"
    step profile-gpu-bound 60 "$PY" scripts/demo_throughput.py --rollout "$ROLLOUT" --device cuda --preset gpu-bound \
        --arms standard_varlen,zero_mismatch --dtype bf16 --max-running 128 --requests 128 --prompt-len 32 --new-tokens 32 \
        --reps 1 --profile --profile-requests 128
elif [ "$PART" = moe ]; then  # the MoE demo: bitwise with graphs, then the overhead against the standard MoE arms
    step bitwise-moe-small 150 bitwise bitwise-moe-small --moe "${SMALL[@]}" --intermediate 1024
    step throughput-gpu-bound-moe 240 "$PY" scripts/demo_throughput.py --rollout "$ROLLOUT" --device cuda --moe \
        --preset gpu-bound-moe --arms standard,standard_dense,zero_mismatch --dtype bf16 --max-running 8,128 \
        --requests "$REQUESTS" --prompt-len 32 --new-tokens 32 --reps "$REPS"
    step bitwise-gpu-bound-moe 150 bitwise bitwise-gpu-bound-moe --moe "${GPU_BOUND[@]}" --intermediate 2048
elif [ "$PART" = e ]; then  # the trees' own GEMM_ROWS (demo_gemm_chunks.py --choose-from part d's JSON): both models again
    step throughput-gpu-bound 130 throughput gpu-bound standard_varlen,zero_mismatch
    step bitwise-gpu-bound 90 bitwise bitwise-gpu-bound "${GPU_BOUND[@]}"
    step throughput-small 40 throughput small standard,standard_varlen,zero_mismatch
    step bitwise-small 30 bitwise bitwise-small "${SMALL[@]}"
elif [ "$PART" = c ]; then  # the standard arm with PyTorch's varlen decode kernels beside the masked SDPA
    export TOY_BI_GEMM_TILES="$(cat "${TILES:?TILES=tiles.json from part a}")"
    say "TOY_BI_GEMM_TILES=$TOY_BI_GEMM_TILES"
    step throughput-gpu-bound-varlen 240 throughput gpu-bound standard,standard_varlen,zero_mismatch
    unset TOY_BI_GEMM_TILES
    step throughput-small-varlen 80 throughput small standard,standard_varlen,zero_mismatch
else
    export TOY_BI_GEMM_TILES="$(cat "${TILES:?TILES=tiles.json from part a}")"
    say "TOY_BI_GEMM_TILES=$TOY_BI_GEMM_TILES"
    (cd "$ROLLOUT" && timeout 60 "$PY" -m pytest -q -rs tests/test_graphs.py) 2>&1 | tail -5 | tee -a "$LOG"
    step throughput-gpu-bound-tuned 240 throughput gpu-bound standard,zero_mismatch
    step bitwise-gpu-bound-tuned 150 bitwise bitwise-gpu-bound-tuned "${GPU_BOUND[@]}"
    unset TOY_BI_GEMM_TILES
    step throughput-small 120 throughput small standard,standard_gather,zero_mismatch
fi
say "done"
