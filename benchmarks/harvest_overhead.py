"""Harvest overhead against raw ``tune_tir``: the same workloads, trials, seeds and builder/runner, side by
side in one run (alternating order so neither side always runs on a warmer machine).

    python benchmarks/harvest_overhead.py --workloads artifacts/workloads/workloads.parquet -n 4 --trials 16

Prints a table: wall seconds of raw tune_tir (one fresh process doing every workload, as a user would),
of `run_harvest` (sandbox worker, candidate recording, resumable bookkeeping, baseline measurement,
consolidation), the harvest without its baseline measurement (extra work raw tune_tir does not do), and
the ratios. Target: harvest / raw <= 1.05.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAW = r"""
import json, sys, time, tempfile
t0 = time.perf_counter()
import tvm
from tvm.s_tir import meta_schedule as ms
from little_dragon.tvmx.build import local_builder
from little_dragon.tvmx.timing import TimingConfig
from little_dragon.workloads.store import module_from_script
job = json.load(open(sys.argv[1]))
tcfg = TimingConfig(**job["timing"])
h = job["harvest"]
for i, w in enumerate(job["workloads"]):
    with tempfile.TemporaryDirectory() as d:
        ms.tune_tir(module_from_script(w["tvmscript"]), tvm.target.Target(h["target"]), d,
                    max_trials_global=h["trials_per_workload"],
                    num_trials_per_iter=min(h["trials_per_iter"], h["trials_per_workload"]),
                    builder=local_builder(h["builder_workers"], h["build_timeout_sec"]),
                    runner=ms.runner.LocalRunner(timeout_sec=tcfg.timeout_sec,
                                                 evaluator_config=tcfg.evaluator_config()),
                    cost_model=h["cost_model"], strategy=h["strategy"],
                    num_tuning_cores=h["builder_workers"], seed=h["seed"] + i)
print(json.dumps({"wall_s": time.perf_counter() - t0}))
"""


def run_raw(job_path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", RAW, str(job_path)], check=True, capture_output=True)
    return time.perf_counter() - t0


def run_ours(cfg, timing, wl, orchestrator: str) -> tuple[float, float]:
    from little_dragon.harvest.run import run_harvest

    cfg = dataclasses.replace(cfg, orchestrator=orchestrator)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = run_harvest(cfg, timing, wl, d)
        wall = time.perf_counter() - t0
        tune_only = 0.0
        for p in (res.out_dir / "db").iterdir():
            r = json.loads((p / "result.json").read_text())
            tune_only += r["wall_s"] - r["tune_s"]  # time spent measuring the baseline
    return wall, wall - tune_only


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from little_dragon.config import load_section

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="artifacts/workloads/workloads.parquet")
    ap.add_argument("-n", type=int, default=4, help="workloads")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--orchestrator", default="local", choices=["local", "prefect"])
    args = ap.parse_args(argv)
    cfg = dataclasses.replace(load_section("harvest"), trials_per_workload=args.trials, max_workloads=args.n,
                              cost_model="xgb")
    timing = load_section("timing")
    wl = pd.read_parquet(args.workloads).head(args.n)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"harvest": dataclasses.asdict(cfg), "timing": dataclasses.asdict(timing),
                   "workloads": wl[["workload_id", "tvmscript"]].to_dict("records")}, f)
        job = Path(f.name)
    rows = []
    for r in range(args.rounds):
        order = ["raw", "ours"] if r % 2 == 0 else ["ours", "raw"]
        res = {}
        for side in order:
            if side == "raw":
                res["raw"] = run_raw(job)
            else:
                res["ours"], res["ours_no_baseline"] = run_ours(cfg, timing, wl, args.orchestrator)
        rows.append(res)
    print(f"\nharvest overhead: {args.n} workloads x {args.trials} trials, target {json.dumps(cfg.target)}, "
          f"orchestrator {args.orchestrator}")
    print(f"{'round':>5} {'raw tune_tir s':>15} {'harvest s':>10} {'harvest-baseline s':>19} "
          f"{'ratio':>6} {'ratio w/o baseline':>19}")
    for i, r in enumerate(rows):
        print(f"{i:>5} {r['raw']:>15.1f} {r['ours']:>10.1f} {r['ours_no_baseline']:>19.1f} "
              f"{r['ours'] / r['raw']:>6.3f} {r['ours_no_baseline'] / r['raw']:>19.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
