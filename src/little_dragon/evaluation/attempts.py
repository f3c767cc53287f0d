"""The attempt driver: scripts of any method (model, baselines) -> one scored row per attempt.

Every script goes through the same ``Evaluator`` (decode, apply, build, correctness check, the harvest's
timing protocol); refinement attempts are timed against their given script.  One row per attempt:
``prompt_id, task, slice, family, workload_id, method, attempt, category, latency_us, speedup, speedup_vs_baseline,
speedup_vs_metaschedule, copy, improved, gen_s, eval_s, cached, script, message``.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import pandas as pd

from little_dragon.evaluation.prompts import EvalPrompt

log = logging.getLogger(__name__)

COLUMNS = ["prompt_id", "task", "slice", "family", "workload_id", "method", "attempt", "category", "latency_us",
           "baseline_us", "reference_us", "speedup", "speedup_vs_baseline", "speedup_vs_metaschedule", "copy",
           "improved", "gen_s", "eval_s", "cached", "script", "message"]


def _canonical(script: str) -> str | None:
    from little_dragon.evaluator.script import canonical_trace, decode_script

    try:
        return canonical_trace(decode_script(script))
    except Exception:  # noqa: BLE001
        return None


def is_copy(script: str, given: str | None) -> bool:
    """A refinement attempt whose trace equals the given script's (the text may differ in form)."""
    if not given:
        return False
    a = _canonical(script)
    return a is not None and a == _canonical(given)


def score(evaluator: Any, items: Sequence[tuple[EvalPrompt, str, list[str]]], improvement_threshold: float,
          gen_s_per_attempt: float = 0.0, chunk: int = 64) -> pd.DataFrame:
    """Evaluate ``(prompt, method, scripts)`` items; rows in item order."""
    from little_dragon.evaluator.pool import EvalRequest

    flat = [(p, m, i, s) for p, m, scripts in items for i, s in enumerate(scripts)]
    rows: list[dict[str, Any]] = []
    for start in range(0, len(flat), chunk):
        part = flat[start:start + chunk]
        reqs = [EvalRequest(p.tvmscript, s, p.given_script if p.task == "refinement" and m != "given" else None)
                for p, m, _, s in part]
        for (p, m, i, s), r in zip(part, evaluator.evaluate_batch(reqs)):
            ok = r.category == "correct"
            lat = r.latency_us if ok else None
            vs_base = (r.baseline_us / lat) if ok and r.baseline_us and lat else math.nan
            vs_ms = (p.best_latency_us / lat) if ok and lat and math.isfinite(p.best_latency_us) else math.nan
            copy = bool(getattr(r, "copy", False)) or (p.task == "refinement" and m != "given"
                                                       and is_copy(s, p.given_script))
            if p.task == "refinement":
                speed = 1.0 if m == "given" and ok else (r.speedup if ok and r.speedup else math.nan)
            else:
                speed = r.speedup if ok and r.speedup else vs_base
            improved = bool(p.task == "refinement" and m != "given" and ok and not copy
                            and math.isfinite(speed) and speed >= improvement_threshold)
            rows.append({"prompt_id": p.prompt_id, "task": p.task, "slice": p.slice, "family": p.family,
                         "workload_id": p.workload_id, "method": m, "attempt": i, "category": r.category,
                         "latency_us": lat if lat is not None else math.nan,
                         "baseline_us": r.baseline_us if r.baseline_us else math.nan,
                         "reference_us": r.reference_us if getattr(r, "reference_us", None) else math.nan,
                         "speedup": speed if speed is not None else math.nan, "speedup_vs_baseline": vs_base,
                         "speedup_vs_metaschedule": vs_ms, "copy": copy, "improved": improved,
                         "gen_s": gen_s_per_attempt if m == "model" else 0.0, "eval_s": float(r.eval_s or 0.0),
                         "cached": bool(r.cached), "script": s, "message": (r.message or "")[:500]})
        log.info("scored %d/%d attempts", min(start + chunk, len(flat)), len(flat))
    return pd.DataFrame(rows, columns=COLUMNS)
