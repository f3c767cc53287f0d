#!/usr/bin/env bash
# One H200 machine session, call by call (docs/gpu.md "Session 6"): SmolLM2-135M SFT on the CUDA split, the
# generation-speed benchmark, the CUDA sealed evaluation (issue 13) and the constrained A/B (issue 16).
# Every step runs from a `git archive` snapshot unpacked under /opt/ld/snap (so a half-edited work tree never
# reaches the device) and sends its results back through $OUT.
#
# Here, before the first call (scripts/device/h200_prepare.sh does all of it):
#   ../shared/device/pack-tvm --training --extra pebble==5.2.3 lark==1.3.1     # .devcarry/tvm-a, tvm-b
#   llguidance's abi3 wheel into .devcarry/tvm-b/extra; xgboost's wheel out (nothing tunes on the device);
#   the CUDA split (`dragon datasets build` on data/harvest alone) + the slim harvest, the snapshot and the
#   SmolLM2 GGUF in three parts: .devcarry/c1, c2, c3.
# Calls (each starts with `bash .devcarry/c<N>/h200_session.sh STEP` or the snapshot's copy of this script):
#   1 carry [.devcarry/tvm-a, .devcarry/c1]            stage     park TVM part 0 + GGUF part 1
#   2 carry [.devcarry/tvm-b, .devcarry/c2]            install   TVM + wheels, snapshot, data, GGUF part 2
#                                                      (TVM_B=.devcarry/tvm-b: without it, install takes the no-TVM branch)
#   3 carry [.devcarry/c3]                             sft bench GGUF part 3, SFT (writes /opt/ld/sft), speed
#   4 (nothing carried)                                eval      sealed CUDA evaluation  (bash /opt/ld/h200_session.sh eval;
#                                                                EVAL_NAME names its scratch folder, GEN_EXTRA adds --gen-set options)
#   5 (nothing carried)                                ab        constrained vs free A/B (bash /opt/ld/h200_session.sh ab)
# `tree` before a step runs that step on the work tree the call carried (e.g. `bash /opt/ld/h200_session.sh tree ab`).
# Generation only (no TVM): h200_prepare.sh --no-tvm builds c1 (GGUF part 1) and c2 (the rest, the training
# wheels in c2/wheels, snapshot, data); call 1 `stage`, call 2 `install sft bench` (BENCH_* pick the rows).
#
# Usage: bash h200_session.sh STEP [STEP ...]   (steps run in order; env OUT as the device tool sets it)
# CPU dry run of a step (tiny model, no TVM install): LD_ROOT=/tmp/ld PYTHON=.venv/bin/python ... (see the
# header of each script it calls).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${LD_ROOT:-/opt/ld}
SNAP=$ROOT/snap
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/ld_out}
SFT_DIR=$ROOT/sft
mkdir -p "$ROOT" "$OUT"
export HF_HUB_OFFLINE=1 MLFLOW_ENABLE_TELEMETRY=false DO_NOT_TRACK=true DRAGON_NO_MLFLOW=1
log() { echo "[$(date +%H:%M:%S)] $*"; }

# the CUDA split where the stage CLIs look for it, the slim harvest where the MetaSchedule baselines do
link_data() {
  mkdir -p "$1/artifacts" "$1/data"
  rm -rf "$1/artifacts/datasets" "$1/artifacts/sealed" "$1/data/harvest"
  ln -s "$ROOT/cudads/datasets" "$1/artifacts/datasets"
  ln -s "$ROOT/cudads/sealed" "$1/artifacts/sealed"
  ln -s "$ROOT/slim/data/harvest" "$1/data/harvest"
}

env_tvm() { [ -f "$ROOT/env.sh" ] && . "$ROOT/env.sh"; export PYTHONPATH="$SNAP/src${PYTHONPATH:+:$PYTHONPATH}"; }

step_stage() {
  mkdir -p "$ROOT/gguf"
  cp "$here"/gguf.part-* "$ROOT/gguf/"
  log "staged: $(ls "$ROOT/gguf")"
}

step_install() {
  mkdir -p "$ROOT/gguf" "$SNAP"
  cp "$here"/gguf.part-* "$ROOT/gguf/"
  tar -xJf "$here/snap.tar.xz" -C "$SNAP"
  cp "$here/h200_session.sh" "$ROOT/h200_session.sh"   # calls 4 and 5 carry nothing: bash /opt/ld/h200_session.sh STEP
  tar -xJf "$here/cudads.tar.xz" -C "$ROOT"
  link_data "$SNAP"
  if [ -n "${TVM_B:-}" ]; then
    # TVM's first part is parked by tvm-a/stage.sh (call 1 carried tvm-a, still on the machine): park it if call 1 did not
    if [ ! -f /opt/ld/stage/compiler.so.xz.part-00 ] && [ -f "$TVM_B/../tvm-a/stage.sh" ]; then bash "$TVM_B/../tvm-a/stage.sh"; fi
    bash "$TVM_B/install.sh"
    env_tvm
    "$PY" -c "import tvm, llguidance, trl, deepspeed; print('tvm', tvm.__version__, 'cuda', tvm.cuda(0).exist, \
'llguidance', llguidance.__version__, 'trl', trl.__version__)"
  else
    # SFT and generation need no TVM (nothing imports it before a script is checked): the training wheels alone
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$ROOT/site" "$here"/wheels/*.whl
    echo "export PYTHONPATH=$ROOT/site\${PYTHONPATH:+:\$PYTHONPATH}" > "$ROOT/env.sh"
    env_tvm
    "$PY" -c "import trl, deepspeed, gguf; print('trl', trl.__version__, 'deepspeed', deepspeed.__version__)"
  fi
  log "installed; snapshot $(cat "$SNAP/COMMIT" 2>/dev/null || echo '?')"
}

