"""``dragon harvest``: real MetaSchedule tuning of the workload store, resumable (``harvest_stage``)."""
from __future__ import annotations

import json


def add_parser(sub) -> None:
    from little_dragon.config import add_set_option

    p = sub.add_parser("harvest", help="tune workloads with MetaSchedule and keep every measured candidate")
    p.add_argument("--workloads", help="workload store (default: $DRAGON_WORKLOADS, else <params workloads.out_dir>/workloads.parquet)")
    p.add_argument("--out", help="output root (default: params harvest.out_dir)")
    p.add_argument("--target", help="replace the whole target: JSON dict, 'llvm' or 'cuda' "
                                    "(--set target.KEY=VALUE changes one field of it)")
    p.add_argument("--trials", type=int, help="override trials_per_workload")
    p.add_argument("--max-workloads", type=int, help="override max_workloads")
    p.add_argument("--orchestrator", choices=["prefect", "local"], help="override the fan-out engine")
    add_set_option(p, "harvest")
    p.add_argument("--metrics", help="write summary metrics JSON here (DVC metrics)")
    p.add_argument("--plot", help="write a per-family speedup plot (PNG) here")
    p.set_defaults(func=main)


def harvest_config(args):
    """The harvest section with this command line's overrides: the flags, then ``--set`` (deep-merged);
    ``--target`` replaces the whole target, and ``--set target.KEY=...`` still applies on top of it."""
    import dataclasses

    from little_dragon.config import deep_merge, load_section, parse_overrides
    from little_dragon.errors import UserError
    from little_dragon.tvmx import target as tgt

    flags = {k: v for k, v in (("trials_per_workload", args.trials), ("max_workloads", args.max_workloads),
                               ("orchestrator", args.orchestrator)) if v is not None}
    sets = parse_overrides(args.set)
    cfg = load_section("harvest", overrides=deep_merge(flags, sets))
    if args.target:
        try:
            target = tgt.normalize(args.target)
        except ValueError as e:
            raise UserError(f"--target {args.target!r}: {e}") from e
        cfg = dataclasses.replace(cfg, target=deep_merge(target, sets.get("target") or {}))
    return cfg


def main(args) -> int:
    from little_dragon.config import load_section
    from little_dragon.harvest.stage import harvest_stage
    from little_dragon.workloads.store import store_path

    cfg = harvest_config(args)
    workloads = args.workloads or store_path()
    res = harvest_stage(cfg, load_section("timing"), workloads, args.out, args.metrics, args.plot)
    print(json.dumps(res))
    return 0 if res["ok"] > 0 else 1
