"""encode: trace JSON -> script text; decode: script text -> trace JSON.  Both driven by ``kinds.SPECS``.

Encoder and decoder stay side by side here: reading them together is how losslessness is reviewed.  What
they share lives beside them: folded pairs in ``folds`` (one table entry per fold), IndexMap lambdas in
``indexmap`` (printer and parser), the grammar and its syntax-error messages in ``grammar``.

Variables are never written where they are defined: the k-th block an instruction defines is ``b<k>``,
loops ``l<k>``, values ``v<k>``, each counted separately in order of definition.  TVM's own JSON names them
from one shared counter (``b0 l1 l2 v3 ...``); both namings are fixed by the instruction order, so the
mapping between them is exact.  Sampling decisions are written after ``=`` on the line that samples.
"""
from __future__ import annotations

import json
import re
from typing import Any

from little_dragon.codec import derive, indexmap
from little_dragon.codec.canonical import canonical_json, dumps
from little_dragon.codec.errors import DecodeError, EncodeError
from little_dragon.codec.folds import BY_RULE as FOLD_BY_RULE
from little_dragon.codec.folds import fold_at
from little_dragon.codec.grammar import HUMAN, parse
from little_dragon.codec.kinds import (BY_KIND, BY_MNEMONIC, CANDIDATES, CANDIDATES_NAME, DERIVED, INTRIN_ABBREV,
                                      INTRIN_FULL, KEY_ABBREV, KEY_FULL, MS_KEY_PREFIX, THREAD_ABBREV, THREAD_FULL,
                                      KindSpec)

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_RV_KIND = {"b": "block", "l": "loop", "v": "value"}

# Most outputs one instruction may define (GetLoops of a deep nest has ~10; splits up to ~8).
MAX_OUTPUTS = 4096


def _same(a: Any, b: Any) -> bool:
    return dumps(a) == dumps(b)


