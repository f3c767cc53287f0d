"""Parts of a trace that follow from the instructions before them, so a script may write ``*`` for them.

``reorder *``: MetaSchedule's multi-level tiling splits every loop of a block into as many tiles as its
iteration type has letters in the tiling structure (``S`` spatial, ``R`` reduction), then reorders all
tiles level by level in structure order (``SSRSRS``: the first spatial tiles of every spatial loop, the
second ones, the first reduction tiles, ...).  Given the last ``tiling_structure`` annotation and the run
of ``tile`` (SamplePerfectTile + Split) pairs right before the Reorder, that order is fixed.  The encoder
writes ``*`` only when this derivation gives exactly the Reorder's loops; the decoder derives them the
same way from what it decoded so far.
"""
from __future__ import annotations

import json
from typing import Any

from little_dragon.codec.kinds import TILING_KEY


def _tile_groups(insts: list) -> list[list[str]]:
    """Loops of the run of SamplePerfectTile + Split-by-its-values pairs that ends the instruction list."""
    groups: list[list[str]] = []
    i = len(insts)
    while i >= 2:
        tile, split = insts[i - 2], insts[i - 1]
        if not (tile[0] == "SamplePerfectTile" and split[0] == "Split"
                and split[1] == list(tile[1][:1]) + list(tile[3])):
            break
        groups.insert(0, list(split[3]))
        i -= 2
    return groups


def _structure(insts: list) -> str | None:
    for inst in reversed(insts):
        if inst[0] == "Annotate" and inst[2] == [TILING_KEY]:
            value = inst[1][1]
            if isinstance(value, str) and len(value) >= 2 and value[0] == '"':
                try:
                    return json.loads(value)
                except ValueError:
                    return None
            return None
    return None


def tiling_reorder(insts: list) -> list[str] | None:
    """The multi-level tiling order of the loops tiled right before the end of ``insts`` (TVM names), or
    None when there is no such tiling (or it is ambiguous: as many S as R levels)."""
    structure = _structure(insts)
    groups = _tile_groups(insts)
    if not structure or not groups or set(structure) - {"S", "R"}:
        return None
    n_s, n_r = structure.count("S"), structure.count("R")
    if n_s == n_r:
        return None
    kinds = []
    for g in groups:
        if len(g) == n_s:
            kinds.append("S")
        elif len(g) == n_r:
            kinds.append("R")
        else:
            return None
    level = {"S": 0, "R": 0}
    order: list[str] = []
    for c in structure:
        order += [g[level[c]] for g, k in zip(groups, kinds) if k == c]
        level[c] += 1
    return order


def reorder_is_derived(insts: list, reorder: Any) -> bool:
    """Is ``reorder`` (a Reorder instruction) exactly the tiling order of ``insts`` before it?"""
    order = tiling_reorder(insts)
    return order is not None and reorder[1] == order and reorder[2] == [] and reorder[3] == []
