"""Reading and writing example sets (JSONL for TRL, parquet copies for analysis); loaders call the guard."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon import atomic
from little_dragon.datasets.guard import assert_not_sealed
from little_dragon.datasets.jsonl import iter_jsonl, read_jsonl_rows

__all__ = ["EXAMPLE_COLUMNS", "iter_jsonl", "read_examples", "read_jsonl_rows", "write_examples"]

# What every example row carries (docs/data-contracts.md); the trainer needs only prompt + completion.
EXAMPLE_COLUMNS = [
    "prompt", "completion", "task", "workload_id", "target", "split", "family", "name", "structural_hash",
    "group", "kernel_rendering", "start_script", "start_latency_us", "start_trial", "completion_latency_us",
    "completion_trial", "best_latency_us", "baseline_us", "speedup", "speedup_vs_baseline", "prompt_tokens",
    "completion_tokens", "tvmscript",
]


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and v != v:
        return None  # NaN -> null (JSON has no NaN)
    if hasattr(v, "item"):
        return _jsonable(v.item())
    return v


def write_examples(dest_stem: str | os.PathLike, df: pd.DataFrame) -> dict[str, Path]:
    """``<stem>.jsonl`` (one object per line) and ``<stem>.parquet``, each written atomically."""
    stem = Path(dest_stem)
    df = df[EXAMPLE_COLUMNS].reset_index(drop=True)
    lines = [json.dumps({k: _jsonable(v) for k, v in row.items()}, sort_keys=False, ensure_ascii=False)
             for row in df.to_dict("records")]
    jsonl = stem.with_suffix(".jsonl")
    atomic.write_text(jsonl, "".join(line + "\n" for line in lines))
    parquet = stem.with_suffix(".parquet")
    atomic.write_parquet(parquet, df)
    return {"jsonl": jsonl, "parquet": parquet}


def read_examples(path: str | os.PathLike) -> pd.DataFrame:
    """A training/validation set (JSONL or parquet) as a DataFrame; refuses sealed files."""
    path = assert_not_sealed(path)
    if Path(path).suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.DataFrame(read_jsonl_rows(path), columns=None)
