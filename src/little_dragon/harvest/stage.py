"""The harvest pipeline stage: the MLflow run + metrics/plot around ``run_harvest``.

``dragon harvest`` (DVC) and the Prefect flow call this same function; it owns the stage's MLflow run
(the rule for every stage, docs/stages.md)."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from little_dragon.harvest.config import HarvestConfig
from little_dragon.tvmx.timing import TimingConfig

log = logging.getLogger(__name__)


def harvest_stage(cfg: HarvestConfig, timing: TimingConfig, workloads_path: str | Path,
                  out_root: str | Path | None = None, metrics_path: str | Path | None = None,
                  plot_path: str | Path | None = None) -> dict[str, Any]:
    """Tune every selected workload of the store at ``workloads_path`` (resumable); return the counts."""
    import pandas as pd

    from little_dragon import atomic, tracking
    from little_dragon.config import flat_params
    from little_dragon.harvest.run import run_harvest
    from little_dragon.harvest.summary import harvest_metrics, plot_speedups

    wl_path = Path(workloads_path)
    if not wl_path.exists():
        raise FileNotFoundError(f"{wl_path}: workload store not found (run `dragon workloads` first)")
    workloads = pd.read_parquet(wl_path)
    with tracking.stage_run("harvest", params={**flat_params(cfg), **flat_params(timing, "timing.")},
                            inputs={"workloads": wl_path}, tags={"target": json.dumps(cfg.target)}) as mlf:
        res = run_harvest(cfg, timing, workloads, Path(out_root or cfg.out_dir))
        metrics = harvest_metrics(res.out_dir, workloads)
        summary = {k: v for k, v in metrics.items() if k != "families"}
        if mlf is not None:
            mlf.log_metrics({**summary, "tuned_now": res.tuned_now, "skipped": res.skipped})
            tracking.log_outputs(mlf, {"harvest": res.out_dir})
        if metrics_path:
            atomic.write_json(metrics_path, {"target_key": res.out_dir.name, **metrics})
        if plot_path:
            plot_speedups(res.out_dir, workloads, plot_path)
    log.info("harvest done: %s", json.dumps(dataclasses.asdict(res), default=str))
    return {"out_dir": str(res.out_dir), "tuned_now": res.tuned_now, "ok": res.ok, "failed": res.failed, **summary}
