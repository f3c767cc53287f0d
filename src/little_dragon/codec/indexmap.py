"""IndexMaps as compact lambdas: ``{i0,i1->i0//16,i1%16}`` instead of TVM's JSON object graphs.

The encoder reads TVM's serialized IndexMap (the ``tvm.ir.save_json`` graph) without TVM; the decoder
rebuilds the IndexMap with TVM's node constructors (no simplification) and serializes it again, which
reproduces the original text: variables are shared objects, every other node is fresh, as TVM builds them
(the encoder checks this and refuses maps it could not reproduce).  Free variables of a map are trace
variables (TVM substitutes sampled tile sizes into layout maps); scripts write them with script names.
A sub-expression that TVM shares between several places (one object, e.g. ``i0//16`` used by both a
``//`` and a ``%``) is bound once, ``{i0,i1;$0=i0//16->$0//4,$0%4}``, so the object graph is rebuilt exactly.
Source spans: indices of maps that MetaSchedule takes from a block of a TVMScript-parsed workload (the
tensor-core ``ReIndex``/``TransformLayout``/``TransformBlockLayout`` maps) keep the block iteration variables'
``Span``, so the serialized graph holds it.  An index writes its span after ``@``: ``v_i@17:21-56`` (line 17,
columns 21 to 56; ``@17:21-18:4`` when it ends on another line; a quoted source name follows when it is not
``"<str>"``), and an index carrying the same span object as the k-th span written earlier in the map writes
``@k``: ``{v_i@17:21-56,v_j@0,v_k->v_i,v_j,v_k}``.
Inverse maps: MetaSchedule's RewriteLayout post-processor stores the inverse with the map (TVM serializes it
as ``inverse_index_map``); it follows the forward body after ``|`` in the same notation, with its own indices,
spans and ``$k`` bindings (a separate scope: TVM builds the inverse's indices as new variables, often with the
same names): ``{i0,i1,i2->i1//4,i1%4,i2|i0,i1,i2->0,i0*4+i1,i2}``.  Free variables are the same objects in
both parts.
Suffixes: ``i64`` when the indices are int64; ``!`` when the JSON text is compact rather than indented
(a database stores indented maps; a live trace's ``as_json()`` may hold compact ones).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any, Callable

from little_dragon.codec.errors import EncodeError

BINOPS = {"prim.Add": "+", "prim.Sub": "-", "prim.Mul": "*", "prim.FloorDiv": "//", "prim.FloorMod": "%"}
CALLS = {"prim.Min": "min", "prim.Max": "max"}
PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}

_RV_RE = re.compile(r"([blv])([0-9]+)\Z")  # a script variable name
DEFAULT_SOURCE = "<str>"  # TVMScript's source name for parsed text
SpanT = tuple  # (source_name, line, column, end_line, end_column), as TVM serializes an ir.Span
Expr = tuple  # ("var", name) | ("int", value) | ("ref", k) | (op, lhs, rhs) op in PREC | ("min"|"max", a, b)


@dataclasses.dataclass(frozen=True)
class Lambda:
    params: tuple[str, ...]
    body: tuple[Expr, ...]
    dtype: str = "int32"
    pretty: bool = False  # the JSON text is indented (2 spaces) rather than compact
    lets: tuple[Expr, ...] = ()  # shared sub-expressions, referenced as ("ref", k)
    spans: tuple[SpanT, ...] = ()  # distinct Span objects of the indices, in order of first use
    param_spans: tuple[int, ...] = ()  # per index: its span (index into ``spans``) or -1; () when none has one
    inverse: "Lambda | None" = None  # the stored inverse map (same dtype; its own pretty flag is unused)


# ------------------------------------------------------------------------------- printer (encoder)
def parse_graph(text: str) -> Lambda:
    """TVM's serialized IndexMap -> Lambda (free variables keep their TVM names)."""
    try:
        graph = json.loads(text)
        nodes = graph["nodes"]
        root = nodes[graph["root_index"]]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise EncodeError(f"not a serialized IndexMap: {e}") from e
    dtypes: set[str] = set()
    lam = _parse_map(nodes, root, dtypes, allow_inverse=True)
    if len(dtypes) > 1:
        raise EncodeError(f"IndexMap mixes index dtypes {sorted(dtypes)}")
    dtype = dtypes.pop() if dtypes else "int32"
    inverse = lam.inverse and dataclasses.replace(lam.inverse, dtype=dtype)
    return dataclasses.replace(lam, dtype=dtype, pretty=text.startswith("{\n"), inverse=inverse)


