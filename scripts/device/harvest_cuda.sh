#!/usr/bin/env bash
# On the lent H200 (device tool), after ../shared/device install (source /opt/ld/env.sh): harvest CUDA
# sm_90 traces for a workload file with the project's own `dragon harvest`, resumably, inside a time box,
# and send the harvest folder back through $OUT. Call again while the machine is warm to continue.
#   bash scripts/device/harvest_cuda.sh WORKLOADS.parquet SECONDS [--set key=value ...]
# env: HARVEST_ROOT (default /opt/ld/harvest), HARVEST_TAR (archive name under $OUT, default
# harvest-cuda.tar.xz). Two GPUs of one host: run two copies at once with CUDA_VISIBLE_DEVICES=0/1, their
# own HARVEST_ROOT/HARVEST_TAR and their own DRAGON_MEASURE_LOCK_DIR (the timing lock is per visible device).
set -uo pipefail
wl=$1; budget=$2; shift 2
source /opt/ld/env.sh
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" DRAGON_NO_MLFLOW=1 PYTHONUNBUFFERED=1
root=${HARVEST_ROOT:-/opt/ld/harvest}
mkdir -p "$root"
timeout --signal=KILL "$budget" python3 -m little_dragon.cli harvest --workloads "$wl" --out "$root" \
  --target cuda --orchestrator local --set builder_workers=16 "$@" 2>&1 | grep -v "^\s*$" | tail -n 60
echo "harvest exit: ${PIPESTATUS[0]}"
# consolidate whatever finished (a timed-out run left complete workloads + a discarded .staging)
python3 - "$root" "$wl" <<'PY'
import sys, json
from pathlib import Path
import pandas as pd
from little_dragon.harvest.run import consolidate
from little_dragon.harvest.summary import family_summary
root, wl = Path(sys.argv[1]), pd.read_parquet(sys.argv[2])
for out in sorted(p for p in root.iterdir() if p.is_dir()):
    print(out.name, consolidate(out, list(wl["workload_id"])))
    print(family_summary(out, wl).to_string())
PY
tar -C "$root" --exclude=.staging -cJf "$OUT/${HARVEST_TAR:-harvest-cuda.tar.xz}" .
ls -la "$OUT"