# ----------------------------------------------------------------------------------------------- encode
class _Encoder:
    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # TVM name -> script name
        self.counts = {"b": 0, "l": 0, "v": 0}
        self.total = 0  # TVM's shared counter
        self.i = 0
        self.kind = ""

    def err(self, msg: str) -> EncodeError:
        return EncodeError(msg, inst_index=self.i, kind=self.kind)

    def ref(self, v: Any, types: str) -> str:
        if not isinstance(v, str) or v not in self.names:
            raise self.err(f"input {v!r} is not a variable defined earlier")
        name = self.names[v]
        if name[0] not in types:
            raise self.err(f"input {v!r} is a {_RV_KIND[name[0]]}, expected {'/'.join(_RV_KIND[t] for t in types)}")
        return name

    def value(self, v: Any, src: str) -> str:
        """A literal (or, for inputs, a variable) in the script's typed value syntax."""
        if v is None:
            return "_"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, list):
            return "[" + " ".join(self.value(x, src) for x in v) + "]"
        if isinstance(v, str):
            if src == "at":
                return INTRIN_ABBREV.get(v) or json.dumps(v)
            if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
                return INTRIN_ABBREV.get(v[1:-1]) or json.dumps(v[1:-1])
            if v == "None":
                return "_"
            return self.ref(v, "blv")
        raise self.err(f"value {v!r} of type {type(v).__name__} is not supported")

    def field(self, ftype: str, v: Any, src: str, inst: list) -> str:
        if ftype in ("b", "l", "v", "bl"):
            return self.ref(v, ftype)
        if ftype == "factor":
            if v == "None":
                return "_"
            if isinstance(v, int) and not isinstance(v, bool):
                return str(v)
            return self.ref(v, "v")
        if ftype == "value":
            return self.value(v, "in")
        if ftype == "lit":
            return self.value(v, "at")
        if ftype == "int":
            if not isinstance(v, int) or isinstance(v, bool):
                raise self.err(f"expected an integer attribute, found {v!r}")
            return str(v)
        if not isinstance(v, str):
            raise self.err(f"expected a string for a {ftype} field, found {v!r}")
        if ftype == "name":
            if v in INTRIN_ABBREV:
                return INTRIN_ABBREV[v]
            return v if _NAME_RE.match(v) else json.dumps(v)
        if ftype == "key":
            if v in KEY_ABBREV:
                return KEY_ABBREV[v]
            if v.startswith(MS_KEY_PREFIX) and _NAME_RE.match(v[len(MS_KEY_PREFIX):]):
                return "." + v[len(MS_KEY_PREFIX):]
            # a bare word is a table abbreviation first, so a key spelled like one is quoted
            return v if _NAME_RE.match(v) and v not in KEY_FULL else json.dumps(v)
        if ftype == "thread":
            if v in THREAD_FULL:
                return THREAD_FULL[v]
            return v if _NAME_RE.match(v) and v not in THREAD_ABBREV else json.dumps(v)
        if ftype == "map":
            free = {tvm: mine for tvm, mine in self.names.items() if mine[0] == "v"}
            try:
                lam = indexmap.parse_graph(v)
                text = indexmap.format_lambda(lam, free, pretty_default=True)
            except EncodeError as e:
                raise self.err(e.message) from None
            rebuilt = indexmap.to_graph_json(lam)
            if rebuilt != v:
                raise self.err(f"IndexMap {text} cannot be reproduced exactly from its lambda: "
                               f"{indexmap.graph_difference(v, rebuilt)}")
            return text
        raise self.err(f"internal: unknown field type {ftype}")

    def instruction(self, inst: Any, decision: Any) -> str:
        if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)):
            raise self.err(f"not a [kind, inputs, attrs, outputs] instruction: {str(inst)[:200]}")
        kind, inputs, attrs, outputs = inst
        self.kind = kind
        spec = BY_KIND.get(kind)
        if spec is None:
            raise self.err(f"unknown instruction kind {kind!r} (see the supported kinds in docs/codec.md)")
        if not (isinstance(inputs, list) and isinstance(attrs, list) and isinstance(outputs, list)):
            raise self.err("inputs, attrs and outputs must be lists")
        if len(attrs) != spec.n_attrs:
            raise self.err(f"has {len(attrs)} attributes, the codec knows {spec.n_attrs} (unknown attribute?)")
        if spec.n_inputs is not None and len(inputs) != spec.n_inputs:
            raise self.err(f"has {len(inputs)} inputs, expected {spec.n_inputs}")
        if decision is not None and not spec.decision:
            raise self.err("has a decision but is not a sampling instruction")
        parts = [spec.mnemonic]
        for f in spec.fields:
            if f.type == "count":
                parts.append(str(len(outputs)))
                continue
            seq = inputs if f.src == "in" else attrs
            if f.variadic:
                if len(seq) <= f.index:
                    raise self.err(f"expected at least {f.index + 1} {'inputs' if f.src == 'in' else 'attrs'}")
                parts += [self.field(f.type, x, f.src, inst) for x in seq[f.index:]]
            elif f.type == "buf":
                idx, typ = attrs[f.index], attrs[f.index + 1]
                if not (isinstance(idx, int) and typ in (0, 1) and not isinstance(typ, bool) and idx >= 0):
                    raise self.err(f"bad buffer index/type {idx!r}/{typ!r}")
                parts.append(("r", "w")[typ] + str(idx))
            else:
                parts.append(self.field(f.type, seq[f.index], f.src, inst))
        if kind == "SampleCategorical":
            parts += self.categorical(attrs, decision)
        for o in spec.options:
            v = (inputs if o.src == "in" else attrs)[o.index]
            if o.name == "n":  # tile count: implied by the decision's length
                if decision is None or not isinstance(decision, list) or len(decision) != v:
                    parts.append(f"n={self.value(v, 'at')}")
            elif not _same(v, o.default):
                parts.append(f"{o.name}={self.value(v, o.src)}")
        if decision is not None and kind != "SampleCategorical":
            parts.append("=")
            if spec.decision == "ints":
                if not (isinstance(decision, list) and all(type(x) is int for x in decision)):
                    raise self.err(f"decision {decision!r} is not a list of integers")
                parts += [str(x) for x in decision]
            else:
                if type(decision) is not int:
                    raise self.err(f"decision {decision!r} is not an integer")
                parts.append(str(decision))
        self.define(spec, outputs, attrs)
        return " ".join(parts)

    def categorical(self, attrs: list, decision: Any) -> list[str]:
        cands, probs = attrs
        if not (isinstance(cands, list) and cands and all(type(c) is int for c in cands)):
            raise self.err(f"candidates {cands!r} are not a non-empty list of integers")
        if not (isinstance(probs, list) and len(probs) == len(cands) and all(type(p) is float for p in probs)):
            raise self.err(f"probabilities {probs!r} do not match the candidates")
        out = [CANDIDATES_NAME[tuple(cands)]] if tuple(cands) in CANDIDATES_NAME else [str(c) for c in cands]
        if any(p != 1.0 / len(cands) for p in probs):
            out += ["~"] + [repr(p) for p in probs]
        if decision is not None:
            if type(decision) is not int:
                raise self.err(f"decision {decision!r} is not an integer")
            out += ["=", str(decision)]
        return out

    def define(self, spec: KindSpec, outputs: list, attrs: list) -> None:
        if spec.out_count == "0" and outputs:
            raise self.err(f"has {len(outputs)} outputs, expected none")
        if spec.out_count == "1" and len(outputs) != 1:
            raise self.err(f"has {len(outputs)} outputs, expected 1")
        if spec.out_count == "decision" and len(outputs) != attrs[0]:
            raise self.err(f"has {len(outputs)} outputs for n={attrs[0]}")
        for o in outputs:
            expected = f"{spec.out_type}{self.total}"
            if o != expected:
                raise self.err(f"output {o!r} is not TVM's canonical name {expected!r} (re-serialize the trace)")
            self.names[o] = f"{spec.out_type}{self.counts[spec.out_type]}"
            self.counts[spec.out_type] += 1
            self.total += 1


