"""``dragon workloads``: generate the workload store and log the run to MLflow."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("workloads", help="generate distinct tensor workloads (TVMScript) into a parquet store")
    p.add_argument("--out", default="artifacts/workloads", help="output folder (default: artifacts/workloads)")
    p.add_argument("--profile", help="override workloads.profile (default, models, large)")
    p.add_argument("--list", action="store_true", help="list families and profiles, then exit")
    p.set_defaults(func=main)


def main(args) -> int:
    from little_dragon.config import flat_params, load_section
    from little_dragon.workloads.config import WorkloadsConfig

    if args.list:
        from little_dragon.workloads.families import FAMILIES
        from little_dragon.workloads.graph import GRAPH_MODELS
        from little_dragon.workloads.profiles import PROFILES

        for f in FAMILIES.values():
            print(f"{f.name:18s} {','.join(f.dtypes):22s} {' '.join(f.params):34s} {f.doc.splitlines()[0]}")
        print("profiles:", ", ".join(PROFILES), "| graph models:", ", ".join(GRAPH_MODELS))
        return 0
    cfg = load_section("workloads", WorkloadsConfig)
    if args.profile:
        cfg = dataclasses.replace(cfg, profile=args.profile)

    from little_dragon import tracking
    from little_dragon.cli import UserError
    from little_dragon.config import params_path
    from little_dragon.workloads.families import SpecError
    from little_dragon.workloads.generate import PARQUET, SUMMARY, family_counts, generate_workloads
    from little_dragon.workloads.profiles import profile_specs

    try:  # reject a bad profile/family name before an MLflow run is opened for it
        profile_specs(dataclasses.replace(cfg, samples_per_family=0))
    except SpecError as e:
        raise UserError(f"{params_path()}: {e}") from e
    out = Path(args.out)
    with tracking.stage_run("workloads", params=flat_params(cfg, "workloads.")) as mlflow:
        t0 = time.perf_counter()
        df = generate_workloads(cfg, out)
        if mlflow is not None:
            mlflow.log_metrics({"workloads": len(df), "families": df["family"].nunique(),
                                "generate_s": time.perf_counter() - t0,
                                **{f"count.{k.replace(':', '.')}": v for k, v in family_counts(df).items()}})
            tracking.log_outputs(mlflow, {"workloads": out / PARQUET})
            mlflow.log_artifact(str(out / SUMMARY))
    print(f"{len(df)} workloads -> {out / PARQUET}")
    return 0
