#!/usr/bin/env bash
# Constrained vs free decoding at equal attempts on the H200 (issue 16): SmolLM2 SFT checkpoint, CUDA
# validation prompts, correctness and speedup through the CUDA Evaluator. Writes $OUT/constrained_ab_<target>.json
# and $OUT/constrained_ab_<target>.log (commit them under results/constrained-decoding/).
#
# Prerequisites (/work/shared/device/README.md, same machine session as the SFT run):
#   TVM staged + installed (`bash .devcarry/tvm-b/install.sh && source /opt/ld/env.sh`);
#   llguidance importable: either packed with the TVM carries (`../shared/device/pack-tvm --training --extra
#   llguidance==1.9.1 ...`) or its abi3 wheel carried anywhere and named by LLG_WHEEL (pure download:
#   `pip download --no-deps llguidance==1.9.1 -d .devcarry/llguidance`, 3 MB; the cp39-abi3 manylinux_2_31 wheel
#   installs on the device's Python 3.12);
#   the SFT checkpoint folder (model/ inside, or the model folder itself) and artifacts/datasets/validation.jsonl
#   built with the CUDA harvest (the pipeline's split) carried.
#
# Usage: bash scripts/device/constrained_ab.sh MODEL_DIR
#   env: OUT (results folder), PYTHON (default python3), PROMPTS (default 32), K (attempts per prompt, 4),
#        MAX_NEW_TOKENS (1024), BATCH (sequences per generate call, 64), TEMPERATURE (0.7), RESAMPLES (2),
#        ROWS (default artifacts/datasets/validation.jsonl), TARGET_FILTER (cuda: only rows of that target kind),
#        ARMS (default "free syntax constrained"), EVALUATE (1), REPEAT (timed runs of each arm, round robin: 1),
#        WARMUP (untimed rounds of every arm first: 0), EVALUATE_FROM (score the scripts of an earlier run's JSON
#        instead of sampling: generation in one device call, its evaluation in the next; writes *_scored.*),
#        SCORE (0: timing only, no decode/apply scoring of the scripts: ~2 min an arm saved on the device).
#   The JSON is written before the scoring (the timing and the scripts) and after each arm's scoring.
# Expected on one H200 (estimate, not measured there): ~1 min setup (model, tensor intrinsics, the prompts'
# workloads), ~1 min per free/syntax arm and ~2-3 min for the constrained arm (two generate calls of <= 1024
# steps at batch 64, per-line TVM work ~5 ms a line, compiles overlapped), ~3-4 min evaluation: ~9-10 min
# for the three default arms, at the device's 10-minute limit per call. Within one call: ARMS="free constrained"
# (~7-8 min) or PROMPTS=16 (one generate call per arm, ~5-6 min). The log is written to $OUT as it goes.
# CPU dry run (tiny model, llvm rows):
#   PYTHON=.venv/bin/python OUT=/tmp/o PROMPTS=2 K=2 MAX_NEW_TOKENS=128 BATCH=4 TARGET_FILTER=llvm \
#     bash scripts/device/constrained_ab.sh artifacts/sft
set -euo pipefail
MODEL=${1:?usage: constrained_ab.sh MODEL_DIR}
PY=${PYTHON:-python3}
OUT=${OUT:-results/constrained-decoding}
PROMPTS=${PROMPTS:-32}
K=${K:-4}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
BATCH=${BATCH:-64}
TEMPERATURE=${TEMPERATURE:-0.7}
RESAMPLES=${RESAMPLES:-2}
ROWS=${ROWS:-artifacts/datasets/validation.jsonl}
TARGET_FILTER=${TARGET_FILTER:-cuda}
ARMS=${ARMS:-free syntax constrained}
EVALUATE=${EVALUATE:-1}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 MLFLOW_ENABLE_TELEMETRY=false DO_NOT_TRACK=true DRAGON_NO_MLFLOW=1
mkdir -p "$OUT"
[ -d "$MODEL/model" ] && MODEL="$MODEL/model"
[ -f "$MODEL/config.json" ] || { echo "constrained_ab.sh: $MODEL has no config.json (an HF model folder)" >&2; exit 2; }
[ -f "$ROWS" ] || { echo "constrained_ab.sh: $ROWS missing (carry artifacts/datasets/validation.jsonl)" >&2; exit 2; }
if ! "$PY" -c "import llguidance" 2>/dev/null; then
  WHEEL=${LLG_WHEEL:-$(ls .devcarry/llguidance/llguidance-*.whl 2>/dev/null | head -1)}
  [ -n "$WHEEL" ] && [ -f "$WHEEL" ] || { echo "constrained_ab.sh: llguidance not installed and no wheel (LLG_WHEEL)" >&2; exit 2; }
  "$PY" -m pip install -q --no-deps --no-index "$WHEEL"
fi
TARGET_KEY=$TARGET_FILTER
RUN_ROWS=$(mktemp /tmp/constrained_rows.XXXX.jsonl)
"$PY" - "$ROWS" "$TARGET_FILTER" "$RUN_ROWS" <<'EOF'
import json, sys
src, kind, dst = sys.argv[1:]
n = 0
with open(src) as f, open(dst, "w") as g:
    for line in f:
        r = json.loads(line)
        t = r.get("target")
        t = json.loads(t) if isinstance(t, str) else (t or {})
        if not kind or t.get("kind") == kind:
            g.write(line); n += 1
print(f"{n} rows of target {kind or 'any'}")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
EVAL_FLAG=""; [ "$EVALUATE" = 1 ] && EVAL_FLAG="--evaluate"
[ "${SCORE:-1}" = 0 ] && EVAL_FLAG="$EVAL_FLAG --no-score"
NAME=constrained_ab_${TARGET_KEY}
if [ -n "${EVALUATE_FROM:-}" ]; then EVAL_FLAG="$EVAL_FLAG --evaluate-from $EVALUATE_FROM"; NAME=${NAME}_scored; fi
t0=$(date +%s)
# shellcheck disable=SC2086
"$PY" benchmarks/constrained_bench.py --ab --model "$MODEL" --rows "$RUN_ROWS" --prompts "$PROMPTS" --k "$K" \
  --max-new-tokens "$MAX_NEW_TOKENS" --batch-size "$BATCH" --temperature "$TEMPERATURE" --max-resamples "$RESAMPLES" \
  --arms $ARMS --repeat "${REPEAT:-1}" --warmup "${WARMUP:-0}" $EVAL_FLAG --out "$OUT/$NAME.json" 2>&1 | tee "$OUT/$NAME.log" \
  | grep -v " DEBUG " | tail -n 30
echo "constrained_ab: $(( $(date +%s) - t0 )) s; outputs in $OUT"
