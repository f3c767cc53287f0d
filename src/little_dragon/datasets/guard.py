"""The sealed set's fence: training and validation loaders must refuse anything under a sealed folder.

A sealed folder holds a ``SEALED`` marker file next to ``manifest.json`` (the structural hashes of every
sealed workload). ``assert_not_sealed(path)`` looks for the marker in ``path`` and every folder above it,
and also compares against the configured sealed folder, so a copied or renamed sealed folder stays fenced.
Only evaluation code opens sealed files, through ``read_sealed`` (which says so in its name).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little_dragon.datasets.jsonl import read_jsonl_rows

SEALED_MARKER = "SEALED"
MANIFEST = "manifest.json"


class SealedDataError(PermissionError):
    """Training or validation code tried to read the sealed evaluation set."""


def _configured_sealed_dir() -> Path | None:
    try:
        from little_dragon.config import PROJECT_ROOT, load_section

        d = Path(load_section("datasets").sealed_dir)
        return (d if d.is_absolute() else PROJECT_ROOT / d).resolve()
    except Exception:  # no params file or no datasets section: the marker alone decides
        return None


def sealed_root_of(path: str | os.PathLike) -> Path | None:
    """The sealed folder that holds ``path`` (by marker or configuration), or None."""
    p = Path(path).resolve()
    for d in [p, *p.parents]:
        if (d / SEALED_MARKER).is_file():
            return d
    conf = _configured_sealed_dir()
    if conf is not None and (p == conf or conf in p.parents):
        return conf
    return None


def assert_not_sealed(path: str | os.PathLike) -> Path:
    """Raise ``SealedDataError`` if ``path`` lies in a sealed folder; returns the path otherwise."""
    root = sealed_root_of(path)
    if root is not None:
        raise SealedDataError(f"{path}: refused: this file belongs to the sealed evaluation set ({root}); "
                              f"training and validation code must never read it")
    return Path(path)


def read_manifest(sealed_dir: str | os.PathLike) -> dict[str, Any]:
    p = Path(sealed_dir) / MANIFEST
    if not p.is_file():
        raise FileNotFoundError(f"{p}: sealed manifest not found (run `dragon datasets build`)")
    m = json.loads(p.read_text())
    if "workloads" not in m:
        raise ValueError(f"{p}: not a sealed manifest (no 'workloads' list)")
    return m


def sealed_hashes(sealed_dir: str | os.PathLike) -> set[str]:
    return {str(w["structural_hash"]) for w in read_manifest(sealed_dir)["workloads"]}


# Modules allowed to open sealed files: the evaluation stage, the build that writes the set, and the examples
# quality gate that proves it does not leak.  Everything else (training, RL, generation, notebooks
# importing the package) is refused by ``read_sealed``.
ALLOWED_READERS = ("little_dragon.evaluation.", "little_dragon.datasets.", "little_dragon.quality.")


def _caller_module(depth: int) -> str:
    import sys

    return str(sys._getframe(depth + 1).f_globals.get("__name__", "?"))


def read_sealed(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Evaluation only: the rows of a sealed JSONL file.  Callers outside ``ALLOWED_READERS`` are refused."""
    caller = _caller_module(1)
    if not caller.startswith(ALLOWED_READERS):
        raise SealedDataError(f"{path}: refused: module {caller} may not read the sealed evaluation set "
                              f"(only {', '.join(a.rstrip('.') for a in ALLOWED_READERS)})")
    return read_jsonl_rows(path)
