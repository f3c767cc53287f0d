"""``dragon harvest``: real MetaSchedule tuning of the workload store, resumable."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser("harvest", help="tune workloads with MetaSchedule and keep every measured candidate")
    p.add_argument("--workloads", default="artifacts/workloads/workloads.parquet", help="workload store")
    p.add_argument("--out", help="output root (default: params harvest.out_dir)")
    p.add_argument("--target", help="override the target: JSON dict, 'llvm' or 'cuda'")
    p.add_argument("--trials", type=int, help="override trials_per_workload")
    p.add_argument("--max-workloads", type=int, help="override max_workloads")
    p.add_argument("--orchestrator", choices=["prefect", "local"], help="override the fan-out engine")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override any harvest field, e.g. --set builder_workers=16 (repeatable)")
    p.add_argument("--metrics", help="write summary metrics JSON here (DVC metrics)")
    p.add_argument("--plot", help="write a per-family speedup plot (PNG) here")
    p.set_defaults(func=main)


def main(args) -> int:
    import pandas as pd

    from little_dragon import atomic, tracking
    from little_dragon.cli import UserError
    from little_dragon.config import flat_params, load_section
    from little_dragon.harvest.run import run_harvest
    from little_dragon.harvest.summary import harvest_metrics, plot_speedups
    from little_dragon.tvmx import target as tgt

    overrides = {}
    if args.target:
        overrides["target"] = tgt.normalize(args.target)
    if args.trials is not None:
        overrides["trials_per_workload"] = args.trials
    if args.max_workloads is not None:
        overrides["max_workloads"] = args.max_workloads
    if args.orchestrator:
        overrides["orchestrator"] = args.orchestrator
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    cfg = load_section("harvest", overrides=overrides)
    timing = load_section("timing")
    wl_path = Path(args.workloads)
    if not wl_path.exists():
        raise FileNotFoundError(f"{wl_path}: workload store not found (run `dragon workloads` first)")
    workloads = pd.read_parquet(wl_path)
    out_root = Path(args.out or cfg.out_dir)
    with tracking.stage_run("harvest", params={**flat_params(cfg), **flat_params(timing, "timing.")},
                            inputs={"workloads": wl_path}, tags={"target": json.dumps(cfg.target)}) as mlf:
        res = run_harvest(cfg, timing, workloads, out_root)
        metrics = harvest_metrics(res.out_dir, workloads)
        summary = {k: v for k, v in metrics.items() if k != "families"}
        if mlf is not None:
            mlf.log_metrics({**summary, "tuned_now": res.tuned_now, "skipped": res.skipped})
            tracking.log_outputs(mlf, {"harvest": res.out_dir})
        if args.metrics:
            atomic.write_json(args.metrics, {"target_key": res.out_dir.name, **metrics})
        if args.plot:
            plot_speedups(res.out_dir, workloads, args.plot)
    log.info("harvest done: %s", json.dumps(dataclasses.asdict(res), default=str))
    print(json.dumps({"out_dir": str(res.out_dir), **summary}))
    return 0 if res.ok > 0 or not len(workloads) else 1
