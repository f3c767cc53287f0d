"""Folded pairs: two instructions MetaSchedule's rules always emit together, written as one script line.

Each fold is one ``Fold`` entry holding all four of its parts: when a pair folds (``matches``, encoder),
how the folded line is written (``write``, encoder), its grammar rule (``rule_text``, grammar.py) and how the
line is read back into the two instructions (``read``, decoder).  A pair is written folded only when it is
exactly the pair the rule emits (otherwise as two lines), so folding never loses information.

- ``tile L [m=M] = t1 .. tN``: SamplePerfectTile of L, then Split of L by its N values (multi-level tiling).
- ``at B = k``: SampleComputeLocation of B, then ComputeAt of B at the sampled loop (RandomComputeLocation).
- ``ann B KEY cat CANDS = k``: SampleCategorical, then Annotate of B with the sampled value (unroll and
  cooperative-fetch choices).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from little_dragon.codec.canonical import dumps
from little_dragon.codec.kinds import BY_KIND

Pairs = list[tuple[list, Any]]  # (instruction, decision) of each instruction a line stands for


def _same(a: Any, b: Any) -> bool:
    return dumps(a) == dumps(b)


def _pair(insts: list, by_index: dict[int, Any], i: int, first: str, second: str) -> tuple[list, list] | None:
    """Instructions i and i+1 when they are ``first`` then ``second`` (well-formed, the second undecided)."""
    a = insts[i]
    if i + 1 >= len(insts) or not (isinstance(a, list) and len(a) == 4 and a[0] == first):
        return None
    b = insts[i + 1]
    if not (isinstance(b, list) and len(b) == 4 and b[0] == second) or (i + 1) in by_index:
        return None
    return a, b


@dataclasses.dataclass(frozen=True)
class Fold:
    word: str  # the line's first word
    rule: str  # its grammar rule (the Lark tree's data)
    first: str  # the sampling instruction's kind
    second: str  # the kind that consumes the sample
    form: str  # how docs/codec.md names the line
    doc: str
    matches: Callable[[list, dict[int, Any], int], bool]  # encoder: do instructions i, i+1 fold?
    write: Callable[[str, str], str]  # encoder: (first's line, second's line) -> the folded line
    rule_text: Callable[[dict[str, str]], str]  # grammar: the rule, given grammar.FIELD_SYMBOL
    read: Callable[[Any, Any, int], Pairs]  # decoder: (decoder, tree, instruction index) -> both instructions


# ------------------------------------------------------------------------------- tile = ptile + split
def _tile_matches(insts: list, by_index: dict[int, Any], i: int) -> bool:
    """A SamplePerfectTile (with its decision) that the next instruction splits its loop by, exactly:
    Split(loop, *its values) with the usual attributes and as many loops out as values."""
    pair = _pair(insts, by_index, i, "SamplePerfectTile", "Split")
    if pair is None:
        return False
    a, b = pair
    d = by_index.get(i)
    if not (isinstance(d, list) and isinstance(a[1], list) and isinstance(a[3], list) and len(d) == len(a[3])):
        return False
    return (_same(b[1], list(a[1][:1]) + list(a[3])) and _same(b[2], [1, 0]) and isinstance(b[3], list)
            and len(b[3]) == len(a[3]))


def _tile_rule(field_symbol: dict[str, str]) -> str:
    tile = BY_KIND["SamplePerfectTile"]
    return ('k_tile: "tile" LREF ' + " ".join(f"o_{o.name}?" for o in tile.options if o.name != "n")
            + " decision")


def _tile_read(dec: Any, tree: Any, index: int) -> Pairs:
    tile, decision = dec.instruction(tree, index, BY_KIND["SamplePerfectTile"])
    split = ["Split", tile[1] + tile[3], [1, 0], dec.define("l", len(tile[3]))]
    return [(tile, decision), (split, None)]


# ----------------------------------------------------------------------------- at = loc + compute-at
def _at_matches(insts: list, by_index: dict[int, Any], i: int) -> bool:
    """A SampleComputeLocation (with its decision) of a block that the next instruction computes at the
    sampled loop, with ComputeAt's usual options."""
    pair = _pair(insts, by_index, i, "SampleComputeLocation", "ComputeAt")
    if pair is None:
        return False
    a, b = pair
    return (type(by_index.get(i)) is int and isinstance(a[1], list) and isinstance(a[3], list) and len(a[3]) == 1
            and _same(b[1], list(a[1]) + list(a[3])) and _same(b[2], [1, -1]) and _same(b[3], []))


