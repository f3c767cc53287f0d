#!/usr/bin/env bash
# Issue 11 evidence on the H200: the evaluator against MetaSchedule on EVERY measured-valid record of the
# CUDA harvests in data/ (dragon agreement). The `post *` form (what the model writes) is fully evaluated:
# decode, apply, post-process, build, check against float64, time with the one protocol, compare with the
# harvest's latency. The self-contained form (post-processing written out) is checked up to code generation
# when FULL_BUDGET_S > 0 (the CPU does that part as well: `dragon agreement ... --form full`).
#
# The run is time-boxed and resumable: judged records go to $RUN_DIR/agreement-post/records.jsonl on the
# machine's disk, so a second call on the same warm machine continues where the first stopped. Every call
# copies the report, the per-record journal and the log into $OUT.
#
# Prerequisites: the TVM carries (docs/gpu.md), a snapshot of the code (SNAP, default .devcarry/snap: `git
# archive HEAD src params.yaml | tar -x -C .devcarry/snap`) and the slim harvests (AGREE, default
# .devcarry/agree: meta.json, records/workloads/baselines/status parquets of data/harvest and data/harvest-t64).
# Usage: bash scripts/device/agreement_cuda.sh [POST_BUDGET_S] [FULL_BUDGET_S]
set -uo pipefail
SNAP=${SNAP:-.devcarry/snap}; AGREE=${AGREE:-.devcarry/agree}; OUT=${OUT:-/tmp/agreement-out}
RUN_DIR=${RUN_DIR:-/tmp/agreement}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/$SNAP/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DRAGON_NO_MLFLOW=1
export DRAGON_PARAMS="$PWD/$SNAP/params.yaml"
mkdir -p "$OUT" "$RUN_DIR"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader 2>/dev/null || true
t0=$(date +%s)
timeout -k 10 "${1:-400}" "$PY" -m little_dragon.evaluator.agreement "$AGREE"/harvest "$AGREE"/harvest-t64 \
  --form post --pool-size "${POOL:-16}" --out "$RUN_DIR/agreement-post" 2>&1 \
  | tee -a "$RUN_DIR/agreement-post.log" | grep -v " DEBUG " | tail -30
echo "post form: rc=${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
if [ "${2:-0}" -gt 0 ]; then
  t1=$(date +%s)
  timeout -k 10 "$2" "$PY" -m little_dragon.evaluator.agreement "$AGREE"/harvest "$AGREE"/harvest-t64 \
    --form full --stop-after build --pool-size "${POOL:-16}" --out "$RUN_DIR/agreement-full" 2>&1 \
    | tee -a "$RUN_DIR/agreement-full.log" | tail -20
  echo "full form: rc=${PIPESTATUS[0]} in $(( $(date +%s) - t1 )) s"
fi
[ "$RUN_DIR" -ef "$OUT" ] || cp -r "$RUN_DIR"/. "$OUT"/
