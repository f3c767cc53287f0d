"""One-off migration of harvests written with record format 1 (trace_json from a plain-JSON conversion of
the live trace, bool IntImms as 1) to format 2 (the database's canonical JSON form, which the codec and the
datasets stage compare against).

Each candidate's trace is taken from the MetaSchedule database of the same run: the database commits the
candidates in measurement order, and the run_secs of every record are checked against the candidate's before
anything is replaced (any mismatch aborts that harvest). Then the tables are consolidated again and meta.json
gets the format-2 fingerprint, so a resumed harvest continues these folders.

    python scripts/migrate_harvest_records.py data/harvest/cuda-sm_90-6e5dd8 [...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from little_dragon import atomic
from little_dragon.codec.canonical import dumps
from little_dragon.harvest.config import HarvestConfig
from little_dragon.harvest.run import RECORD_FORMAT, config_fingerprint, consolidate
from little_dragon.tvmx.timing import TimingConfig


def _same_secs(db_secs, cand) -> bool:
    if not cand["valid"]:
        return not cand["run_secs"] and (db_secs is None or min(db_secs) >= 1e9)
    return db_secs is not None and len(db_secs) == len(cand["run_secs"]) and all(
        abs(a - b) <= 1e-12 * max(1.0, abs(b)) for a, b in zip(db_secs, cand["run_secs"]))


def migrate(harvest: Path) -> int:
    meta = json.loads((harvest / "meta.json").read_text())
    changed = 0
    plans = []
    for d in sorted(p for p in (harvest / "db").iterdir() if (p / "result.json").exists()):
        db = [json.loads(x) for x in (d / "database_tuning_record.json").read_text().splitlines() if x.strip()]
        cands = [json.loads(x) for x in (d / "candidates.jsonl").read_text().splitlines() if x.strip()]
        if len(db) != len(cands):
            raise SystemExit(f"{d}: {len(db)} database records vs {len(cands)} candidates: not migrating")
        for i, (rec, cand) in enumerate(zip(db, cands)):
            if not _same_secs(rec[1][1], cand):
                raise SystemExit(f"{d}: record {i} run_secs {rec[1][1]} != candidate {cand['run_secs']}")
            new = dumps(rec[1][0])
            changed += new != cand["trace_json"]
            cand["trace_json"] = new
        plans.append((d, cands))
    for d, cands in plans:  # all checked: now write
        atomic.write_text(d / "candidates.jsonl", "".join(json.dumps(c) + "\n" for c in cands))
    wl = pd.read_parquet(harvest / "workloads.parquet")
    counts = consolidate(harvest, list(wl["workload_id"]))
    meta["fingerprint"] = config_fingerprint(HarvestConfig(**meta["harvest"]), TimingConfig(**meta["timing"]))
    meta["record_format"] = RECORD_FORMAT
    atomic.write_json(harvest / "meta.json", meta)
    print(f"{harvest}: {changed} traces rewritten; {counts}")
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        migrate(Path(p))