def _parse_map(nodes: list[dict], root: dict, dtypes: set[str], allow_inverse: bool) -> Lambda:
    """One IndexMap node (and its inverse, when allowed) -> Lambda; index dtypes are collected in ``dtypes``."""
    if root.get("type") != "tirx.IndexMap":
        raise EncodeError(f"expected a tirx.IndexMap, found {root.get('type')}")
    inverse_node = nodes[root["data"]["inverse_index_map"]]
    inverse = None
    if inverse_node.get("type") != "None":
        if not allow_inverse:
            raise EncodeError("the inverse of an IndexMap's inverse map is not supported")
        inverse = _parse_map(nodes, inverse_node, dtypes, allow_inverse=False)

    def dtype_of(node: dict) -> None:
        dtypes.add(nodes[node["data"]["ty"]]["data"]["dtype"])

    def no_span(node: dict, what: str) -> None:
        span = node["data"].get("span")
        if span is not None and nodes[span].get("type") != "None":
            raise EncodeError(f"IndexMap {what} ({node['type']}) carries a source span; only indices may")

    # nodes referenced from more than one place are shared objects: bind them once
    uses: dict[int, int] = {}

    def count(i: int) -> None:
        uses[i] = uses.get(i, 0) + 1
        if uses[i] > 1:
            return
        t, d = nodes[i]["type"], nodes[i].get("data")
        if t in BINOPS or t in CALLS:
            count(d["a"])
            count(d["b"])

    data = root["data"]
    for i in nodes[data["final_indices"]]["data"]:
        count(i)
    shared = sorted(i for i, n in uses.items() if n > 1 and nodes[i]["type"] != "ir.Var")
    let_index = {i: k for k, i in enumerate(shared)}

    def expr(i: int, top: bool = False) -> Expr:
        if i in let_index and not top:
            return ("ref", let_index[i])
        node = nodes[i]
        t, d = node["type"], node.get("data")
        if t == "ir.Var":
            dtype_of(node)
            if i not in param_nodes:
                no_span(node, "free variable")
            return ("var", nodes[d["name"]]["data"])
        if t == "ir.IntImm":
            dtype_of(node)
            no_span(node, "constant")
            return ("int", int(nodes[d["value"]]["data"]))
        if t in BINOPS or t in CALLS:
            dtype_of(node)
            no_span(node, "expression")
            return ((BINOPS | CALLS)[t], expr(d["a"]), expr(d["b"]))
        raise EncodeError(f"IndexMap expression node {t} is not supported")

    param_nodes = list(nodes[data["initial_indices"]]["data"])
    if any(nodes[i].get("type") != "ir.Var" for i in param_nodes):
        raise EncodeError("IndexMap initial indices must be variables")
    params = tuple(expr(i) for i in param_nodes)
    spans, param_spans = _param_spans(nodes, param_nodes)
    body = tuple(expr(i) for i in nodes[data["final_indices"]]["data"])
    lets = tuple(expr(i, top=True) for i in shared)
    return Lambda(tuple(p[1] for p in params), body, lets=lets, spans=spans, param_spans=param_spans,
                  inverse=inverse)


