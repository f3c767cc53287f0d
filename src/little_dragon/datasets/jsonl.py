"""JSON Lines reading: one object per line, bad JSON an error naming file and line.

Below both ``store`` (example sets) and ``guard`` (the sealed set's reader), so neither imports the other."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator


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
