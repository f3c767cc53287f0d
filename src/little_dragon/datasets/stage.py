"""The ``split`` pipeline stage: harvests -> train/validation sets, the sealed set and the dataset card.

``dragon datasets build`` (DVC) and the Prefect flow call ``split_stage``; it owns the stage's MLflow run
(the rule for every stage, docs/stages.md)."""
from __future__ import annotations

from pathlib import Path

from little_dragon.datasets.build import BuildResult
from little_dragon.datasets.config import DatasetsConfig


def split_stage(cfg: DatasetsConfig, card_dir: str | Path | None = None,
                metrics_path: str | Path | None = None) -> BuildResult:
    """Build the sets of ``cfg`` and their card (under ``card_dir``, default ``cfg.card_dir``); return them.

    Raises ``LeakageError`` when a workload group would straddle splits."""
    from little_dragon import atomic, tracking
    from little_dragon.config import flat_params
    from little_dragon.datasets.build import build_datasets
    from little_dragon.datasets.card import PLOTS, write_card

    with tracking.stage_run("split", params=flat_params(cfg), inputs={"workloads": cfg.workloads}) as mlf:
        res = build_datasets(cfg)
        card = write_card(res.examples, res.stats, cfg, card_dir or cfg.card_dir)
        flat = {f"examples.{k}": v for k, v in res.stats["examples"].items()}
        for part in ("workloads", "harvest", "rendering", "tokens"):
            flat.update({f"{part}.{k}": v for k, v in res.stats[part].items()})
        if mlf is not None:
            mlf.log_metrics({k: float(v) for k, v in flat.items()})
            mlf.log_dict(res.stats, "dataset_stats.json")
            mlf.log_artifact(str(card))
            for p in PLOTS:
                mlf.log_artifact(str(card.parent / p))
            tracking.log_outputs(mlf, {"datasets": res.out_dir, "sealed": res.sealed_dir})
        if metrics_path:
            atomic.write_json(metrics_path, {k: v for k, v in res.stats.items()
                                             if k not in ("codec_errors", "excluded_examples")})
    return res
