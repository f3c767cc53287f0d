"""Metrics of scored attempts, per method, task and slice (``all`` = both slices).

Per-attempt correctness (correct kernels / attempts) is the headline; beside it the count of every failure
category, validity (decoded; decoded and applied), geomean speedups of correct kernels over the baseline and
over the harvest's best MetaSchedule result, best-of-k correctness and speedup, refinement's improved and
copy shares (a copy is never an improvement), and wall-clock per attempt.  Speedups are geomeans over
correct kernels; best-of-k speedups over prompts with a correct attempt (``_fallback``: unsolved prompts
count as the baseline, 1.0, which is what ``dragon optimize`` falls back to).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

SLICE_ALL = "all"


def categories() -> tuple[str, ...]:
    from little_dragon.evaluator.outcome import CATEGORIES

    extra = ("no_op",) if "no_op" not in CATEGORIES else ()
    return tuple(CATEGORIES) + extra


def geomean(x: Any) -> float:
    a = np.asarray(list(x), dtype=float)
    a = a[np.isfinite(a) & (a > 0)]
    return float(np.exp(np.mean(np.log(a)))) if len(a) else math.nan


def best_per_prompt(att: pd.DataFrame, col: str = "speedup") -> pd.DataFrame:
    """Per prompt: solved (any correct attempt) and the best correct attempt's speedup."""
    g = att.assign(ok=att["category"] == "correct",
                   s=att[col].where(att["category"] == "correct"))
    out = g.groupby("prompt_id").agg(task=("task", "first"), slice=("slice", "first"), family=("family", "first"),
                                     solved=("ok", "any"), correct_rate=("ok", "mean"), best=("s", "max"),
                                     attempts=("ok", "size"))
    return out.reset_index()


def group_metrics(att: pd.DataFrame, task: str) -> dict[str, Any]:
    n = len(att)
    if n == 0:
        return {"attempts": 0}
    cat = att["category"]
    ok = cat == "correct"
    m: dict[str, Any] = {"attempts": n, "prompts": int(att["prompt_id"].nunique()),
                         "correct_rate": float(ok.mean()),
                         "decode_rate": float((cat != "decode_error").mean()),
                         "apply_rate": float((~cat.isin(["decode_error", "apply_error"])).mean())}
    for c in categories():
        m[f"count_{c}"] = int((cat == c).sum())
    m["geomean_speedup"] = geomean(att.loc[ok, "speedup"])
    m["geomean_speedup_vs_baseline"] = geomean(att.loc[ok, "speedup_vs_baseline"])
    m["geomean_speedup_vs_metaschedule"] = geomean(att.loc[ok, "speedup_vs_metaschedule"])
    best = best_per_prompt(att)
    m["best_of_k_correct_rate"] = float(best["solved"].mean())
    m["best_of_k_geomean_speedup"] = geomean(best.loc[best["solved"], "best"])
    m["best_of_k_geomean_speedup_fallback"] = geomean(best["best"].where(best["solved"], 1.0).clip(lower=1e-9))
    if task == "refinement":
        m["improved_rate"] = float(att["improved"].mean())
        m["copy_rate"] = float(att["copy"].mean())
        m["best_of_k_improved_rate"] = float(att.groupby("prompt_id")["improved"].any().mean())
    m["wall_s_per_attempt"] = float((att["gen_s"] + att["eval_s"]).mean())
    return m


def family_speedups(att: pd.DataFrame) -> dict[str, float]:
    """Best-of-k geomean speedup per workload family (construction, solved prompts)."""
    best = best_per_prompt(att[att["task"] == "construction"])
    best = best[best["solved"]]
    return {str(f): geomean(g["best"]) for f, g in best.groupby("family")}


def all_metrics(att: pd.DataFrame) -> dict[str, Any]:
    """``{method: {task: {slice: {metric: value}}, "family_speedup": {...}}}``."""
    out: dict[str, Any] = {}
    for method, a in att.groupby("method", sort=True):
        mm: dict[str, Any] = {}
        for task, at in a.groupby("task", sort=True):
            mm[task] = {SLICE_ALL: group_metrics(at, task)}
            for sl, asl in at.groupby("slice", sort=True):
                mm[task][sl] = group_metrics(asl, task)
        mm["family_speedup"] = family_speedups(a)
        out[method] = mm
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested metrics -> ``a.b.c`` keys, finite numbers only (MLflow rejects NaN)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)
    return out


def json_safe(d: Any) -> Any:
    if isinstance(d, dict):
        return {str(k): json_safe(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [json_safe(v) for v in d]
    if isinstance(d, float) and not math.isfinite(d):
        return None
    if isinstance(d, (np.floating, np.integer)):
        return json_safe(d.item())
    return d