def _postproc_start(insts: list) -> int | None:
    return next((k for k, inst in enumerate(insts)
                 if isinstance(inst, list) and inst and inst[0] == "EnterPostproc"), None)


def encode(trace_json: Any, context: Any = None) -> str:
    """Trace JSON (``[insts, decisions]`` of ``trace.as_json()``) -> canonical script text.

    TVM objects (IntImm, FloatImm) are read as numbers; plain JSON values are kept exactly (``decode``
    returns them as given).  For a live trace pass ``canonical_json(trace.as_json())``, the database form.
    With ``context`` (a ``postproc.PostprocContext``: the workload and target) the post-processing section
    is written ``post *`` when the target's post-processors re-derive it exactly; otherwise (and always
    without a context) it is written out."""
    try:
        trace_json = canonical_json(trace_json, bools_as_int=False)
    except TypeError as e:
        raise EncodeError(str(e)) from None
    if not (isinstance(trace_json, (list, tuple)) and len(trace_json) == 2 and isinstance(trace_json[0], list)):
        raise EncodeError("a trace JSON is [instructions, decisions]")
    insts, decisions = trace_json
    by_index: dict[int, Any] = {}
    last = -1
    for d in decisions:
        if not (isinstance(d, list) and len(d) == 2 and type(d[0]) is int and 0 <= d[0] < len(insts)):
            raise EncodeError(f"bad decision entry {d!r}")
        if d[0] <= last:
            raise EncodeError(f"decisions are not in instruction order at {d!r}")
        last = d[0]
        by_index[d[0]] = d[1]
    end, derived = len(insts), False
    k = _postproc_start(insts) if context is not None else None
    if k is not None and context.reproduces([insts[:k], [d for d in decisions if d[0] < k]], trace_json):
        end, derived = k, True
    enc = _Encoder()
    lines = []
    i = 0
    while i < end:
        enc.i = i
        fold = fold_at(insts, by_index, i, end)
        line = enc.instruction(insts[i], by_index.get(i))
        if insts[i][0] == "Reorder" and i not in by_index and derive.reorder_is_derived(insts[:i], insts[i]):
            line = f"{BY_KIND['Reorder'].mnemonic} {DERIVED}"
        if fold:
            enc.i = i + 1
            line = fold.write(line, enc.instruction(insts[i + 1], None))  # checks the second, defines its outputs
        lines.append(line)
        i += 2 if fold else 1
    if derived:
        lines.append(f"{BY_KIND['EnterPostproc'].mnemonic} {DERIVED}")
    return "".join(line + "\n" for line in lines)


