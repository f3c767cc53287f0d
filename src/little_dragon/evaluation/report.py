"""The evaluation report: markdown with the headline table, baselines side by side, and two figures.

Fig 3 (speedup by workload family): best-of-k geomean speedup of correct kernels over the baseline, per
family, for the model, random design-space samples at k, MetaSchedule at k trials and at full budget.
Fig 4 (latency vs optimisation wall-clock): geomean over construction prompts of the best speedup reached
so far against seconds spent (model: generation + evaluation per attempt; MetaSchedule: the harvest's
tuning wall time per trial), and the cost to match: MetaSchedule's seconds to reach the model's best-of-k
latency.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from little_dragon import atomic

METHOD_LABELS = {"model": "model", "random": "random design space @k", "metaschedule_k": "MetaSchedule @k trials",
                 "metaschedule_full": "MetaSchedule full budget", "given": "given script"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fig_speedup_by_family(metrics: dict[str, Any], path: Path, title: str) -> None:
    plt = _plt()
    methods = [m for m in ("model", "random", "metaschedule_k", "metaschedule_full") if m in metrics]
    fams = sorted({f for m in methods for f in metrics[m].get("family_speedup", {})})
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(fams) + 3), 4))
    w = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        vals = [metrics[m]["family_speedup"].get(f) or 0.0 for f in fams]
        vals = [v if v and math.isfinite(v) else 0.0 for v in vals]
        ax.bar(np.arange(len(fams)) + i * w, vals, w, label=METHOD_LABELS[m])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(fams)) + w * (len(methods) - 1) / 2, fams, rotation=30, ha="right")
    ax.set_ylabel("best-of-k speedup over baseline (geomean)")
    _save(plt, fig, ax, title, path)


def _save(plt: Any, fig: Any, ax: Any, title: str, path: Path) -> None:
    """Title, legend, then the PNG written atomically (a killed run leaves no half figure)."""
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def model_curves(att: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per construction prompt: (cumulative seconds, best correct latency so far) over the model's attempts."""
    out = {}
    m = att[(att["method"] == "model") & (att["task"] == "construction")].sort_values(["prompt_id", "attempt"])
    for pid, g in m.groupby("prompt_id"):
        t = np.cumsum((g["gen_s"] + g["eval_s"]).to_numpy(dtype=float))
        lat = g["latency_us"].where(g["category"] == "correct").to_numpy(dtype=float)
        out[str(pid)] = (t, np.fmin.accumulate(np.where(np.isfinite(lat), lat, np.inf)))
    return out


def _geomean_curve(curves: dict[str, tuple[np.ndarray, np.ndarray]], base: dict[str, float],
                   grid: np.ndarray) -> np.ndarray:
    rows = []
    for pid, (t, best) in curves.items():
        b = base.get(pid, math.nan)
        if not math.isfinite(b) or len(t) == 0:
            continue
        idx = np.searchsorted(t, grid, side="right") - 1
        lat = np.where(idx >= 0, best[np.clip(idx, 0, len(best) - 1)], np.inf)
        # the baseline schedule is always there to fall back on: best so far never drops below it (1.0)
        sp = np.where(np.isfinite(lat), np.maximum(b / np.where(np.isfinite(lat), lat, 1.0), 1.0), 1.0)
        rows.append(np.log(np.maximum(sp, 1e-9)))
    return np.exp(np.mean(rows, axis=0)) if rows else np.full(len(grid), np.nan)


