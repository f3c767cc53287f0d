"""Split workloads into train / validation / sealed test by *groups* of near-duplicates.

A group is one family plus one shape class: every integer shape parameter bucketed to
``round(log_base(value))`` (dtype and string options such as the activation are ignored on purpose, so a
float16 and an int8 kernel of the same shape land together). Whole groups go to one split, so no
near-duplicate of a sealed kernel is ever trained on. Families listed in ``heldout_families`` go whole to
the ``heldout_family`` slice of the sealed set.

The remaining groups are ordered by a seeded hash of their key (not by position in the store), and the first
``sealed_fraction`` of them are sealed, the next ``validation_fraction`` validation, the rest train: the
same seed and workloads always give the same split, and adding workloads moves only groups at the
boundaries, never reshuffles the rest.
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pandas as pd

from little_dragon.datasets.config import DatasetsConfig

SPLITS = ("train", "validation", "sealed", "heldout_family")
SEALED_SPLITS = ("sealed", "heldout_family")


def shape_class(shapes_json: str, base: float = 2.0) -> str:
    """``k=bucket`` for every integer shape parameter (sorted); strings and floats are not part of it."""
    try:
        shapes = json.loads(shapes_json) if shapes_json else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"shapes {shapes_json!r}: not JSON: {e}") from e
    parts = []
    for k in sorted(shapes):
        v = shapes[k]
        if isinstance(v, bool) or not isinstance(v, int):
            continue
        parts.append(f"{k}={round(math.log(v, base)) if v > 0 else v}")
    return ",".join(parts)


def group_key(row: dict[str, Any], base: float = 2.0) -> str:
    sc = shape_class(row.get("shapes") or "", base)
    # a kernel without integer shape parameters (some graph tasks) is its own group
    return f"{row['family']}|{sc}" if sc else f"{row['family']}|#{row['structural_hash']}"


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def assign_splits(workloads: pd.DataFrame, cfg: DatasetsConfig) -> pd.DataFrame:
    """``workload_id, structural_hash, family, group, split`` for every workload (deterministic)."""
    if not 0 <= cfg.sealed_fraction < 1 or not 0 <= cfg.validation_fraction < 1 or \
            cfg.sealed_fraction + cfg.validation_fraction >= 1:
        raise ValueError(f"datasets: sealed_fraction {cfg.sealed_fraction} + validation_fraction "
                         f"{cfg.validation_fraction} must leave a training share")
    rows = workloads[["workload_id", "structural_hash", "family", "shapes"]].to_dict("records")
    for r in rows:
        r["group"] = group_key(r, cfg.shape_bucket_base)
    heldout = set(cfg.heldout_families)
    groups = sorted({r["group"] for r in rows if r["family"] not in heldout}, key=lambda g: _rank(cfg.seed, g))
    n = len(groups)
    n_sealed = round(n * cfg.sealed_fraction)
    n_val = round(n * cfg.validation_fraction)
    if n >= 3:  # a requested share never rounds away to nothing while there is room for all three splits
        n_sealed = max(n_sealed, 1 if cfg.sealed_fraction > 0 else 0)
        n_val = max(n_val, 1 if cfg.validation_fraction > 0 else 0)
    split_of = {g: ("sealed" if i < n_sealed else "validation" if i < n_sealed + n_val else "train")
                for i, g in enumerate(groups)}
    for r in rows:
        r["split"] = "heldout_family" if r["family"] in heldout else split_of[r["group"]]
    out = pd.DataFrame(rows, columns=["workload_id", "structural_hash", "family", "group", "split"])
    return out.sort_values("workload_id").reset_index(drop=True)


class LeakageError(AssertionError):
    """A sealed workload (or a near-duplicate of one) in a training or validation set."""


def check_no_leakage(training: pd.DataFrame, manifest: dict[str, Any], where: str) -> None:
    """Raise if any row of ``training`` (columns structural_hash, group, workload_id) is sealed.

    Checks structural hashes (the same kernel) and groups (a near-duplicate)."""
    sealed_hashes = {w["structural_hash"] for w in manifest["workloads"]}
    sealed_groups = {w["group"] for w in manifest["workloads"]}
    if training.empty:
        return
    hash_leak = training[training["structural_hash"].astype(str).isin(sealed_hashes)]
    group_leak = training[training["group"].isin(sealed_groups)]
    problems = []
    for kind, df in (("structural hash", hash_leak), ("group", group_leak)):
        if len(df):
            first = df.drop_duplicates("workload_id").head(5)
            names = ", ".join(f"{r.workload_id} ({r.group})" for r in first.itertuples())
            problems.append(f"{df['workload_id'].nunique()} workload(s) share a sealed {kind}: {names}")
    if problems:
        raise LeakageError(f"{where}: sealed leakage: " + "; ".join(problems))