# ----------------------------------------------------------------------------------------------- decode
class _Decoder:
    def __init__(self) -> None:
        self.defined: dict[str, str] = {}  # script name -> TVM name
        self.counts = {"b": 0, "l": 0, "v": 0}
        self.total = 0

    def err(self, msg: str, tok: Any, expected: str = "", found: str = "") -> DecodeError:
        line = getattr(tok, "line", None) or getattr(getattr(tok, "meta", None), "line", 0) or 0
        col = getattr(tok, "column", None) or getattr(getattr(tok, "meta", None), "column", 0) or 0
        return DecodeError(msg, line=line, column=col, expected=expected, found=found or str(tok))

    def ref(self, tok: Any, types: str) -> str:
        name = str(tok)
        if name[0] not in types:
            raise self.err("wrong variable type", tok, expected=" or ".join(HUMAN[t.upper() + "REF"] for t in types))
        if name not in self.defined:
            n = self.counts[name[0]]
            have = f"{name[0]}0..{name[0]}{n - 1}" if n else "none defined yet"
            raise self.err(f"undefined {_RV_KIND[name[0]]} variable", tok,
                           expected=f"a {_RV_KIND[name[0]]} defined earlier ({have})", found=name)
        return self.defined[name]

    def value(self, node: Any, src: str) -> Any:
        from lark import Tree

        if isinstance(node, Tree):
            if node.data == "list":
                return [self.value(c, src) for c in node.children]
            node = node.children[0]
            if isinstance(node, Tree):
                return self.value(node, src)
        t = node.type
        if t == "INT":
            return int(node)
        if t == "FLOAT":
            return float(node)
        if t == "TRUE":
            return True
        if t == "FALSE":
            return False
        if t == "NONE":
            return "None" if src == "in" else None
        if t in ("STRING", "SYM"):
            s = json.loads(node) if t == "STRING" else self.intrinsic(node)
            return f'"{s}"' if src == "in" else s
        if t in ("BREF", "LREF", "VREF"):
            if src != "in":
                raise self.err("a variable cannot be an attribute value", node, expected="a literal")
            return self.ref(node, str(node)[0])
        raise self.err("unexpected value", node)

    def intrinsic(self, tok: Any) -> str:
        if str(tok) not in INTRIN_FULL:
            raise self.err("unknown tensor intrinsic", tok, expected=" or ".join(sorted(INTRIN_FULL)), found=str(tok))
        return INTRIN_FULL[str(tok)]

    def field(self, ftype: str, node: Any, src: str) -> Any:
        from lark import Tree

        tok = node.children[0] if isinstance(node, Tree) and ftype not in ("value", "lit", "map") else node
        if ftype in ("b", "l", "v", "bl"):
            return self.ref(tok, ftype)
        if ftype == "factor":
            if tok.type == "NONE":
                return "None"
            return int(tok) if tok.type == "INT" else self.ref(tok, "v")
        if ftype == "value":
            return self.value(node, "in")
        if ftype == "lit":
            return self.value(node, "at")
        if ftype in ("int", "count"):
            return int(tok)
        if ftype in ("name", "key", "thread"):
            if tok.type == "STRING":
                return json.loads(tok)
            if tok.type == "SYM":
                return self.intrinsic(tok)
            s = str(tok)
            if ftype == "key" and s.startswith("."):
                return MS_KEY_PREFIX + s[1:]
            if ftype == "key":
                return KEY_FULL.get(s, s)
            if ftype == "thread":
                return THREAD_ABBREV.get(s, s)
            return s
        if ftype == "map":
            return indexmap.read_map(node, self, pretty_default=True)
        raise self.err(f"internal: unknown field type {ftype}", tok)

    def define(self, t: str, n: int) -> list[str]:
        outputs = []
        for _ in range(n):
            tvm_name = f"{t}{self.total}"
            self.defined[f"{t}{self.counts[t]}"] = tvm_name
            self.counts[t] += 1
            self.total += 1
            outputs.append(tvm_name)
        return outputs

    def instruction(self, tree: Any, index: int, spec: KindSpec | None = None) -> tuple[list, Any]:
        from lark import Tree

        spec = spec or BY_MNEMONIC[tree.data[2:]]
        n_in = spec.n_inputs if spec.n_inputs is not None else max(
            [f.index + 1 for f in spec.fields if f.src == "in"] + [0])
        inputs: list[Any] = [None] * n_in
        attrs: list[Any] = [None] * spec.n_attrs
        positional = [c for c in tree.children
                      if not (isinstance(c, Tree) and (c.data.startswith("o_") or c.data in ("decision", "probs")))]
        options = {c.data[2:]: c for c in tree.children if isinstance(c, Tree) and c.data.startswith("o_")}
        decision_node = next((c for c in tree.children if isinstance(c, Tree) and c.data == "decision"), None)
        n_outputs = None
        pos = 0
        for f in spec.fields:
            seq = inputs if f.src == "in" else attrs
            if f.variadic:
                vals = [self.field(f.type, c, f.src) for c in positional[pos:]]
                pos = len(positional)
                del seq[f.index:]
                seq.extend(vals)
                continue
            node = positional[pos]
            pos += 1
            if f.type == "count":
                n_outputs = int(node)
            elif f.type == "buf":
                attrs[f.index], attrs[f.index + 1] = int(str(node)[1:]), (0 if str(node)[0] == "r" else 1)
            else:
                seq[f.index] = self.field(f.type, node, f.src)
        decision: Any = None
        if decision_node is not None:
            decision = [int(t) for t in decision_node.children]
        if spec.kind == "SampleCategorical":
            named = [t for t in positional[pos:] if t.type == "NAME"]
            if named and str(named[0]) not in CANDIDATES:
                raise self.err("unknown candidate list", named[0], expected=" or ".join(CANDIDATES) + " or integers",
                               found=str(named[0]))
            cands = list(CANDIDATES[str(named[0])]) if named else [int(t) for t in positional[pos:]]
            probs_node = next((c for c in tree.children if isinstance(c, Tree) and c.data == "probs"), None)
            probs = [float(t) for t in probs_node.children] if probs_node else [1.0 / len(cands)] * len(cands)
            if len(probs) != len(cands):
                raise self.err("wrong number of probabilities", probs_node, expected=f"{len(cands)} probabilities",
                               found=str(len(probs)))
            attrs[:] = [cands, probs]
        for o in spec.options:
            seq = inputs if o.src == "in" else attrs
            if o.name in options:
                seq[o.index] = self.value(options[o.name].children[0], o.src)
            elif o.name != "n":
                seq[o.index] = json.loads(json.dumps(o.default))
        if spec.decision == "int" and decision is not None:
            if len(decision) != 1:
                raise self.err("bad decision", decision_node, expected="one integer", found=f"{len(decision)} integers")
            decision = decision[0]
            if spec.kind == "SampleCategorical" and not 0 <= decision < len(attrs[0]):
                raise self.err("bad decision", decision_node, expected=f"a candidate index 0..{len(attrs[0]) - 1}",
                               found=str(decision))
        if spec.kind == "SamplePerfectTile":
            if "n" in options:
                attrs[0] = self.value(options["n"].children[0], "at")
            elif decision is not None:
                attrs[0] = len(decision)
            else:
                raise self.err("tile needs a decision or n=", tree, expected="= t1 .. tN", found="end of line")
            if decision is not None:
                if len(decision) != attrs[0] or any(x < 1 for x in decision):
                    raise self.err("bad decision", decision_node, expected=f"{attrs[0]} positive tile sizes",
                                   found=" ".join(map(str, decision)))
            n_outputs = attrs[0]
        elif spec.out_count == "factors":
            n_outputs = len(inputs) - 1
        elif spec.out_count == "1":
            n_outputs = 1
        elif spec.out_count == "0":
            n_outputs = 0
        if (n_outputs or 0) > MAX_OUTPUTS:  # a model's typo must not make the decoder allocate gigabytes
            raise self.err(f"{n_outputs} outputs is more than any schedule has", tree,
                           expected=f"at most {MAX_OUTPUTS} outputs", found=str(n_outputs))
        outputs = self.define(spec.out_type, n_outputs or 0)
        return [spec.kind, inputs, attrs, outputs], decision


