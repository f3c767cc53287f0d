"""The ``evaluate`` stage: one model on the sealed prompts of one target, with baselines at equal budget.

``evaluate_model`` generates k attempts per sealed prompt (batched, KV cache), scores them and the baselines
with the evaluator, and writes to ``out_dir``: ``attempts.parquet`` (one row per attempt, every method),
``per_prompt.parquet`` (the model's best of k per prompt: what comparisons and the promotion gate pair on),
``metrics.json``, ``summary.json``; the report and figures go to ``<report_dir>/<name>/``.  Everything is
logged to an MLflow run, and the model's registry version (if the source has one) is tagged with its
sealed metrics and that run's id.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon import atomic
from little_dragon.errors import UserError
from little_dragon.evaluation.attempts import score
from little_dragon.evaluation.baselines import HarvestIndex, baseline_plan, metaschedule_curve
from little_dragon.evaluation.bootstrap import paired
from little_dragon.evaluation.eval_config import EvaluationConfig
from little_dragon.evaluation.metrics import all_metrics, best_per_prompt, flatten, json_safe
from little_dragon.evaluation.prompts import decoding_protocol, load_prompts, sealed_protocol
from little_dragon.evaluation.report import cost_to_match, fig_latency_vs_time, fig_speedup_by_family, markdown, \
    model_curves
from little_dragon.generation.config import GenerationConfig
from little_dragon.generation.sample import Generator, generate_attempts, open_generator
from little_dragon.generation.sources import ModelSource, resolve
from little_dragon.tvmx import target as tgt

log = logging.getLogger(__name__)

# the version tags a registry version gets (the promotion gate and `dragon eval` read them back)
HEADLINE = {"construction_correct_rate": ("model", "construction", "correct_rate"),
            "refinement_correct_rate": ("model", "refinement", "correct_rate"),
            "construction_geomean_speedup": ("model", "construction", "geomean_speedup"),
            "refinement_geomean_speedup": ("model", "refinement", "geomean_speedup"),
            "construction_best_of_k_correct_rate": ("model", "construction", "best_of_k_correct_rate"),
            "refinement_improved_rate": ("model", "refinement", "improved_rate"),
            "refinement_copy_rate": ("model", "refinement", "copy_rate")}


@dataclasses.dataclass
class EvaluationResult:
    out_dir: Path
    report: Path
    metrics: dict[str, Any]
    summary: dict[str, Any]
    attempts: pd.DataFrame


def overall(att: pd.DataFrame, method: str = "model") -> dict[str, float]:
    """Per-attempt correctness and geomean speedup over every task and slice (the gate's two numbers)."""
    from little_dragon.evaluation.metrics import geomean

    a = att[att["method"] == method]
    ok = a["category"] == "correct"
    return {"correct_rate": float(ok.mean()) if len(a) else math.nan,
            "geomean_speedup": geomean(a.loc[ok, "speedup"])}


def _versus_random(att: pd.DataFrame, cfg: EvaluationConfig) -> str | None:
    con = att[att["task"] == "construction"]
    if "random" not in set(con["method"]):
        return None
    m = best_per_prompt(con[con["method"] == "model"]).set_index("prompt_id")
    r = best_per_prompt(con[con["method"] == "random"]).set_index("prompt_id")
    iv = paired(m["correct_rate"], r["correct_rate"], cfg.bootstrap_samples, cfg.confidence, cfg.seed)
    sp_m = m["best"].where(m["solved"], 1.0).map(lambda x: math.log(max(x, 1e-9)))
    sp_r = r["best"].where(r["solved"], 1.0).map(lambda x: math.log(max(x, 1e-9)))
    isp = paired(sp_m, sp_r, cfg.bootstrap_samples, cfg.confidence, cfg.seed)
    better = iv.low > 0 or (iv.high >= 0 and isp.low > 0)
    word = "beats" if better else "does NOT beat"
    return (f"the model {word} random valid design-space schedules at k={cfg.attempts}: per-attempt correctness "
            f"difference {iv.diff:+.3f} ({cfg.confidence:.0%} CI {iv.low:+.3f}..{iv.high:+.3f}), best-of-k log-speedup "
            f"difference {isp.diff:+.3f} (CI {isp.low:+.3f}..{isp.high:+.3f}) over {iv.n} construction prompts")


def tag_registry_version(source: ModelSource, metrics: dict[str, Any], run_id: str | None, protocol: str,
                         report: Path, att: pd.DataFrame, decoding: str | None = None) -> None:
    if source.registered_model is None or source.version is None:
        return
    from mlflow import MlflowClient

    client = MlflowClient()
    tags = {"sealed.protocol": protocol, "sealed.report": str(report)}
    if decoding:
        tags["sealed.decoding"] = decoding
    if run_id:
        tags["sealed.eval_run_id"] = run_id
    for key, (meth, task, metric) in HEADLINE.items():
        v = metrics.get(meth, {}).get(task, {}).get("all", {}).get(metric)
        if v is not None and isinstance(v, float) and math.isfinite(v):
            tags[f"sealed.{key}"] = f"{v:.6g}"
    for k, v in overall(att).items():
        if math.isfinite(v):
            tags[f"sealed.{k}"] = f"{v:.6g}"
    for k, v in tags.items():
        client.set_model_version_tag(source.registered_model, str(source.version), k, v)


def evaluate_model(model: str | ModelSource, out_dir: str | Path, cfg: EvaluationConfig,
                   gen_cfg: GenerationConfig | None = None, evaluator_cfg: Any = None, timing_cfg: Any = None,
                   name: str | None = None, generator: Generator | None = None) -> EvaluationResult:
    from little_dragon import tracking
    from little_dragon.evaluator.pool import Evaluator

    gen_cfg = gen_cfg or GenerationConfig()
    out_dir = Path(out_dir)
    name = name or out_dir.name
    target = tgt.normalize(cfg.target)
    prompts = load_prompts(cfg)
    if not prompts:
        raise UserError(f"{cfg.sealed_dir}: no sealed prompts for target {json.dumps(target)} in slices "
                        f"{cfg.slices} (was the split built from a harvest of this target?)")
    protocol = sealed_protocol(cfg)
    params = {"model": str(model if isinstance(model, str) else model.spec), **{f"evaluation.{k}": v for k, v in
              dataclasses.asdict(cfg).items()}, **{f"generation.{k}": v for k, v in dataclasses.asdict(gen_cfg).items()}}
    with tracking.stage_run("evaluate", params, inputs={"sealed": cfg.sealed_dir},
                            tags={"sealed.protocol": protocol, "evaluated_model": str(params["model"])}) as mlf:
        source = generator.source if generator is not None else (
            model if isinstance(model, ModelSource) else resolve(model))
        gen = generator or open_generator(source, gen_cfg)
        # the decoding as sampled: a token budget of 0 is the model's own (script_budget), known once it is open
        decoding, decoding_id = decoding_protocol(getattr(gen, "cfg", gen_cfg))
        if mlf is not None:
            mlf.set_tag("sealed.decoding", decoding_id)
        log.info("evaluate %s: %d prompts x %d attempts on %s", source.label, len(prompts), cfg.attempts,
                 target["kind"])
        res = generate_attempts(gen, [p.prompt for p in prompts], cfg.attempts, seed=cfg.seed)
        del gen
        gc.collect()
        items = [(p, "model", s) for p, s in zip(prompts, res.scripts)]
        index = HarvestIndex(cfg.harvest_roots, target) if cfg.metaschedule_baseline else None
        t0 = time.perf_counter()
        plan = baseline_plan(prompts, cfg.attempts, target, index, cfg.random_baseline, cfg.seed)
        with Evaluator(target, evaluator_cfg, timing_cfg) as ev:
            att = score(ev, items + plan, cfg.improvement_threshold,
                        gen_s_per_attempt=res.seconds / max(res.attempts, 1))
        metrics = all_metrics(att)
        mcurves = model_curves(att)
        mscurves: dict[str, Any] = {}
        if index is not None:
            for p in prompts:
                if p.task == "construction" and p.prompt_id in mcurves:
                    tr = index.trials(p.workload_id)
                    if tr is not None:
                        mscurves[p.prompt_id] = metaschedule_curve(tr)
        base = {p.prompt_id: p.baseline_us for p in prompts}
        summary = {"model": str(source.spec), "model_label": source.label, "registered_model": source.registered_model,
                   "version": source.version, "target": json.dumps(target, sort_keys=True), "attempts": cfg.attempts,
                   "prompts": len(prompts), "protocol": protocol, "decoding": decoding,
                   "decoding_protocol": decoding_id, "generation_s": res.seconds,
                   "generation_attempts_per_s": res.attempts_per_s, "scoring_s": time.perf_counter() - t0,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **overall(att),
                   "verdict_vs_random": _versus_random(att, cfg), "cost_to_match": cost_to_match(mcurves, mscurves)}
        report_dir = Path(cfg.report_dir) / name
        report_dir.mkdir(parents=True, exist_ok=True)
        figs = {"Fig 3: speedup by workload family": "fig3_speedup_by_family.png",
                "Fig 4: latency reached vs optimisation wall-clock": "fig4_latency_vs_time.png"}
        fig_speedup_by_family(metrics, report_dir / figs["Fig 3: speedup by workload family"],
                              f"{source.label}: best-of-{cfg.attempts} speedup by family ({target['kind']})")
        fig_latency_vs_time(mcurves, mscurves, base, report_dir / figs[
            "Fig 4: latency reached vs optimisation wall-clock"], f"{source.label} vs MetaSchedule ({target['kind']})")
        report = report_dir / "report.md"
        atomic.write_text(report, markdown(summary, json_safe(metrics), figs))
        per_prompt = best_per_prompt(att[att["method"] == "model"])
        with atomic.atomic_path(out_dir) as tmp:
            tmp.mkdir(parents=True)
            atomic.write_parquet(tmp / "attempts.parquet", att)
            atomic.write_parquet(tmp / "per_prompt.parquet", per_prompt)
            atomic.write_json(tmp / "metrics.json", json_safe(metrics), indent=1)
            atomic.write_json(tmp / "summary.json", json_safe(summary), indent=1)
        run_id = None
        if mlf is not None:
            run_id = mlf.active_run().info.run_id
            mlf.log_metrics(flatten(json_safe(metrics)))
            mlf.log_metrics({k: float(v) for k, v in summary.items() if isinstance(v, (int, float))
                             and not isinstance(v, bool) and v is not None and math.isfinite(float(v))})
            mlf.log_artifacts(str(report_dir), artifact_path="report")
            mlf.log_artifact(str(out_dir / "per_prompt.parquet"), artifact_path="evaluation")
            mlf.log_artifact(str(out_dir / "summary.json"), artifact_path="evaluation")
            mlf.set_tag("mlflow.note.content", f"Sealed-set report: {report} (artifact report/report.md)")
            tracking.log_outputs(mlf, {"evaluation": out_dir})
            tag_registry_version(source, json_safe(metrics), run_id, protocol, report, att, decoding_id)
        summary["mlflow_run_id"] = run_id
        atomic.write_json(out_dir / "summary.json", json_safe(summary), indent=1)
    log.info("evaluation of %s: correct/attempt %.3f, geomean speedup %s; report %s", source.label,
             summary["correct_rate"], summary["geomean_speedup"], report)
    return EvaluationResult(out_dir, report, metrics, summary, att)


def headline(metrics: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The compact metrics file DVC tracks (monitoring/metrics/evaluate.json)."""
    out: dict[str, Any] = {"correct_rate": summary.get("correct_rate"), "geomean_speedup": summary.get("geomean_speedup"),
                           "generation_attempts_per_s": summary.get("generation_attempts_per_s")}
    for meth, by_task in metrics.items():
        for task, by_slice in by_task.items():
            if task == "family_speedup":
                continue
            for sl, m in by_slice.items():
                for k in ("correct_rate", "best_of_k_correct_rate", "geomean_speedup", "best_of_k_geomean_speedup",
                          "improved_rate", "copy_rate", "decode_rate", "apply_rate"):
                    if k in m:
                        out[f"{meth}.{task}.{sl}.{k}"] = m[k]
    return json_safe(out)