def _param_spans(nodes: list[dict], param_nodes: list[int]) -> tuple[tuple[SpanT, ...], tuple[int, ...]]:
    """The indices' Span objects: distinct span nodes in order of first use, and each index's span."""
    span_nodes: list[int] = []
    per_param: list[int] = []
    for i in param_nodes:
        s = nodes[i]["data"].get("span")
        if s is None or nodes[s].get("type") == "None":
            per_param.append(-1)
            continue
        if nodes[s].get("type") != "ir.Span":
            raise EncodeError(f"IndexMap index span is a {nodes[s].get('type')}, not an ir.Span")
        if s not in span_nodes:
            span_nodes.append(s)
        per_param.append(span_nodes.index(s))
    spans = []
    for s in span_nodes:
        d = nodes[s]["data"]
        source = nodes[d["source_name"]]
        if source.get("type") != "ir.SourceName" or not isinstance(source.get("data"), str):
            raise EncodeError(f"IndexMap span has no source name: {source}")
        pos = tuple(d.get(k) for k in ("line", "column", "end_line", "end_column"))
        if not all(type(x) is int and x >= 0 for x in pos):
            raise EncodeError(f"IndexMap span position {pos} is not four non-negative integers")
        spans.append((source["data"], *pos))
    return tuple(spans), (tuple(per_param) if span_nodes else ())


def format_span(lam: Lambda, k: int, written: set[int]) -> str:
    """``@line:col-end_col`` (``@line:col-end_line:end_col``) the first time, ``@k`` for a span written earlier."""
    if k < 0:
        return ""
    if k in written:
        return f"@{k}"
    written.add(k)
    source, line, col, end_line, end_col = lam.spans[k]
    text = f"@{line}:{col}-" + (f"{end_col}" if end_line == line else f"{end_line}:{end_col}")
    return text + ("" if source == DEFAULT_SOURCE else json.dumps(source))


def format_expr(e: Expr, rename: Callable[[str], str], parent: int = 0, right: bool = False) -> str:
    kind = e[0]
    if kind == "var":
        return rename(e[1])
    if kind == "int":
        return str(e[1])
    if kind == "ref":
        return f"${e[1]}"
    if kind in ("min", "max"):
        return f"{kind}({format_expr(e[1], rename)},{format_expr(e[2], rename)})"
    prec = PREC[kind]
    text = f"{format_expr(e[1], rename, prec)}{kind}{format_expr(e[2], rename, prec, True)}"
    # left-associative: a right operand of equal precedence needs parentheses to keep the tree exact
    return f"({text})" if prec < parent or (right and prec == parent) else text


def format_lambda(lam: Lambda, free_names: dict[str, str], pretty_default: bool) -> str:
    """Lambda -> script text; ``free_names`` maps TVM names of trace variables to script names."""
    text = "{" + _format_part(lam, free_names)
    if lam.inverse is not None:
        if lam.inverse.inverse is not None:
            raise EncodeError("the inverse of an IndexMap's inverse map is not supported")
        text += "|" + _format_part(lam.inverse, free_names)
    text += "}"
    if lam.dtype != "int32":
        if lam.dtype != "int64":
            raise EncodeError(f"IndexMap dtype {lam.dtype} is not supported")
        text += "i64"
    if lam.pretty != pretty_default:
        text += "!"
    return text


def _format_part(lam: Lambda, free_names: dict[str, str]) -> str:
    """``indices;lets->body`` of one map (forward or inverse): its own scope of indices, spans and lets."""
    params = set(lam.params)

    def rename(name: str) -> str:
        if name in params:
            if name in free_names.values() or _looks_like_rv(name):
                raise EncodeError(f"IndexMap index {name!r} clashes with a trace variable name")
            return name
        if name not in free_names:
            raise EncodeError(f"IndexMap uses {name!r}, which is neither an index nor a trace variable")
        return free_names[name]

    lets = "".join(f";${k}={format_expr(e, rename)}" for k, e in enumerate(lam.lets))
    written: set[int] = set()
    spans = lam.param_spans or (-1,) * len(lam.params)
    heads = [p + format_span(lam, k, written) for p, k in zip(lam.params, spans)]
    return ",".join(heads) + lets + "->" + ",".join(format_expr(e, rename) for e in lam.body)