def _is_derived_post(node: Any) -> bool:
    return node.data == BY_KIND["EnterPostproc"].rule and bool(node.children)


def decode_line(dec: _Decoder, node: Any, insts: list, decisions: list) -> int:
    """Append the instructions of one parsed line (not ``post *``) to ``insts``/``decisions`` (trace JSON
    so far, which ``reorder *`` reads) on ``dec``'s names; returns how many it appended.  The one copy of
    the per-line step: ``decode_with_lines`` runs it over a whole script, constrained decoding
    (``generation.constrained``) over one more line on the decoder state of the prefix before it."""
    if node.data == BY_KIND["Reorder"].rule and node.children[0].type == "DERIVED":
        order = derive.tiling_reorder(insts)
        if order is None:
            raise dec.err("`reorder *` follows the `tile` lines of a multi-level tiling", node,
                          expected="a `tiling` annotation and its `tile` lines right before", found="reorder *")
        pairs = [(["Reorder", order, [], []], None)]
    elif node.data in FOLD_BY_RULE:
        pairs = FOLD_BY_RULE[node.data].read(dec, node, len(insts))
    else:
        pairs = [dec.instruction(node, len(insts))]
    for inst, decision in pairs:
        if decision is not None:
            decisions.append([len(insts), decision])
        insts.append(inst)
    return len(pairs)


