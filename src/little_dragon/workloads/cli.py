"""``dragon workloads``: generate the workload store (the ``workloads`` stage, ``workloads_stage``)."""
from __future__ import annotations


def add_parser(sub) -> None:
    from little_dragon.config import add_set_option

    p = sub.add_parser("workloads", help="generate distinct tensor workloads (TVMScript) into a parquet store")
    p.add_argument("--out", help="output folder (default: params workloads.out_dir)")
    p.add_argument("--profile", help="override workloads.profile (default, models, large)")
    p.add_argument("--list", action="store_true", help="list families and profiles, then exit")
    add_set_option(p, "workloads")
    p.set_defaults(func=main)


def main(args) -> int:
    from little_dragon.config import deep_merge, load_section, params_path, parse_overrides
    from little_dragon.errors import UserError

    if args.list:
        from little_dragon.workloads.families import FAMILIES
        from little_dragon.workloads.graph import GRAPH_MODELS
        from little_dragon.workloads.profiles import PROFILES

        for f in FAMILIES.values():
            print(f"{f.name:18s} {','.join(f.dtypes):22s} {' '.join(f.params):34s} {f.doc.splitlines()[0]}")
        print("profiles:", ", ".join(PROFILES), "| graph models:", ", ".join(GRAPH_MODELS))
        return 0
    flags = {"profile": args.profile} if args.profile else {}
    cfg = load_section("workloads", overrides=deep_merge(flags, parse_overrides(args.set)))

    from little_dragon.workloads.families import SpecError
    from little_dragon.workloads.store import STORE_FILE
    from little_dragon.workloads.stage import workloads_stage

    try:
        df = workloads_stage(cfg, args.out)
    except SpecError as e:
        raise UserError(f"{params_path()}: {e}") from e
    print(f"{len(df)} workloads -> {(args.out or cfg.out_dir)}/{STORE_FILE}")
    return 0