def _looks_like_rv(name: str) -> bool:
    return len(name) > 1 and name[0] in "blv" and name[1:].isdigit()


def graph_difference(original: str, rebuilt: str) -> str:
    """Where two serialized IndexMaps differ: the first differing node, or the text layout."""
    try:
        a, b = json.loads(original), json.loads(rebuilt)
    except ValueError as e:
        return f"unreadable graph ({e})"
    na, nb = a.get("nodes", []), b.get("nodes", [])
    for k, (x, y) in enumerate(zip(na, nb)):
        if x != y:
            return f"node {k} is {json.dumps(x)[:200]} in the trace, {json.dumps(y)[:200]} rebuilt"
    if len(na) != len(nb):
        return f"{len(na)} nodes in the trace, {len(nb)} rebuilt"
    if a != b:
        return "graph root or metadata differ"
    return "same graph, different JSON text layout (indentation or key order)"


@functools.lru_cache(maxsize=4096)
def to_graph_json(lam: Lambda) -> str:
    """Lambda (free variables under their TVM names) -> TVM's serialized IndexMap text."""
    import tvm

    free: dict = {}  # trace variables: one object each, shared by the map and its inverse
    inverse = _build_map(lam.inverse, lam.dtype, free) if lam.inverse is not None else None
    index_map = _build_map(lam, lam.dtype, free, inverse)
    text = tvm.ir.save_json(index_map)
    return json.dumps(json.loads(text), indent=2) if lam.pretty else text


def _build_map(lam: Lambda, dt: str, free: dict, inverse=None):
    """One IndexMap from TVM's node constructors: fresh indices (own scope), free variables from ``free``."""
    import tvm
    from tvm import tirx

    span_objs = [tvm.ir.Span(tvm.ir.SourceName(src), line, end_line, col, end_col)  # (line, end_line, col, ...)
                 for src, line, col, end_line, end_col in lam.spans]
    spans = lam.param_spans or (-1,) * len(lam.params)
    variables = {p: tirx.Var(p, dt, span=span_objs[k] if k >= 0 else None) for p, k in zip(lam.params, spans)}
    ops = {"+": tirx.Add, "-": tirx.Sub, "*": tirx.Mul, "//": tirx.FloorDiv, "%": tirx.FloorMod,
           "min": tirx.Min, "max": tirx.Max}

    built: list = []

    def build(e: Expr):
        if e[0] == "ref":
            return built[e[1]]
        if e[0] == "var":
            if e[1] in variables:
                return variables[e[1]]
            if e[1] not in free:
                free[e[1]] = tirx.Var(e[1], dt)
            return free[e[1]]
        if e[0] == "int":
            return tirx.IntImm(dt, e[1])
        return ops[e[0]](build(e[1]), build(e[2]))

    for e in lam.lets:
        built.append(build(e))
    return tirx.IndexMap([variables[p] for p in lam.params], [build(e) for e in lam.body], inverse)


# -------------------------------------------------------------------------------- parser (decoder)
def read_map(node: Any, dec: Any, pretty_default: bool) -> str:
    """A parsed ``imap`` (the grammar's Lark tree) -> TVM's serialized IndexMap.

    ``dec`` is the script decoder: it resolves the free value variables (``v<k>``, its ``ref``) and makes
    errors that name line and column (its ``err``)."""
    return _MapReader(dec).read(node, pretty_default)