gguf_path() {
  local g=$ROOT/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -f "$g" ]; then
    cat "$ROOT"/gguf/gguf.part-* > "$g.tmp"
    # set -e does not reach into the caller's $(gguf_path): a failed check must stop here itself, or a GGUF missing a
    # part is kept under its final name and every later sft call reads it (session 20: "not a GGUF file")
    if ! echo "$(cat "$here/gguf.sha256" 2>/dev/null || cat "$ROOT/gguf/gguf.sha256")  $g.tmp" | sha256sum -c - >&2; then
      rm -f "$g.tmp"
      echo "gguf: the parts in $ROOT/gguf ($(ls "$ROOT"/gguf | tr '\n' ' ')) do not make the GGUF: stage, install and sft each carry one part" >&2
      return 1
    fi
    mv "$g.tmp" "$g"
  fi
  echo "$g"
}

step_sft() {
  [ -f "$here/gguf.sha256" ] && cp "$here/gguf.sha256" "$ROOT/gguf/"
  [ -d "$here" ] && cp "$here"/gguf.part-* "$ROOT/gguf/" 2>/dev/null || true
  local g; g=$(gguf_path) || exit 1
  env_tvm; cd "$SNAP"
  # no validity passes inside SFT (the sealed evaluation measures correctness right after), more steps instead
  GGUF=$g OUT="$OUT" RUN_DIR=$SFT_DIR timeout "${SFT_BOX:-420}" bash scripts/gpu_sft.sh 1 \
    --set max_steps="${SFT_STEPS:-250}" --set validity_samples=0 --set final_validity_samples=0 \
    --set final_greedy_validity=false --set eval_steps=100000 ${SFT_EXTRA:-}
  ls "$SFT_DIR/out/model/config.json" >/dev/null
  log "sft done: $SFT_DIR/out"
}

step_bench() {
  env_tvm; cd "$SNAP"
  timeout "${BENCH_BOX:-200}" "$PY" benchmarks/generation_speed.py --model "$SFT_DIR/out" \
    --rows artifacts/datasets/train.jsonl --prompts "${BENCH_PROMPTS:-100}" --attempts "${BENCH_ATTEMPTS:-8}" --batch-sizes ${BENCH_BATCHES:-800 400} \
    --caches ${BENCH_CACHES:-shared_prefix static} --max-new-tokens "${BENCH_TOKENS:-1024}" --json "$OUT/${BENCH_NAME:-generation_speed_h200}.json" \
    || log "bench: stopped (rows measured so far are in $OUT/generation_speed_h200.json)"
}

step_eval() {
  env_tvm; cd "$SNAP"
  OUT="$OUT" ATTEMPTS="${ATTEMPTS:-8}" MAX_PROMPTS="${MAX_PROMPTS:-8}" BATCH="${BATCH:-512}" SKIP_BENCH=1 \
    RUN_DIR=$ROOT/${EVAL_NAME:-eval_sealed} timeout "${EVAL_BOX:-540}" bash scripts/device/eval_sealed.sh "$SFT_DIR/out"
}

step_ab() {
  env_tvm; cd "$SNAP"
  OUT="$OUT" PROMPTS="${AB_PROMPTS:-8}" K="${AB_K:-4}" ARMS="${AB_ARMS:-free constrained}" REPEAT="${AB_REPEAT:-1}" \
    WARMUP="${AB_WARMUP:-0}" SCORE="${AB_SCORE:-1}" \
    timeout "${AB_BOX:-540}" bash scripts/device/constrained_ab.sh "$SFT_DIR/out" \
    || log "ab: stopped (arms measured so far are in $OUT)"
}

step_tree() {
  # the steps after it run the code of the work tree this call carried (committed or not) instead of the
  # snapshot: a fix made after the snapshot was built reaches the device without a new carry
  [ -d src/little_dragon ] || { echo "tree: run from the work tree's root" >&2; exit 2; }
  rm -rf "$ROOT/tree" && mkdir -p "$ROOT/tree"
  cp -r src scripts benchmarks configs params.yaml pyproject.toml "$ROOT/tree/"
  git rev-parse --short HEAD > "$ROOT/tree/COMMIT" 2>/dev/null || echo tree > "$ROOT/tree/COMMIT"
  link_data "$ROOT/tree"
  SNAP=$ROOT/tree
  log "code: the carried work tree ($(cat "$SNAP/COMMIT") + uncommitted changes)"
}

[ $# -gt 0 ] || { echo "usage: h200_session.sh STEP [STEP ...] (stage install tree sft bench eval ab)" >&2; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
for s in "$@"; do
  t0=$(date +%s); log "step $s"
  "step_$s"
  log "step $s: $(( $(date +%s) - t0 )) s"
done
