#!/usr/bin/env bash
# Tokenizer A/B of SmolLM2-135M SFT on a 2-GPU machine: the same run twice at once, one per GPU, with
# SmolLM2's own tokenizer (GPU 0) and with codec words added (GPU 1, TAG=ext). Equal data, steps and seed,
# so the validity rates compare directly. Writes $OUT/sft_gpu_1gpu.json, sft_gpu_1gpu_ext.json and logs.
#
# Usage: GGUF=... TRAIN=... VAL=... OUT=... bash scripts/device/sft_ab.sh [extra --set KEY=VALUE ...]
#   RUN_LIMIT_S (default 540): each run is stopped after this many seconds so the logs still come back.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:?set OUT}
limit=${RUN_LIMIT_S:-540}
mkdir -p "$OUT"
CUDA_VISIBLE_DEVICES=0 RUN_DIR=/tmp/sft_plain timeout "$limit" bash "$here/scripts/gpu_sft.sh" 1 "$@" \
  > "$OUT/sft_plain.log" 2>&1 &
p0=$!
CUDA_VISIBLE_DEVICES=1 RUN_DIR=/tmp/sft_ext TAG=ext timeout "$limit" bash "$here/scripts/gpu_sft.sh" 1 "$@" \
  --set model.extend_tokenizer=true > "$OUT/sft_ext.log" 2>&1 &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
echo "plain rc=$rc0 ext rc=$rc1"
grep -h "^SFT " "$OUT/sft_plain.log" "$OUT/sft_ext.log"
exit $(( rc0 || rc1 ))