def _at_read(dec: Any, tree: Any, index: int) -> Pairs:
    loc, decision = dec.instruction(tree, index, BY_KIND["SampleComputeLocation"])
    return [(loc, decision), (["ComputeAt", loc[1] + loc[3], [1, -1], []], None)]


# ------------------------------------------------------------------------ ann … cat = cat + annotate
def _cat_ann_matches(insts: list, by_index: dict[int, Any], i: int) -> bool:
    """A SampleCategorical (with its decision) whose value the next instruction annotates."""
    pair = _pair(insts, by_index, i, "SampleCategorical", "Annotate")
    if pair is None:
        return False
    a, b = pair
    return (type(by_index.get(i)) is int and isinstance(a[3], list) and len(a[3]) == 1
            and isinstance(b[1], list) and len(b[1]) == 2 and b[1][1] == a[3][0] and _same(b[3], []))


def _cat_ann_rule(field_symbol: dict[str, str]) -> str:
    ann, cat = BY_KIND["Annotate"], BY_KIND["SampleCategorical"]
    return (f'k_anncat: "{ann.mnemonic}" ' + " ".join(field_symbol[f.type] for f in ann.fields[:2])
            + f' "{cat.mnemonic}" (INT+ | NAME) probs? decision')


def _cat_ann_read(dec: Any, tree: Any, index: int) -> Pairs:
    from lark import Tree

    target, key = tree.children[:2]
    cat_tree = Tree("k_cat", tree.children[2:], tree.meta)
    cat, decision = dec.instruction(cat_tree, index, BY_KIND["SampleCategorical"])
    ann = ["Annotate", [dec.field("bl", target, "in"), cat[3][0]], [dec.field("key", key, "at")], []]
    return [(cat, decision), (ann, None)]


def _replace_word(word: str, kind: str) -> Callable[[str, str], str]:
    mnemonic = BY_KIND[kind].mnemonic
    return lambda first, second: word + first[len(mnemonic):]


FOLDS: tuple[Fold, ...] = (
    Fold("tile", "k_tile", "SamplePerfectTile", "Split", "tile", "`tile L [m=M] = t1 .. tN`: SamplePerfectTile of "
         "L followed by Split of L by the N sampled values (defines N values, then N loops)",
         _tile_matches, _replace_word("tile", "SamplePerfectTile"), _tile_rule, _tile_read),
    Fold("at", "k_atloc", "SampleComputeLocation", "ComputeAt", "at … =", "`at B = k`: SampleComputeLocation of B "
         "(decision k) followed by ComputeAt of B at the sampled loop (defines one loop)",
         _at_matches, _replace_word("at", "SampleComputeLocation"), lambda fs: 'k_atloc: "at" BREF decision',
         _at_read),
    # `ann B KEY v<k>` + `cat ...` -> `ann B KEY cat ...`: the annotate line without its value, then the cat line
    Fold(BY_KIND["Annotate"].mnemonic, "k_anncat", "SampleCategorical", "Annotate", "ann … cat",
         "`ann B KEY cat c1 .. cN = k` (or a named list): SampleCategorical (decision k) followed by Annotate of B "
         "with the sampled value (defines one value)",
         _cat_ann_matches, lambda first, second: second.rsplit(" ", 1)[0] + " " + first, _cat_ann_rule,
         _cat_ann_read),
)
BY_RULE: dict[str, Fold] = {f.rule: f for f in FOLDS}


def fold_at(insts: list, by_index: dict[int, Any], i: int, end: int) -> Fold | None:
    """The fold instructions i and i+1 form (both before ``end``), if any."""
    if i + 1 >= end:
        return None
    return next((f for f in FOLDS if f.matches(insts, by_index, i)), None)
