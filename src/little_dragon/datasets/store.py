"""Reading and writing example sets (JSONL for TRL, parquet copies for analysis); loaders call the guard."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from little_dragon import atomic
from little_dragon.datasets.guard import assert_not_sealed

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


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line; bad JSON is an error naming file and line."""
    path = Path(path)
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from e


def read_jsonl_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    return [row for _, row in iter_jsonl(path)]


def read_examples(path: str | os.PathLike) -> pd.DataFrame:
    """A training/validation set (JSONL or parquet) as a DataFrame; refuses sealed files."""
    path = assert_not_sealed(path)
    if Path(path).suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.DataFrame(read_jsonl_rows(path), columns=None)
