"""The ``split`` stage: workloads + harvests -> train/validation sets, the sealed set and its manifest.

Outputs (docs/data-contracts.md):
  <out_dir>/train.{jsonl,parquet}, validation.{jsonl,parquet}, stats.json, splits.parquet
  <sealed_dir>/SEALED, manifest.json, test.{jsonl,parquet}, heldout_families.{jsonl,parquet}, workloads.parquet
Both folders are replaced whole and atomically; the leakage check runs before anything is written.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon import atomic
from little_dragon.datasets.config import DatasetsConfig
from little_dragon.datasets.examples import BuildCounts, all_workloads, build_raw_examples, find_harvests
from little_dragon.datasets.guard import MANIFEST, SEALED_MARKER
from little_dragon.datasets.render import RenderCounts, render_examples
from little_dragon.datasets.split import SEALED_SPLITS, SPLITS, assign_splits, check_no_leakage
from little_dragon.datasets.store import write_examples
from little_dragon.datasets.tokens import TokenCounter, load_counter

log = logging.getLogger(__name__)

SEALED_README = """This folder is the SEALED evaluation set of Little Dragon.

Training and validation code must never read it: `little_dragon.datasets.guard.assert_not_sealed(path)`
refuses any path under a folder holding this SEALED file. manifest.json lists the structural hash of
every sealed workload; the `split` stage and the `examples` quality gate prove that none of them (and no
workload of the same family and shape class) appears in train or validation.
"""


@dataclasses.dataclass
class BuildResult:
    out_dir: Path
    sealed_dir: Path
    stats: dict[str, Any]
    examples: pd.DataFrame  # every example, all splits


def sealed_manifest(assignment: pd.DataFrame, workloads: pd.DataFrame, cfg: DatasetsConfig) -> dict[str, Any]:
    sealed = assignment[assignment["split"].isin(SEALED_SPLITS)].merge(
        workloads[["workload_id", "name"]], on="workload_id")
    return {
        "seed": cfg.seed, "sealed_fraction": cfg.sealed_fraction, "heldout_families": list(cfg.heldout_families),
        "shape_bucket_base": cfg.shape_bucket_base,
        "workloads": [{"structural_hash": str(r.structural_hash), "workload_id": r.workload_id,
                       "family": r.family, "name": r.name, "group": r.group, "slice": r.split}
                      for r in sealed.sort_values("workload_id").itertuples()],
    }


def _counts_by(df: pd.DataFrame, *cols: str) -> dict[str, int]:
    if df.empty:
        return {}
    return {"/".join(map(str, k if isinstance(k, tuple) else (k,))): int(v)
            for k, v in df.groupby(list(cols)).size().items()}


def build_datasets(cfg: DatasetsConfig, counter: TokenCounter | None = None) -> BuildResult:
    unknown = sorted(set(cfg.tasks) - {"construction", "refinement"})
    if unknown or len(cfg.refinement_start_quantiles) != 2:
        raise ValueError(f"datasets: tasks {unknown} unknown (construction, refinement) or "
                         f"refinement_start_quantiles {cfg.refinement_start_quantiles} is not [low, high]")
    harvests = find_harvests(cfg.harvest_roots)
    if not harvests:
        raise FileNotFoundError(f"no harvest (records.parquet) under any of {cfg.harvest_roots}")
    workloads = all_workloads(cfg.workloads, harvests)
    assignment = assign_splits(workloads, cfg)
    raw, build_counts = build_raw_examples(workloads, harvests, cfg)
    counter = counter or load_counter(cfg.tokenizer)
    examples, render_counts = render_examples(raw, workloads, counter, cfg)
    meta = workloads[["workload_id", "family", "name", "tvmscript"]].merge(
        assignment[["workload_id", "structural_hash", "group", "split"]], on="workload_id")
    examples = examples.merge(meta, on="workload_id", how="left", validate="many_to_one")
    examples["structural_hash"] = examples["structural_hash"].astype(str)

    manifest = sealed_manifest(assignment, workloads, cfg)
    training = examples[examples["split"].isin(("train", "validation"))]
    check_no_leakage(training, manifest, where=f"{cfg.out_dir}")  # before anything is written

    out, sealed_dir = Path(cfg.out_dir), Path(cfg.sealed_dir)
    stats = dataset_stats(examples, assignment, build_counts, render_counts, counter, cfg, len(harvests))
    with atomic.atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        for split in ("train", "validation"):
            write_examples(tmp / split, examples[examples["split"] == split])
        atomic.write_parquet(tmp / "splits.parquet", assignment)
        atomic.write_json(tmp / "stats.json", stats)
    with atomic.atomic_path(sealed_dir) as tmp:
        tmp.mkdir(parents=True)
        (tmp / SEALED_MARKER).write_text(SEALED_README)
        atomic.write_json(tmp / MANIFEST, manifest)
        write_examples(tmp / "test", examples[examples["split"] == "sealed"])
        write_examples(tmp / "heldout_families", examples[examples["split"] == "heldout_family"])
        sealed_ids = [w["workload_id"] for w in manifest["workloads"]]
        atomic.write_parquet(tmp / "workloads.parquet", workloads[workloads["workload_id"].isin(sealed_ids)]
                             .merge(assignment[["workload_id", "group", "split"]], on="workload_id"))
    log.info("datasets: %s", json.dumps(stats["examples"]))
    return BuildResult(out, sealed_dir, stats, examples)


def dataset_stats(examples: pd.DataFrame, assignment: pd.DataFrame, build: BuildCounts, render: RenderCounts,
                  counter: TokenCounter, cfg: DatasetsConfig, n_targets: int) -> dict[str, Any]:
    ex = {f"{s}_{t}": int(((examples["split"] == s) & (examples["task"] == t)).sum())
          for s in SPLITS for t in ("construction", "refinement")}
    ref = examples[examples["task"] == "refinement"]
    return {
        "tokenizer": counter.name, "context_tokens": cfg.context_tokens, "targets": n_targets,
        "examples": {"total": len(examples), **ex},
        "workloads": {s: int((assignment["split"] == s).sum()) for s in SPLITS},
        "groups": {s: int(assignment.loc[assignment["split"] == s, "group"].nunique()) for s in SPLITS},
        "workloads_with_examples": int(examples["workload_id"].nunique()),
        "harvest": {k: v for k, v in dataclasses.asdict(build).items() if k != "codec_errors"},
        "codec_errors": build.codec_errors,
        "rendering": {"full": render.full, "compact": render.compact,
                      "excluded_overlong": render.excluded_overlong},
        "excluded_examples": render.excluded_examples,
        "tokens": {
            "prompt_max": int(examples["prompt_tokens"].max()) if len(examples) else 0,
            "prompt_mean": float(examples["prompt_tokens"].mean()) if len(examples) else 0.0,
            "completion_max": int(examples["completion_tokens"].max()) if len(examples) else 0,
            "completion_mean": float(examples["completion_tokens"].mean()) if len(examples) else 0.0,
        },
        "refinement_speedup": {
            "min": float(ref["speedup"].min()) if len(ref) else None,
            "median": float(ref["speedup"].median()) if len(ref) else None,
            "max": float(ref["speedup"].max()) if len(ref) else None,
        },
        "by_family_task": _counts_by(examples, "family", "task"),
    }
