"""``dragon harvest``: real MetaSchedule tuning of the workload store, resumable."""
from __future__ import annotations

import json


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
    from little_dragon.cli import parse_overrides
    from little_dragon.harvest.stage import harvest_stage
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
    overrides.update(parse_overrides(args.set))
    res = harvest_stage(args.workloads, args.out, overrides, args.metrics, args.plot)
    print(json.dumps(res))
    return 0 if res["ok"] > 0 else 1
