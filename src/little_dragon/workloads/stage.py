"""The ``workloads`` pipeline stage: generate the workload store inside its MLflow run.

``dragon workloads`` (DVC) and the Prefect flow call this one function; it owns the stage's MLflow run
(the rule for every stage, docs/stages.md)."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd

from little_dragon.workloads.config import WorkloadsConfig


def workloads_stage(cfg: WorkloadsConfig, out_dir: str | Path | None = None) -> pd.DataFrame:
    """Write ``<out_dir>/workloads.parquet`` (+ summary) and return the store as a DataFrame.

    A bad profile or family name raises ``SpecError`` before an MLflow run is opened for it."""
    from little_dragon import tracking
    from little_dragon.config import flat_params
    from little_dragon.workloads.generate import PARQUET, SUMMARY, family_counts, generate_workloads
    from little_dragon.workloads.profiles import profile_specs

    profile_specs(dataclasses.replace(cfg, samples_per_family=0))  # validates names; cheap
    out = Path(out_dir or cfg.out_dir)
    with tracking.stage_run("workloads", params=flat_params(cfg, "workloads.")) as mlflow:
        t0 = time.perf_counter()
        df = generate_workloads(cfg, out)
        if mlflow is not None:
            mlflow.log_metrics({"workloads": len(df), "families": df["family"].nunique(),
                                "generate_s": time.perf_counter() - t0,
                                **{f"count.{k.replace(':', '.')}": v for k, v in family_counts(df).items()}})
            tracking.log_outputs(mlflow, {"workloads": out / PARQUET})
            mlflow.log_artifact(str(out / SUMMARY))
    return df
