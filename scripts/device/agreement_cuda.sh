#!/usr/bin/env bash
# Issue 11 evidence on the H200: the evaluator against MetaSchedule on EVERY measured-valid record of the
# CUDA harvests in data/ (dragon agreement). The `post *` form (what the model writes) is fully evaluated:
# decode, apply, post-process, build, check against float64, time with the one protocol, compare with the
# harvest's latency. The self-contained form (post-processing written out) is then checked up to code
# generation. Writes $OUT/agreement-{post,full}/agreement.{json,md} and the logs.
#
# Prerequisites: the TVM carries (docs/gpu.md), a snapshot of the code (SNAP, default .devcarry/snap: `git
# archive HEAD src params.yaml | tar -x -C .devcarry/snap`) and the slim harvests (AGREE, default
# .devcarry/agree: meta.json, records.parquet, workloads.parquet of data/harvest and data/harvest-t64).
# Usage: bash scripts/device/agreement_cuda.sh [POST_BUDGET_S] [FULL_BUDGET_S]
set -uo pipefail
SNAP=${SNAP:-.devcarry/snap}; AGREE=${AGREE:-.devcarry/agree}; OUT=${OUT:-/tmp/agreement-out}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/$SNAP/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DRAGON_NO_MLFLOW=1
export DRAGON_PARAMS="$PWD/$SNAP/params.yaml"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader 2>/dev/null || true
t0=$(date +%s)
timeout "${1:-400}" "$PY" -m little_dragon.evaluator.agreement "$AGREE"/harvest "$AGREE"/harvest-t64 \
  --form post --pool-size "${POOL:-16}" --out "$OUT/agreement-post" 2>&1 | tee "$OUT/agreement-post.log" | tail -40
echo "post form: rc=${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
timeout "${2:-150}" "$PY" -m little_dragon.evaluator.agreement "$AGREE"/harvest "$AGREE"/harvest-t64 \
  --form full --stop-after build --pool-size "${POOL:-16}" --out "$OUT/agreement-full" 2>&1 \
  | tee "$OUT/agreement-full.log" | tail -20
echo "full form: rc=${PIPESTATUS[0]} in $(( $(date +%s) - t1 )) s"
