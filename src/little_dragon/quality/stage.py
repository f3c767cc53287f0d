"""The quality stages (``quality_workloads``, ``quality_harvest``, ``quality_examples``): one suite's gate.

``dragon quality check`` (DVC) and the Prefect flow call ``quality_stage``; it owns the stage's MLflow run
(the rule for every stage, docs/stages.md).  It never raises on a failed expectation: the result says so,
and the caller decides (the CLI exits 1, ``gate.check`` raises)."""
from __future__ import annotations

from pathlib import Path

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.quality.config import QualityConfig
from little_dragon.quality.gate import SuiteResult


def quality_stage(suite: str, ds: DatasetsConfig, qc: QualityConfig,
                  metrics_path: str | Path | None = None) -> SuiteResult:
    """Run ``suite`` over the data ``ds`` names; write its metrics JSON (default
    ``<qc.metrics_dir>/quality_<suite>.json``) and Data Docs either way."""
    from little_dragon import atomic, tracking
    from little_dragon.config import flat_params
    from little_dragon.quality.gate import build_frames, run_suite

    metrics_path = Path(metrics_path or Path(qc.metrics_dir) / f"quality_{suite}.json")
    with tracking.stage_run(f"quality-{suite}", params={**flat_params(qc), "suite": suite},
                            tags={"suite": suite}) as mlf:
        result = run_suite(suite, build_frames(suite, ds, qc), ds, qc)
        metrics = result.metrics()
        atomic.write_json(metrics_path, metrics)
        if mlf is not None:
            mlf.log_metrics({"success": float(result.success), "expectations": metrics["expectations"],
                             "failed_expectations": metrics["failed"],
                             **{f"rows.{k}": v for k, v in result.rows.items()}})
            mlf.log_dict(metrics, f"quality_{suite}.json")
            if not result.success:
                mlf.set_tag("quality_failure", result.failure_message(qc.max_reported_rows)[:5000])
    return result
