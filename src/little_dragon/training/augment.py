"""Renamed copies of training rows: the same kernel and script with fresh block names.

A block's name is a label: renaming it consistently in the kernel's TVMScript (block, buffer and parameter
of that name) and in the scripts (``blk <name>`` lines) gives an equivalent kernel, on which the renamed
script applies exactly as the original did (``tests/training/test_augment.py`` checks this with TVM).

Why: a model trained from scratch on a few dozen workloads memorises each workload's script instead of
reading the prompt, so it writes nothing valid for a kernel it has not seen.  With names that differ in
every copy, the only way to predict a ``blk`` line is to copy the name from the prompt, which teaches the
copying that refinement needs (the previous script's structure is the answer's).
"""
from __future__ import annotations

import random
import re
from typing import Any

SBLOCK = re.compile(r'T\.sblock\("([A-Za-z_][A-Za-z0-9_]*)"\)')
# fixed names: the root block, and words of the script language / TVMScript a rename must never produce
RESERVED = {"root", "main", "Module", "T", "I", "global", "shared", "local"}
TEXT_KEYS = ("prompt", "completion", "tvmscript", "start_script")  # the row's texts that hold block names
STEMS = ("acc", "buf", "out", "tmp", "stage", "red", "prod", "sum", "res", "val", "blk", "op", "mid", "pre",
         "post", "x", "y", "z", "data", "work", "part", "step", "cell", "node", "unit", "tile")


def block_names(tvmscript: str) -> list[str]:
    """The kernel's block names in order of appearance, without ``root``."""
    out: list[str] = []
    for name in SBLOCK.findall(tvmscript):
        if name not in out and name not in RESERVED:
            out.append(name)
    return out


def _word(name: str) -> re.Pattern[str]:
    # a whole identifier, not an attribute (T.name) and not part of a longer identifier
    return re.compile(rf"(?<![A-Za-z0-9_.]){re.escape(name)}(?![A-Za-z0-9_])")


def _stem(name: str) -> re.Pattern[str]:
    # the name as a whole identifier or as the stem of one that schedules derive from it (``X_update`` of
    # decompose_reduction, ``X_local`` of cache_write): scripts refer to those blocks by the derived name
    return re.compile(rf"(?<![A-Za-z0-9_.]){re.escape(name)}(?![A-Za-z0-9])")


def rename(text: str, mapping: dict[str, str]) -> str:
    """Replace each key, as a whole identifier or the stem of one (``key_suffix``), by its value, at once;
    longer keys first, so a block ``X_1`` is not read as the stem ``X`` plus ``_1``."""
    if not mapping:
        return text
    pattern = re.compile("|".join(f"(?:{_stem(k).pattern})" for k in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda m: mapping[m.group(0)], text)


def fresh_names(names: list[str], taken: str, rng: random.Random) -> dict[str, str]:
    """New identifiers for ``names``, none of which occurs anywhere in ``taken`` (the row's text)."""
    mapping: dict[str, str] = {}
    used = set(RESERVED)
    for name in names:
        while True:
            new = f"{rng.choice(STEMS)}_{rng.choice(STEMS)}{rng.randrange(100)}"
            if new not in used and not _word(new).search(taken):
                break
        used.add(new)
        mapping[name] = new
    return mapping


def renamed_row(row: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """A copy of ``row`` with fresh block names (None if its kernel has no named block to rename)."""
    kernel = row.get("tvmscript") or row["prompt"]
    names = block_names(kernel)
    if not names:
        return None
    taken = "\n".join(str(row.get(k) or "") for k in TEXT_KEYS)
    mapping = fresh_names(names, taken, rng)
    out = dict(row)
    for key in TEXT_KEYS:
        if out.get(key):
            out[key] = rename(out[key], mapping)
    out["structural_hash"] = None  # block names are part of the structural hash; the kernel's is not this
    out["renamed_from"] = row.get("workload_id")
    return out


def with_renamed_copies(rows: list[dict[str, Any]], copies: int, seed: int) -> list[dict[str, Any]]:
    """``rows`` and ``copies`` renamed copies of each, shuffled together deterministically."""
    if copies <= 0:
        return list(rows)
    rng = random.Random(seed)
    extra = [r2 for _ in range(copies) for r in rows if (r2 := renamed_row(r, rng)) is not None]
    out = list(rows) + extra
    rng.shuffle(out)
    return out
