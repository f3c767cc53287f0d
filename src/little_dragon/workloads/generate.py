"""The ``workloads`` stage: profile specs + model-graph tasks -> one table of distinct, canonical workloads.

Each workload is built, printed as TVMScript and parsed back; the parsed module is what gets hashed, so
``module_from_script(row.tvmscript)`` always re-hashes to ``row.structural_hash``.  Rows are deduplicated by
structural hash (first one wins, in the profile's deterministic order: curated, model shapes, sampled,
then graph tasks).  FLOPs: analytic per family for synthetic kernels (``families.py``), TIR walk
(``estimate_tir_flops``) for graph tasks; bytes: every argument buffer once.
"""
from __future__ import annotations

import collections
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable

from little_dragon import atomic
from little_dragon.workloads.config import WorkloadsConfig
from little_dragon.workloads.families import SpecError
from little_dragon.workloads.profiles import profile_specs, resolve
from little_dragon.workloads.spec import WorkloadSpec, build_module
from little_dragon.workloads.store import COLUMNS, STORE_FILE, WorkloadError, describe_module, module_from_script

log = logging.getLogger(__name__)

PARQUET = STORE_FILE
SUMMARY = "summary.json"


def canonical_row(mod: Any, **meta: Any) -> dict[str, Any]:
    """Print ``mod`` as TVMScript, parse it back and describe the parsed (canonical) module."""
    script = mod.script()
    where = f"workload {meta.get('name', '?')}"
    canon = module_from_script(script, where=where)
    import tvm_ffi

    if not tvm_ffi.structural_equal(canon, mod):
        raise WorkloadError(f"{where}: TVMScript does not round-trip to a structurally equal module")
    return describe_module(canon, script=script, **meta)


def spec_row(spec: WorkloadSpec) -> dict[str, Any]:
    return canonical_row(build_module(spec), family=spec.family, name=spec.name, source=spec.source,
                         dtype=spec.dtype, shapes=spec.shape_dict, flops=spec.flops())


def graph_rows(models: Iterable[str], max_tasks: int = 0) -> Iterable[dict[str, Any]]:
    from little_dragon.workloads.graph import extract_model_tasks

    for model in models:
        tasks = extract_model_tasks(model)
        if max_tasks:
            tasks = tasks[:max_tasks]
        for task_name, mod, flops in tasks:
            yield canonical_row(mod, family=f"graph:{model}", name=f"{model}.{task_name}",
                                source=f"graph:{model}", flops=flops)


def generate_rows(cfg: WorkloadsConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Distinct workload rows for ``cfg`` and counters (specs, built, duplicates, failures)."""
    prof = resolve(cfg)
    specs = profile_specs(cfg)
    stats = collections.Counter(specs=len(specs))
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(row: dict[str, Any]) -> bool:
        if row["workload_id"] in seen:
            stats["duplicates"] += 1
            return False
        seen.add(row["workload_id"])
        rows.append(row)
        return True

    cap = cfg.max_workloads or None
    t0 = time.perf_counter()
    for i, spec in enumerate(specs, 1):
        if cap and len(rows) >= cap:
            break
        try:
            add(spec_row(spec))
        except SpecError as e:
            stats["invalid_specs"] += 1
            log.warning("skipping %s (%s): %s", spec.name, spec.source, e)
        if i % 1000 == 0:
            log.info("built %d/%d specs, %d distinct, %.0f/s", i, len(specs), len(rows), i / (time.perf_counter() - t0))
    if prof.graph_models and not (cap and len(rows) >= cap):
        for row in graph_rows(prof.graph_models, cfg.graph_max_tasks):
            stats["graph_tasks"] += 1
            if cap and len(rows) >= cap:
                break
            add(row)
    stats["workloads"] = len(rows)
    return rows, dict(stats)


def summarize(df: Any, stats: dict[str, int], cfg: WorkloadsConfig) -> dict[str, Any]:
    return {
        "profile": cfg.profile,
        "seed": cfg.seed,
        "workloads": int(len(df)),
        "families": int(df["family"].nunique()),
        "per_family": {k: int(v) for k, v in sorted(df["family"].value_counts().items())},
        "per_dtype": {k: int(v) for k, v in sorted(df["dtype"].value_counts().items())},
        "per_source": {k: int(v) for k, v in sorted(df["source"].value_counts().items())},
        "total_gflop": float(df["flops"].sum() / 1e9),
        **{k: int(v) for k, v in sorted(stats.items())},
    }


def generate_workloads(cfg: WorkloadsConfig, out_dir: str | os.PathLike) -> Any:
    """Write ``workloads.parquet`` and ``summary.json`` under ``out_dir``; return the table."""
    import pandas as pd

    out = Path(out_dir)
    rows, stats = generate_rows(cfg)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["flops"] = df["flops"].astype("float64")
    df["bytes"] = df["bytes"].astype("float64")
    summary = summarize(df, stats, cfg)
    atomic.write_parquet(out / PARQUET, df)
    atomic.write_json(out / SUMMARY, summary)
    log.info("%d workloads in %d families -> %s", len(df), summary["families"], out / PARQUET)
    return df


def family_counts(df: Any) -> dict[str, int]:
    return {k: int(v) for k, v in df["family"].value_counts().items()}
