"""The script language's formal grammar (Lark, LALR), generated from the kind table.

One rule per instruction kind (``k_<mnemonic>``) lists its fields in order, then its options and the
decision, so the grammar says exactly what each mnemonic takes; it can drive constrained decoding.
``grammar_text()`` is the grammar as text (docs/codec.md shows it); ``parser()`` is the cached parser.
"""
from __future__ import annotations

import functools

from little_dragon.codec.kinds import AT_FOLD, BY_KIND, SPECS, TILE_FOLD, KindSpec

FIELD_SYMBOL = {
    "b": "BREF", "l": "LREF", "v": "VREF", "bl": "ref_bl", "factor": "factor", "value": "value", "lit": "value",
    "name": "name", "key": "key", "thread": "thread", "int": "INT", "buf": "BUF", "map": "imap", "count": "INT",
}

# what a terminal or rule is, for error messages
HUMAN = {
    "BREF": "a block variable b<N>", "LREF": "a loop variable l<N>", "VREF": "a value variable v<N>",
    "INT": "an integer", "FLOAT": "a float", "STRING": 'a "string"', "NAME": "a name", "KEY": "an annotation key",
    "BUF": "a buffer r<i>/w<i>", "NONE": "_", "IDENT": "an index name", "LET": "a shared sub-expression $<k>",
    "SPAN": "a source span @line:col-end or @k", "SYM": "a tensor intrinsic $name", "DERIVED": "*",
    "VBAR": "| (the inverse map)", "_NL": "end of line",
    "$END": "end of script",
}

_COMMON = r"""
start: _NL* (inst _NL+)* inst?

ref_bl: BREF | LREF
factor: NONE | INT | VREF
value: INT | FLOAT | STRING | SYM | BREF | LREF | VREF | NONE | TRUE | FALSE | list
list: "[" value* "]"
name: NAME | STRING | SYM
key: KEY | NAME | STRING
thread: NAME | STRING
decision: "=" INT+
probs: "~" FLOAT+

imap: "{" [index ("," index)*] let* "->" [expr ("," expr)*] inverse? "}" I64? BANG?
inverse: "|" [index ("," index)*] let* "->" [expr ("," expr)*]
index: IDENT (SPAN STRING?)?
let: ";" LET "=" sum
?expr: sum
?sum: sum ADDOP product -> binop
    | product
?product: product MULOP atom -> binop
    | atom
?atom: IDENT -> ivar
    | INT -> iint
    | LET -> iref
    | "(" sum ")"
    | CALL "(" sum "," sum ")" -> icall
ADDOP: "+" | "-"
MULOP: "*" | "//" | "%"
CALL: "min" | "max"
I64: "i64"
LET: /\$[0-9]+/
SYM: /\$[A-Za-z_][A-Za-z0-9_]*/
DERIVED: "*"
SPAN: /@[0-9]+(:[0-9]+-[0-9]+(:[0-9]+)?)?/
BANG: "!"

TRUE: "true"
FALSE: "false"
NONE: "_"
BREF: /b[0-9]+/
LREF: /l[0-9]+/
VREF: /v[0-9]+/
BUF: /[rw][0-9]+/
INT: /-?[0-9]+/
FLOAT.2: /-?([0-9]+\.[0-9]*([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|inf)|nan/
STRING: /"([^"\\\n]|\\.)*"/
NAME: /[A-Za-z_][A-Za-z0-9_.]*/
KEY: /\.[A-Za-z_][A-Za-z0-9_.]*/
IDENT: /[A-Za-z_][A-Za-z0-9_]*/
_NL: /(\r?\n)+/
%ignore /[ \t]+/
"""


def _kind_rule(spec: KindSpec) -> str:
    parts = [f'"{spec.mnemonic}"']
    if spec.kind == "Reorder":  # `reorder *`: the multi-level tiling order, derived
        return f'{spec.rule}: "{spec.mnemonic}" (LREF+ | DERIVED)'
    for f in spec.fields:
        parts.append(FIELD_SYMBOL[f.type] + ("+" if f.variadic else ""))
    if spec.kind == "SampleCategorical":
        parts += ["(INT+ | NAME)", "probs?"]
    if spec.kind == "EnterPostproc":
        parts.append("DERIVED?")
    parts += [f"o_{o.name}?" for o in spec.options]
    if spec.decision:
        parts.append("decision?")
    return f"{spec.rule}: " + " ".join(parts)


def grammar_text() -> str:
    tile = BY_KIND["SamplePerfectTile"]
    inst = "?inst: " + "\n    | ".join([s.rule for s in SPECS] + [f"k_{TILE_FOLD}", f"k_{AT_FOLD}loc", "k_anncat"])
    # folded pairs: SamplePerfectTile + Split (the tile's options, a decision always),
    # SampleComputeLocation + ComputeAt (a block and a decision), SampleCategorical + Annotate
    fold = f'k_{TILE_FOLD}: "{TILE_FOLD}" LREF ' + " ".join(f"o_{o.name}?" for o in tile.options if o.name != "n")
    at_fold = f'k_{AT_FOLD}loc: "{AT_FOLD}" BREF decision'
    ann, cat = BY_KIND["Annotate"], BY_KIND["SampleCategorical"]
    ann_cat = (f'k_anncat: "{ann.mnemonic}" ' + " ".join(FIELD_SYMBOL[f.type] for f in ann.fields[:2])
               + f' "{cat.mnemonic}" (INT+ | NAME) probs? decision')
    kinds = "\n".join([_kind_rule(s) for s in SPECS] + [fold + " decision", at_fold, ann_cat])
    opts = sorted({o.name for s in SPECS for o in s.options})
    options = "\n".join(f'o_{n}: "{n}=" value' for n in opts)
    return f"{inst}\n{kinds}\n{options}\n{_COMMON}"


@functools.lru_cache(maxsize=1)
def parser():
    from lark import Lark

    return Lark(grammar_text(), parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=False)
