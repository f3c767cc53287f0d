"""The ``drift`` stage: newest harvest batch vs training data, as a GX suite, a report, a plot and metrics.

``dragon quality drift`` (DVC) and the retraining flow call ``drift_stage``; it owns its MLflow run.  A
drifted batch fails the stage (``drift.enforce``) with the failing expectation named and what to do."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from little_dragon.quality.drift import DriftData, family_kl
from little_dragon.quality.drift_config import DriftConfig

WHAT_TO_DO = ("What to do: read {report}. If the change is intended (new families or shapes on purpose, a new "
              "target), set drift.enforce: false in params.yaml for this run and retrain on it; otherwise fix the "
              "workload generation or the harvest (failure rates name their workloads in the harvest status).")


@dataclasses.dataclass
class DriftResult:
    success: bool
    skipped: str
    metrics: dict[str, Any]
    message: str
    report: Path


def summary_metrics(data: DriftData) -> dict[str, Any]:
    b, r, br, rr = data.batch, data.reference, data.batch_records, data.reference_records

    def q(s: Any, p: float) -> float:
        return float(s.quantile(p)) if len(s) else math.nan

    return {
        "target_key": data.target_key, "batch": data.batch_kind, "reference": data.reference_target,
        "batch_workloads": len(b), "reference_workloads": len(r),
        "batch_candidates": len(br), "reference_candidates": len(rr),
        "family_kl": family_kl(b["family"], r["family"]) if len(b) and len(r) else math.nan,
        "new_families": sorted(set(b["family"]) - set(r["family"])),
        "batch_failed_rate": float(b["failed"].mean()) if len(b) else math.nan,
        "reference_failed_rate": float(r["failed"].mean()) if len(r) else math.nan,
        "batch_invalid_fraction": float(b["invalid_fraction"].mean()) if len(b) else math.nan,
        "reference_invalid_fraction": float(r["invalid_fraction"].mean()) if len(r) else math.nan,
        "batch_codec_lines_median": q(b["codec_lines"].dropna(), 0.5),
        "reference_codec_lines_median": q(r["codec_lines"].dropna(), 0.5),
        "batch_log2_flops_range": [q(b["log2_flops"].dropna(), 0), q(b["log2_flops"].dropna(), 1)],
        "reference_log2_flops_range": [q(r["log2_flops"].dropna(), 0), q(r["log2_flops"].dropna(), 1)],
        "batch_log10_latency_quartiles": [q(br["log10_latency_us"], p) for p in (0.25, 0.5, 0.75)],
        "reference_log10_latency_quartiles": [q(rr["log10_latency_us"], p) for p in (0.25, 0.5, 0.75)],
    }


def plot_drift(data: DriftData, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from little_dragon import atomic

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    b, r = data.batch, data.reference
    fams = sorted(set(b["family"]) | set(r["family"]))
    x = np.arange(len(fams))
    bf = b["family"].value_counts(normalize=True).reindex(fams, fill_value=0)
    rf = r["family"].value_counts(normalize=True).reindex(fams, fill_value=0)
    ax = axes[0, 0]
    ax.bar(x - 0.2, rf.values, 0.4, label=f"training ({len(r)} workloads)")
    ax.bar(x + 0.2, bf.values, 0.4, label=f"batch ({len(b)} workloads)")
    ax.set_xticks(x, fams, rotation=60, ha="right", fontsize=8)
    ax.set_title("family mix")
    ax.legend(fontsize=8)
    for ax, (col, src_b, src_r, title) in zip(axes.flat[1:], [
            ("log2_flops", b, r, "shapes: log2 FLOPs per workload"),
            ("log10_latency_us", data.batch_records, data.reference_records, "latency: log10 us, valid candidates"),
            ("codec_lines", b, r, "codec length: lines of the best script")]):
        vals_r, vals_b = src_r[col].dropna(), src_b[col].dropna()
        both = np.concatenate([vals_r.to_numpy(), vals_b.to_numpy()])
        bins = np.histogram_bin_edges(both, bins=20) if len(both) else 10
        ax.hist(vals_r, bins=bins, alpha=0.6, density=True, label="training")
        ax.hist(vals_b, bins=bins, alpha=0.6, density=True, label="batch")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"drift: {data.target_key}, batch = {data.batch_kind}; reference = training split, "
                 f"{data.reference_target}", fontsize=10)
    fig.tight_layout()
    with atomic.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)


def write_report(out_dir: Path, m: dict[str, Any], result: Any, cfg: DriftConfig, verdict: str) -> Path:
    from little_dragon import atomic

    def f(v: Any) -> str:
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else ("inf" if math.isinf(v) else f"{v:.3g}")
        if isinstance(v, list):
            return "[" + ", ".join(f(x) for x in v) + "]"
        return str(v)

    lines = [
        "# Drift: newest harvest batch vs training data", "",
        f"**{verdict}**. Target `{m['target_key']}`; batch: {m['batch']} ({m['batch_workloads']} workloads, "
        f"{m['batch_candidates']} valid candidates); reference: the training split, {m['reference']} "
        f"({m['reference_workloads']} workloads, {m['reference_candidates']} valid candidates).", "",
        "| check | training | batch | bound |", "|---|---|---|---|",
        f"| family mix: KL(batch ‖ training), nats | 0 | {f(m['family_kl'])} | < {cfg.max_family_kl} |",
        f"| families the model never saw | | {', '.join(m['new_families']) or 'none'} | none |",
        f"| shapes: log2 FLOPs range | {f(m['reference_log2_flops_range'])} | {f(m['batch_log2_flops_range'])} | "
        f"training ± {cfg.flops_margin_log2}, ≥ {1 - cfg.max_flops_out_of_range:.0%} inside |",
        f"| latency: log10 us quartiles | {f(m['reference_log10_latency_quartiles'])} | "
        f"{f(m['batch_log10_latency_quartiles'])} | KL(batch ‖ training) < {cfg.max_latency_kl} |",
        f"| codec length: median lines | {f(m['reference_codec_lines_median'])} | "
        f"{f(m['batch_codec_lines_median'])} | ×/÷ {cfg.max_codec_length_ratio} |",
        f"| failed workloads | {f(m['reference_failed_rate'])} | {f(m['batch_failed_rate'])} | "
        f"≤ training + {cfg.max_failure_rate_increase} |",
        f"| invalid candidates | {f(m['reference_invalid_fraction'])} | {f(m['batch_invalid_fraction'])} | "
        f"≤ training + {cfg.max_failure_rate_increase} |", "",
        "![drift](drift.png)", "",
    ]
    if result is not None:
        lines += ["## Great Expectations suite `drift`", "",
                  f"Data Docs: `{result.docs_index}` (rebuilt each run).", "",
                  "| table | expectation | column | observed | result |", "|---|---|---|---|---|"]
        for o in result.outcomes:
            lines.append(f"| {o.table} | {o.expectation} | {o.kwargs.get('column', '')} | "
                         f"{f(o.kwargs.get('observed_value'))} | {'pass' if o.success else '**FAIL**'} |")
        lines.append("")
    if verdict.startswith("DRIFT"):
        lines += [WHAT_TO_DO.format(report=out_dir / "README.md"), ""]
    path = out_dir / "README.md"
    atomic.write_text(path, "\n".join(lines))
    return path


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    return v


def _skipped_docs(qc: Any, reason: str) -> None:
    import html

    from little_dragon import atomic
    from little_dragon.quality.gate import _resolve

    atomic.write_text(_resolve(qc.data_docs_dir) / "drift" / "index.html",
                      "<!doctype html><html><head><title>Data Docs: drift</title></head><body>"
                      "<h1>Great Expectations suite: drift</h1>"
                      f"<p>The drift check was skipped: {html.escape(reason)}.</p></body></html>\n")


def drift_stage(cfg: DriftConfig, ds: Any, qc: Any, target: dict) -> DriftResult:
    from little_dragon import atomic, tracking
    from little_dragon.config import flat_params
    from little_dragon.quality.drift import load_drift_data
    from little_dragon.quality.drift_suite import run_drift_suite

    out_dir = Path(cfg.out_dir)
    with tracking.stage_run("drift", params=flat_params(cfg), inputs={"train": cfg.train}) as mlf:
        data = load_drift_data(cfg, ds, target)
        m = summary_metrics(data)
        result, skipped = None, ""
        if len(data.batch) < cfg.min_batch_workloads or data.reference.empty:
            skipped = (f"batch has {len(data.batch)} workloads (< {cfg.min_batch_workloads})" if
                       len(data.batch) < cfg.min_batch_workloads else
                       f"no earlier training data of {data.target_key} to compare with (the training split of this "
                       f"target holds only this batch: its first harvest)")
            verdict = f"SKIPPED: {skipped}"
            success = True
        else:
            result = run_drift_suite(data, cfg, qc)
            success = result.success
            verdict = "no drift" if success else (
                "DRIFT" + ("" if cfg.enforce else " (reported only: drift.enforce is false)"))
        if result is None:  # the Data Docs site still says what happened (and is the stage's declared output)
            _skipped_docs(qc, skipped)
        plot_drift(data, out_dir / "drift.png")
        report = write_report(out_dir, m, result, cfg, verdict)
        metrics = {**m, "success": success, "verdict": verdict,
                   "failed_expectations": [o.describe() for o in result.outcomes if not o.success] if result else []}
        atomic.write_json(out_dir / "metrics.json", _json_safe(metrics))  # NaN/inf are not JSON: null
        message = ""
        if result is not None and not success:
            message = result.failure_message(qc.max_reported_rows) + "\n" + WHAT_TO_DO.format(report=report)
        if mlf is not None:
            mlf.log_metrics({k: float(v) for k, v in m.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})
            mlf.log_metric("drift", float(not success))
            mlf.log_artifact(str(out_dir / "drift.png"))
            mlf.log_artifact(str(report))
            if message:
                mlf.set_tag("drift_failure", message[:5000])
    return DriftResult(success or not cfg.enforce, skipped, metrics, message, report)
