"""Per-family numbers of a finished harvest: valid-candidate fraction, trials per minute, best speedup."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def family_summary(harvest_dir: str | Path, workloads: pd.DataFrame) -> pd.DataFrame:
    d = Path(harvest_dir)
    rec = pd.read_parquet(d / "records.parquet")
    base = pd.read_parquet(d / "baselines.parquet")
    st = pd.read_parquet(d / "status.parquet")
    fam = workloads.set_index("workload_id")["family"]
    best = rec[rec["valid"]].groupby("workload_id")["latency_us"].min()
    per_wl = st.set_index("workload_id").join(base.set_index("workload_id")[["baseline_us", "baseline_kind"]])
    per_wl["best_us"] = best
    per_wl["speedup"] = per_wl["baseline_us"] / per_wl["best_us"]
    per_wl["family"] = fam.reindex(per_wl.index).fillna("?")
    rec = rec.assign(family=fam.reindex(rec["workload_id"]).fillna("?").to_numpy())
    rows = []
    for family, g in per_wl.groupby("family"):
        r = rec[rec["family"] == family]
        minutes = g["wall_s"].sum() / 60.0
        sp = g["speedup"].replace([np.inf, -np.inf], np.nan).dropna()
        rows.append({
            "family": family,
            "workloads": len(g),
            "failed": int((g["status"] == "failed").sum()),
            "trials": len(r),
            "valid_fraction": float(r["valid"].mean()) if len(r) else math.nan,
            "trials_per_min": len(r) / minutes if minutes > 0 else math.nan,
            "speedup_median": float(sp.median()) if len(sp) else math.nan,
            "speedup_max": float(sp.max()) if len(sp) else math.nan,
            "baseline_kind": ",".join(sorted(set(g["baseline_kind"].dropna()))),
        })
    return pd.DataFrame(rows)


def harvest_metrics(harvest_dir: str | Path, workloads: pd.DataFrame) -> dict[str, Any]:
    fs = family_summary(harvest_dir, workloads)
    rec = pd.read_parquet(Path(harvest_dir) / "records.parquet")
    st = pd.read_parquet(Path(harvest_dir) / "status.parquet")
    minutes = st["wall_s"].sum() / 60.0
    return {
        "workloads_ok": int((st["status"] == "ok").sum()),
        "workloads_failed": int((st["status"] == "failed").sum()),
        "records": len(rec),
        "valid_fraction": float(rec["valid"].mean()) if len(rec) else 0.0,
        "trials_per_min": float(len(rec) / minutes) if minutes else 0.0,
        "speedup_median": float(fs["speedup_median"].median()) if len(fs) else 0.0,
        "families": json.loads(fs.to_json(orient="records")),
    }


def plot_speedups(harvest_dir: str | Path, workloads: pd.DataFrame, png: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fs = family_summary(harvest_dir, workloads).sort_values("speedup_median")
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(fs) + 1.2))
    ax.barh(fs["family"], fs["speedup_median"], color="#c0392b")
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("best tuned / baseline speedup (median per family, log)")
    ax.set_title(f"MetaSchedule harvest: {Path(harvest_dir).name}")
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
