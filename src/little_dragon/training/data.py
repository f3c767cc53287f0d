"""The SFT sets as TRL prompt/completion datasets, with both tasks mixed at a configured ratio.

Prompts are read as the dataset stage wrote them (template: ``little_dragon.datasets.prompts``)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

TASKS = ("construction", "refinement")
REQUIRED = ("prompt", "completion", "task", "workload_id")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a prompt/completion JSONL set; a malformed row is an error naming the file and line.

    A file of the sealed evaluation set is refused before it is opened (``SealedDataError``)."""
    from little_dragon.datasets.guard import assert_not_sealed
    from little_dragon.datasets.jsonl import iter_jsonl

    path = assert_not_sealed(path)
    rows = []
    for lineno, row in iter_jsonl(path):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ValueError(f"{path}:{lineno}: row of workload {row.get('workload_id')!r} lacks {missing}")
        if row["task"] not in TASKS:
            raise ValueError(f"{path}:{lineno}: workload {row['workload_id']}: unknown task {row['task']!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def mix_tasks(rows: list[dict[str, Any]], construction_fraction: float | None, seed: int) -> list[dict[str, Any]]:
    """Subsample so construction rows make up ``construction_fraction`` of the result (None: keep all).

    Never repeats a row: the largest mix with that ratio that the rows allow, shuffled deterministically."""
    rng = random.Random(seed)
    by_task = {t: [r for r in rows if r["task"] == t] for t in TASKS}
    if construction_fraction is None:
        out = list(rows)
    else:
        f = construction_fraction
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"construction_fraction must be in [0, 1], got {f}")
        n_c, n_r = len(by_task["construction"]), len(by_task["refinement"])
        total = min(n_c / f if f > 0 else float("inf"), n_r / (1 - f) if f < 1 else float("inf"))
        k_c = min(n_c, round(f * total))
        k_r = min(n_r, round((1 - f) * total))
        out = rng.sample(by_task["construction"], k_c) + rng.sample(by_task["refinement"], k_r)
    rng.shuffle(out)
    return out


def to_dataset(rows: list[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` with just the columns TRL needs (extra columns would reach the collator)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [r["prompt"] for r in rows],
                              "completion": [r["completion"] for r in rows]})


def task_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {t: sum(r["task"] == t for r in rows) for t in TASKS}
