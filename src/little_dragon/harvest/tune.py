"""One workload's tuning run, executed inside a sandbox worker process (see ``sandbox.py``).

Runs MetaSchedule ``tune_tir`` with the project's fast build function and timing protocol, records every
measured candidate (trial order, trace, run_secs, build/run error) through a measure callback, keeps the
standard JSON database, and measures the workload's baseline under the same protocol.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any


def _candidate_recorder(path: Path):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.codec.canonical import canonical_json, dumps

    @derived_object
    class RecordCandidates(ms.measure_callback.PyMeasureCallback):
        """Appends one JSON line per measured candidate, in measurement order."""

        def __init__(self) -> None:
            self.trial = 0

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            rows = []
            for cand, b, r in zip(measure_candidates, builder_results, runner_results):
                run_secs = [float(s.value if hasattr(s, "value") else s) for s in (r.run_secs or [])]
                error = b.error_msg or r.error_msg or ""
                ok = not error and bool(run_secs) and all(math.isfinite(s) and 0 < s < 1e9 for s in run_secs)
                rows.append({
                    "trial": self.trial,
                    # exactly the MetaSchedule database's JSON form (bool IntImms stay true, plain
                    # bools become 0/1), so records compare equal to database records and codec output
                    "trace_json": dumps(canonical_json(cand.sch.trace.as_json(remove_postproc=False))),
                    "run_secs": run_secs if ok else [],
                    "latency_us": statistics.median(run_secs) * 1e6 if ok else float("nan"),
                    "valid": ok,
                    "error": "" if ok else (str(error)[-4000:] or "no run_secs"),
                })
                self.trial += 1
            with open(path, "a") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)

    return RecordCandidates()


def tune_workload(workload_id: str, tvmscript: str, target: dict[str, Any], harvest: dict[str, Any],
                  timing: dict[str, Any], seed: int, stage_dir: str) -> dict[str, Any]:
    """Tune one workload into ``stage_dir/db`` (database files + candidates.jsonl + result.json).

    Returns the result summary. Raises on failure; the caller records the error."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.tvmx.baseline import measure_baseline
    from little_dragon.harvest.config import HarvestConfig
    from little_dragon.tvmx.build import local_builder
    from little_dragon.tvmx.timing import TimingConfig, local_runner
    from little_dragon.workloads.store import module_from_script

    t0 = time.perf_counter()
    hcfg = HarvestConfig(**harvest)
    tcfg = TimingConfig(**timing)
    stage = Path(stage_dir)
    if stage.exists():
        shutil.rmtree(stage)
    db_dir, work_dir = stage / "db", stage / "work"
    db_dir.mkdir(parents=True)
    work_dir.mkdir()
    _maybe_planted_fault(workload_id)

    mod = module_from_script(tvmscript)
    tgt = tvm.target.Target(target)
    database = ms.database.JSONDatabase(work_dir=str(db_dir))
    callbacks = list(ms.measure_callback.MeasureCallback.create("default"))
    callbacks.append(_candidate_recorder(db_dir / "candidates.jsonl"))
    ms.tune_tir(
        mod, tgt, str(work_dir),
        max_trials_global=hcfg.trials_per_workload,
        num_trials_per_iter=min(hcfg.trials_per_iter, hcfg.trials_per_workload),
        builder=local_builder(hcfg.builder_workers, hcfg.build_timeout_sec),
        runner=local_runner(tcfg),
        database=database,
        cost_model=hcfg.cost_model,
        measure_callbacks=callbacks,
        strategy=hcfg.strategy,
        num_tuning_cores=hcfg.builder_workers,
        seed=seed,
    )
    tune_s = time.perf_counter() - t0
    baseline, baseline_kind = measure_baseline(mod, target, tcfg)
    cand_path = db_dir / "candidates.jsonl"
    if not cand_path.is_file():  # seen on CUDA: every sampled schedule failed post-processing
        raise RuntimeError(f"workload {workload_id}: MetaSchedule measured no candidate in "
                           f"{hcfg.trials_per_workload} trials (no sampled schedule passed post-processing)")
    cands = [json.loads(line) for line in cand_path.read_text().splitlines() if line]
    valid = [c["latency_us"] for c in cands if c["valid"]]
    result = {
        "workload_id": workload_id,
        "status": "ok",
        "trials": len(cands),
        "valid_trials": len(valid),
        "best_us": min(valid) if valid else float("nan"),
        "baseline_us": baseline.median_us,
        "baseline_spread": baseline.spread,
        "baseline_kind": baseline_kind,
        "tune_s": tune_s,
        "wall_s": time.perf_counter() - t0,
        "seed": seed,
    }
    (db_dir / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(work_dir, ignore_errors=True)
    return result


def _maybe_planted_fault(workload_id: str) -> None:
    """Test hook: ``DRAGON_HARVEST_FAULTS='wid:crash,wid2:hang'`` makes this worker crash or hang on those
    workloads, so the tests can prove the harvest survives both (the containment is what is tested)."""
    spec = os.environ.get("DRAGON_HARVEST_FAULTS", "")
    faults = dict(item.split(":", 1) for item in spec.split(",") if ":" in item)
    action = faults.get(workload_id)
    if action == "crash":
        os.abort()
    elif action == "hang":
        while True:
            time.sleep(3600)
    elif action == "raise":
        raise RuntimeError(f"planted failure for {workload_id}")
