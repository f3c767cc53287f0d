#!/usr/bin/env bash
# Sealed-set evaluation of an SFT checkpoint on the H200 (target cuda) + the generation-speed benchmark.
# Trains nothing. Writes $OUT/eval_sealed_cuda.tar.gz (attempts, per-prompt table, metrics, summary, report.md,
# Fig 3/4), $OUT/eval_sealed_cuda_summary.json, $OUT/eval_metrics.json and $OUT/generation_speed.json
# (commit them under results/eval-sealed-h200/).
#
# Prerequisites (see /work/shared/device/README.md; same machine session as scripts/gpu_sft.sh):
#   TVM staged + installed (`bash .devcarry/tvm-b/install.sh && source /opt/ld/env.sh`), the SFT checkpoint
#   of scripts/gpu_sft.sh on the machine (default /tmp/sft_gpu_1gpu/out: model/ + metrics.json), and carried:
#   artifacts/sealed (the split built with the CUDA harvest, i.e. the pipeline's split), artifacts/datasets/
#   validation.jsonl (benchmark prompts), data/harvest/<cuda key> (MetaSchedule baselines; optional: without it
#   the MetaSchedule baselines are skipped and said so).
#
# Usage: bash scripts/device/eval_sealed.sh [MODEL_DIR]
#   env: OUT (results folder), PYTHON (default python3), ATTEMPTS (k, default 8), MAX_PROMPTS (per task and
#        slice, default 10), MAX_NEW_TOKENS (the evaluation's default 0: the model's own
#        budget, saved by its SFT run, script_budget.py; the generation-speed bench's 1024), BATCH (sequences per generate call, default 256),
#        BENCH_PROMPTS (default 100), SKIP_BENCH=1, SEALED (default artifacts/sealed), HARVEST_ROOTS
#        (default data/harvest), TARGET (default cuda), RUN_DIR (scratch, default /tmp/eval_sealed),
#        ROWS (benchmark prompts, default artifacts/datasets/validation.jsonl), GEN_CACHE (generation engine,
#        default params.yaml's generation.cache_implementation), GEN_EXTRA (more --gen-set options, e.g.
#        "--gen-set constrained=true": the sealed A/B of issue 16).
# Expected: ~1 min generation + ~4-6 min evaluation of ~800 scripts (16 build workers) + ~1-2 min benchmark.
# CPU dry run (tiny model, llvm):
#   PYTHON=.venv/bin/python TARGET=llvm OUT=/tmp/o ATTEMPTS=2 MAX_PROMPTS=2 MAX_NEW_TOKENS=256 BATCH=16 \
#     BENCH_PROMPTS=4 HARVEST_ROOTS=artifacts/harvest bash scripts/device/eval_sealed.sh artifacts/sft
set -euo pipefail
MODEL=${1:-/tmp/sft_gpu_1gpu/out}
PY=${PYTHON:-python3}
OUT=${OUT:-results/eval-sealed-h200}
ATTEMPTS=${ATTEMPTS:-8}
MAX_PROMPTS=${MAX_PROMPTS:-10}
EVAL_MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-0}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
BATCH=${BATCH:-256}
BENCH_PROMPTS=${BENCH_PROMPTS:-100}
SEALED=${SEALED:-artifacts/sealed}
HARVEST_ROOTS=${HARVEST_ROOTS:-data/harvest}
TARGET=${TARGET:-cuda}
RUN_DIR=${RUN_DIR:-/tmp/eval_sealed}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 MLFLOW_ENABLE_TELEMETRY=false DO_NOT_TRACK=true DRAGON_NO_MLFLOW=1
mkdir -p "$RUN_DIR" "$OUT"
[ -e "$MODEL" ] || { echo "eval_sealed.sh: model $MODEL not found (the SFT run folder of scripts/gpu_sft.sh)" >&2; exit 2; }
[ -f "$SEALED/manifest.json" ] || { echo "eval_sealed.sh: $SEALED/manifest.json missing (carry artifacts/sealed)" >&2; exit 2; }
MS=true
ls "$HARVEST_ROOTS"/*/records.parquet >/dev/null 2>&1 || { echo "eval_sealed.sh: no harvest under $HARVEST_ROOTS: MetaSchedule baselines skipped" >&2; MS=false; }
CORES=$(nproc)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

t0=$(date +%s)
"$PY" -m little_dragon.cli eval run --model "$MODEL" --out "$RUN_DIR/eval" --name "eval-$TARGET" --target "$TARGET" \
  --metrics "$OUT/eval_metrics.json" \
  --set "sealed_dir=\"$SEALED\"" --set "harvest_roots=[\"$HARVEST_ROOTS\"]" --set attempts=$ATTEMPTS \
  --set max_prompts_per_task=$MAX_PROMPTS --set metaschedule_baseline=$MS --set "report_dir=\"$RUN_DIR/report\"" \
  --gen-set max_new_tokens=$EVAL_MAX_NEW_TOKENS --gen-set batch_size=$BATCH ${GEN_CACHE:+--gen-set cache_implementation=$GEN_CACHE} ${GEN_EXTRA:-} \
  2>&1 | tee "$RUN_DIR/eval.log" | grep -v " DEBUG " | tail -n 40
t1=$(date +%s)
cp "$RUN_DIR/eval/summary.json" "$OUT/eval_sealed_${TARGET}_summary.json"
cp "$RUN_DIR/eval.log" "$RUN_DIR/report/"
tar -czf "$OUT/eval_sealed_${TARGET}.tar.gz" -C "$RUN_DIR" eval report
echo "evaluation: $((t1 - t0)) s; outputs in $OUT"

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  ROWS=${ROWS:-artifacts/datasets/validation.jsonl}
  [ -f "$ROWS" ] || ROWS=artifacts/datasets/train.jsonl
  "$PY" benchmarks/generation_speed.py --model "$MODEL" --rows "$ROWS" --prompts "$BENCH_PROMPTS" \
    --attempts "$ATTEMPTS" --batch-sizes "$BATCH" $((BENCH_PROMPTS * ATTEMPTS)) --max-new-tokens "$MAX_NEW_TOKENS" \
    --json "$OUT/generation_speed.json"
fi