class _MapReader:
    """The parser side of the lambdas ``format_lambda`` prints (the grammar is grammar.py's ``imap``)."""

    def __init__(self, dec: Any) -> None:
        self.dec = dec

    def read(self, node: Any, pretty_default: bool) -> str:
        from lark import Token, Tree

        flags = {c.type for c in node.children if isinstance(c, Token)}
        inverse = next((c for c in node.children if isinstance(c, Tree) and c.data == "inverse"), None)
        dtype = "int64" if "I64" in flags else "int32"
        lam = dataclasses.replace(
            self.map_part(node), dtype=dtype, pretty=pretty_default != ("BANG" in flags),
            inverse=dataclasses.replace(self.map_part(inverse), dtype=dtype) if inverse is not None else None)
        return to_graph_json(lam)

    def map_part(self, node: Any) -> Lambda:
        """``indices;lets->body`` of a map or of its inverse (its own scope of indices, spans and lets)."""
        from lark import Token, Tree

        indices = [c for c in node.children if isinstance(c, Tree) and c.data == "index"]
        params = [str(c.children[0]) for c in indices]
        if len(set(params)) != len(params):
            raise self.dec.err("repeated index name in index map", node)
        spans, param_spans = self.index_spans(indices)
        lets: list = []
        body = []
        for c in node.children:
            if isinstance(c, Token) or c.data in ("index", "inverse"):
                continue
            if c.data == "let":
                if str(c.children[0]) != f"${len(lets)}":
                    raise self.dec.err("shared sub-expressions are numbered in order", c.children[0],
                                       expected=f"${len(lets)}", found=str(c.children[0]))
                lets.append(self.expr(c.children[1], set(params), len(lets)))
            else:
                body.append(self.expr(c, set(params), len(lets)))
        return Lambda(tuple(params), tuple(body), lets=tuple(lets), spans=spans, param_spans=param_spans)

    def index_spans(self, indices: list) -> tuple[tuple, tuple[int, ...]]:
        """``@line:col-end[:end_col]["source"]`` starts a new span object, ``@k`` reuses the k-th."""
        spans: list[tuple] = []
        per_index: list[int] = []
        for c in indices:
            if len(c.children) == 1:
                per_index.append(-1)
                continue
            tok = c.children[1]
            body = str(tok)[1:]
            if ":" not in body:
                k = int(body)
                if k >= len(spans):
                    raise self.dec.err("undefined span reference", tok,
                                       expected=f"@0..@{len(spans) - 1}" if spans else "a span @line:col-end",
                                       found=str(tok))
                if len(c.children) > 2:
                    raise self.dec.err("a span reference takes no source name", c.children[2], expected="',' or ';'")
                per_index.append(k)
                continue
            start, end = body.split("-")
            line, col = map(int, start.split(":"))
            end_line, end_col = map(int, end.split(":")) if ":" in end else (line, int(end))
            source = json.loads(c.children[2]) if len(c.children) > 2 else DEFAULT_SOURCE
            spans.append((source, line, col, end_line, end_col))
            per_index.append(len(spans) - 1)
        return tuple(spans), (tuple(per_index) if spans else ())

    def expr(self, node: Any, params: set[str], n_lets: int) -> tuple:
        d, ch = node.data, node.children
        if d == "iref":
            k = int(str(ch[0])[1:])
            if k >= n_lets:
                raise self.dec.err("undefined shared sub-expression", ch[0], expected=f"$0..${n_lets - 1}",
                                   found=str(ch[0]))
            return ("ref", k)
        if d == "ivar":
            name = str(ch[0])
            if name in params:
                return ("var", name)
            if _RV_RE.match(name) and name[0] == "v":
                return ("var", self.dec.ref(ch[0], "v"))
            raise self.dec.err("undefined name in index map", ch[0], expected="an index of the map or a value v<N>",
                               found=name)
        if d == "iint":
            return ("int", int(ch[0]))
        if d == "icall":
            return (str(ch[0]), self.expr(ch[1], params, n_lets), self.expr(ch[2], params, n_lets))
        if d == "binop":
            return (str(ch[1]), self.expr(ch[0], params, n_lets), self.expr(ch[2], params, n_lets))
        return self.expr(ch[0], params, n_lets)
