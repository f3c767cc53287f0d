"""The script language's formal grammar (Lark, LALR), generated from the kind table.

One rule per instruction kind (``k_<mnemonic>``) lists its fields in order, then its options and the
decision, so the grammar says exactly what each mnemonic takes; it can drive constrained decoding.
``grammar_text()`` is the grammar as text (docs/codec.md shows it); ``parser()`` is the cached parser;
``parse(text)`` parses a script and turns Lark's exceptions into ``DecodeError`` (line, column, what was
expected in words, what was found), beside the grammar whose symbols those words describe.
"""
from __future__ import annotations

import functools
from typing import Any

from little_dragon.codec.errors import DecodeError
from little_dragon.codec.folds import FOLDS
from little_dragon.codec.kinds import BY_MNEMONIC, SPECS, KindSpec

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
    # one rule per kind, then one per folded pair (folds.FOLDS: each fold's rule lives in its table entry)
    inst = "?inst: " + "\n    | ".join([s.rule for s in SPECS] + [f.rule for f in FOLDS])
    kinds = "\n".join([_kind_rule(s) for s in SPECS] + [f.rule_text(FIELD_SYMBOL) for f in FOLDS])
    opts = sorted({o.name for s in SPECS for o in s.options})
    options = "\n".join(f'o_{n}: "{n}=" value' for n in opts)
    return f"{inst}\n{kinds}\n{options}\n{_COMMON}"


@functools.lru_cache(maxsize=1)
def parser():
    from lark import Lark

    return Lark(grammar_text(), parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=False)


# ------------------------------------------------------------------------- syntax errors, in words
def parse(text: str) -> Any:
    """Script text -> Lark tree (raises DecodeError with line/column/expected/found)."""
    from lark.exceptions import UnexpectedInput

    if not isinstance(text, str):
        raise DecodeError(f"a script is text, got {type(text).__name__}")
    if text and not text.endswith("\n"):
        text += "\n"
    try:
        return _parsed(text)
    except UnexpectedInput as e:
        raise _lark_error(e, text) from None


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> Any:
    """``text``'s tree, kept for the next parse of the same text (the constraint's end check decodes one script up to
    four times: the check, its `post *` derivation, its lines, its kinds).  Nothing mutates a tree (the decoder reads
    it); a text that does not parse raises, and is not kept."""
    return parser().parse(text)


def _describe(tokens: Any) -> str:
    names = sorted({HUMAN.get(t, t.strip('"').lower() if t.isupper() else t) for t in tokens})
    if len(names) > 12:
        names = names[:12] + ["..."]
    return " or ".join(names) if names else "nothing"


def _lark_error(e: Exception, text: str) -> DecodeError:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    if isinstance(e, UnexpectedToken):
        tok = e.token
        found = "end of line" if tok.type == "_NL" else ("end of script" if tok.type == "$END" else repr(str(tok)))
        expected = _expected_names(e)
        line = tok.line if tok.line is not None else text.count("\n") + 1
        col = tok.column if tok.column is not None else 1
        return DecodeError("syntax error", line=line, column=col, expected=expected, found=found)
    if isinstance(e, UnexpectedCharacters):
        found = repr(text[e.pos_in_stream:e.pos_in_stream + 12].split("\n")[0])
        return DecodeError("syntax error", line=e.line, column=e.column, expected=_describe(e.allowed or ()),
                           found=found)
    if isinstance(e, UnexpectedEOF):
        return DecodeError("unexpected end of script", line=text.count("\n") + 1, column=1,
                           expected=_describe(e.expected), found="end of script")
    return DecodeError(f"syntax error: {e}", line=1, column=1)


def _expected_names(e: Any) -> str:
    names = []
    for t in sorted(e.expected):
        if t.startswith("K_") or t.isupper() and t.lower() in BY_MNEMONIC:
            continue
        names.append(t)
    mnemonics = [t for t in e.expected if t.lower() in BY_MNEMONIC]
    out = _describe(names)
    if mnemonics:
        out = (out + " or " if names else "") + "an instruction mnemonic"
    return out