def cost_to_match(model: dict[str, tuple[np.ndarray, np.ndarray]],
                  ms: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Per prompt solved by the model: MetaSchedule's seconds to reach the model's best-of-k latency."""
    model_s, ms_s, never = [], [], 0
    for pid, (t, best) in model.items():
        if pid not in ms or not np.isfinite(best[-1]):
            continue
        mt, mbest = ms[pid]
        hit = np.nonzero(mbest <= best[-1])[0]
        model_s.append(float(t[-1]))
        if len(hit):
            ms_s.append(float(mt[hit[0]]))
        else:
            never += 1
    return {"prompts": len(model_s), "model_median_s": float(np.median(model_s)) if model_s else None,
            "metaschedule_median_s": float(np.median(ms_s)) if ms_s else None,
            "metaschedule_never_matched": never}


def fig_latency_vs_time(model: dict, ms: dict, base: dict[str, float], path: Path, title: str) -> None:
    plt = _plt()
    ends = [c[0][-1] for c in list(model.values()) + list(ms.values()) if len(c[0])]
    lo = min([c[0][0] for c in list(model.values()) + list(ms.values()) if len(c[0])] or [0.01])
    grid = np.geomspace(max(lo, 1e-3), max(ends or [1.0]), 60)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curves in (("model", model), ("MetaSchedule (harvest trials)", ms)):
        if curves:
            ax.plot(grid, _geomean_curve(curves, base, grid), label=name)
    ax.set_xscale("log")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("optimisation wall-clock per kernel (s)")
    ax.set_ylabel("best speedup so far (geomean; baseline = 1)")
    _save(plt, fig, ax, title, path)


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if pct:
        return f"{100 * v:.1f}%"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def markdown(summary: dict[str, Any], metrics: dict[str, Any], figures: dict[str, str]) -> str:
    lines = [f"# Sealed-set evaluation: {summary['model_label']}", "",
             f"Model source `{summary['model']}`; target `{summary['target']}`; k = {summary['attempts']} attempts "
             f"per prompt; protocol `{summary['protocol']}`; generation {summary['generation_attempts_per_s']:.2f} "
             f"attempts/s ({summary['generation_s']:.1f} s); evaluated {summary['date']}.", "",
             "## Per-attempt correctness and speed (model)", "",
             "| task | slice | prompts | attempts | correct/attempt | best-of-k correct | decoded | applied | "
             "geomean speedup | best-of-k speedup | vs best MetaSchedule | improved (≥thr) | copies | s/attempt |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for task, by_slice in metrics.get("model", {}).items():
        if task == "family_speedup":
            continue
        for sl, m in by_slice.items():
            lines.append(f"| {task} | {sl} | {m.get('prompts', 0)} | {m['attempts']} | "
                         f"{_fmt(m.get('correct_rate'), True)} | {_fmt(m.get('best_of_k_correct_rate'), True)} | "
                         f"{_fmt(m.get('decode_rate'), True)} | {_fmt(m.get('apply_rate'), True)} | "
                         f"{_fmt(m.get('geomean_speedup'))} | {_fmt(m.get('best_of_k_geomean_speedup'))} | "
                         f"{_fmt(m.get('geomean_speedup_vs_metaschedule'))} | {_fmt(m.get('improved_rate'), True)} | "
                         f"{_fmt(m.get('copy_rate'), True)} | {_fmt(m.get('wall_s_per_attempt'))} |")
    lines += ["", "## Failure categories (model, all slices)", "", "| task | " + " | ".join(
        c for c in _categories()) + " |", "|---|" + "---:|" * len(_categories())]
    for task, by_slice in metrics.get("model", {}).items():
        if task != "family_speedup":
            m = by_slice["all"]
            lines.append(f"| {task} | " + " | ".join(str(m.get(f"count_{c}", 0)) for c in _categories()) + " |")
    lines += ["", "## Baselines at equal budget (construction, all slices)", "",
              "| method | attempts | correct/attempt | best-of-k correct | best-of-k speedup (solved) | "
              "best-of-k speedup (fallback 1.0) |", "|---|---:|---:|---:|---:|---:|"]
    for meth in ("model", "random", "metaschedule_k", "metaschedule_full"):
        m = metrics.get(meth, {}).get("construction", {}).get("all")
        if m:
            lines.append(f"| {METHOD_LABELS[meth]} | {m['attempts']} | {_fmt(m.get('correct_rate'), True)} | "
                         f"{_fmt(m.get('best_of_k_correct_rate'), True)} | {_fmt(m.get('best_of_k_geomean_speedup'))} | "
                         f"{_fmt(m.get('best_of_k_geomean_speedup_fallback'))} |")
    verdict = summary.get("verdict_vs_random")
    if verdict:
        lines += ["", f"**Against random design-space samples at equal k:** {verdict}"]
    ctm = summary.get("cost_to_match") or {}
    if ctm.get("prompts"):
        lines += ["", f"**Cost to match** ({ctm['prompts']} construction prompts the model solved): the model "
                      f"spent a median {_fmt(ctm['model_median_s'])} s for its best-of-k; MetaSchedule needed a "
                      f"median {_fmt(ctm['metaschedule_median_s'])} s of tuning to reach the same latency and never "
                      f"reached it on {ctm['metaschedule_never_matched']}."]
    lines += ["", "## Figures", ""] + [f"![{k}]({v})" for k, v in figures.items()] + [""]
    return "\n".join(lines)


def _categories() -> tuple[str, ...]:
    from little_dragon.evaluation.metrics import categories

    return categories()