def decode_with_lines(text: str, context: Any = None) -> tuple[list, list[int]]:
    """Script text -> (trace JSON, the script line of each instruction).

    ``post *`` needs ``context`` (workload and target): the post-processing section is re-derived by
    applying the script so far and running the target's post-processors (an ApplyError if TVM rejects it)."""
    tree = parse(text)
    dec = _Decoder()
    insts, decisions, lines = [], [], []
    for n, node in enumerate(tree.children):
        if _is_derived_post(node):
            if n != len(tree.children) - 1:
                nxt = tree.children[n + 1]
                raise dec.err("nothing may follow `post *`", nxt, expected="end of script",
                              found=text.splitlines()[nxt.meta.line - 1].strip())
            if context is None:
                raise dec.err("`post *` is derived from the workload and target: decode it with a context "
                              "(dragon codec decode SCRIPT --workload W --target T)", node,
                              expected="a post-processing context", found="post *")
            full = context.derive([insts, decisions], lines=lines, text=text, post_line=node.meta.line)
            lines += [node.meta.line] * (len(full[0]) - len(insts))
            return full, lines
        lines += [node.meta.line] * decode_line(dec, node, insts, decisions)
    return [insts, decisions], lines


def decode(text: str, context: Any = None) -> list:
    """Script text -> trace JSON ``[insts, decisions]`` equal to TVM's ``trace.as_json()`` (IntImm as int).

    ``context`` (``postproc.PostprocContext``): the workload and target, needed only by a ``post *`` line."""
    return decode_with_lines(text, context)[0]
