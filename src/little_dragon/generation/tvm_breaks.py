"""Kernels TVM 0.27 breaks without an error: the script applies, post-processes and lowers, and the kernel computes
something else.  Each was traced from one of session 27's CPU sealed wrong results (results/constrained-decoding.md,
session 28) and is read off TIR the end check already has (``schedule_worker.finish_check``); no kernel runs.

- ``vector_stores_into_one_element`` (the lowered code): a store whose index is a ``Broadcast`` (every lane addresses one
  element) of a vector whose lanes differ, to a buffer something reads.  CompactBufferAllocation shrinks a buffer that
  lives inside a loop to what one iteration touches; VectorizeLoop then vectorizes that loop without widening it, so
  every lane writes the one element (a row sum computed at its consumer's vectorized row loop: one row's sum for all).
- ``updates_without_their_predicate`` (the module before post-processing): a block without an init of its own, which
  updates the element it reads (`X[i] = X[i] + ...`, not max/min), whose enclosing block's init writes X, under a loop of
  its scope that its bindings do not use and its predicate does not keep to the first iteration.  ``blockize`` drops the predicate of a split's padding
  (`u_0 * 256 + u_1 < 1`): the update then runs once per iteration of that loop (a row sum added 256 times).
- ``regions_outside_buffers`` (the post-processed module): a block whose read or write region, its iter variables over
  their domains, falls outside the buffer's shape.  The same dropped predicate can leave a reduction over 4,096 rows
  of a 256-row buffer (all NaN).
- ``inits_without_their_update`` (the module before post-processing): a block whose init writes a buffer its body
  (nested blocks included) never writes.  ``reindex`` of a blockized reduction's accumulator moves the update to a new
  buffer and copies in, never back: the result stays at the init value (a softmax's row max at -3.4e38, then NaN).
"""
from __future__ import annotations

from typing import Any

from little_dragon.generation.constrain_state import (_first_iteration_only, _function_bodies, _idempotent_update,
                                                      _inner_stmts, _loads, _stores)


def _realizes(mod: Any) -> list[tuple[Any, list[Any], Any, list[Any]]]:
    """Every block realize of ``mod`` with the loops between it and its enclosing block, that block (None at a
    function's root) and the iter variables of the blocks enclosing it."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, Stmt

    out: list[tuple[Any, list[Any], Any, list[Any]]] = []

    def visit(stmt: Any, loops: list[Any], parent: Any, outer: list[Any]) -> None:
        if isinstance(stmt, For):
            visit(stmt.body, [*loops, stmt], parent, outer)
        elif isinstance(stmt, SBlockRealize):
            block = stmt.block
            out.append((stmt, loops, parent, outer))
            for part in (block.init, block.body):
                if isinstance(part, Stmt):
                    visit(part, [], block, [*outer, *block.iter_vars])
        else:
            for x in _inner_stmts(stmt):
                visit(x, loops, parent, outer)

    for body in _function_bodies(mod):
        visit(body, [], None, [])
    return out


def _written(stmt: Any) -> set[str]:
    """The names of the buffers ``stmt`` stores to, inside the blocks it realizes too (their inits included)."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import BufferStore, Stmt

    out: set[str] = set()

    def visit(x: Any) -> None:
        if isinstance(x, BufferStore):
            out.add(str(x.buffer.name))
        elif isinstance(x, SBlockRealize):
            for part in (x.block.init, x.block.body):
                if isinstance(part, Stmt):
                    visit(part)
        else:
            for y in _inner_stmts(x):
                visit(y)

    visit(stmt)
    return out


def _read(stmt: Any) -> set[str]:
    """The names of the buffers loaded anywhere in ``stmt`` (stored values, indices, conditions, bounds, lets)."""
    from tvm.ir import Expr

    out: set[str] = set()

    def visit(x: Any) -> None:
        exprs = [getattr(x, name, None) for name in ("value", "condition", "min", "extent")]
        exprs += list(getattr(x, "indices", None) or [])
        for e in exprs:
            if isinstance(e, Expr):
                out.update(str(load.source.name) for load in _loads(e, []))
        for y in _inner_stmts(x):
            visit(y)

    visit(stmt)
    return out


def _guarded_reads(stmt: Any) -> set[str]:
    """The names of the buffers ``stmt`` loads under a condition (an ``if_then_else``'s or ``Select``'s branches, an
    ``IfThenElse``'s bodies; not inside the blocks it realizes): a padding block reads past its input's edge only
    where the condition is false, so its declared read region may leave the buffer."""
    from tvm.ir import Expr
    from tvm.tirx import IfThenElse

    out: set[str] = set()

    def names(e: Any) -> set[str]:
        return {str(load.source.name) for load in _loads(e, [])}

    def expr(e: Any) -> None:
        op = getattr(getattr(e, "op", None), "name", "")
        if op.endswith("if_then_else"):
            for branch in list(e.args)[1:]:
                out.update(names(branch))
        elif hasattr(e, "true_value") and hasattr(e, "false_value"):  # a Select
            out.update(names(e.true_value) | names(e.false_value))
        for name in ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride"):
            x = getattr(e, name, None)
            if isinstance(x, Expr):
                expr(x)
        for x in list(getattr(e, "args", None) or []) + list(getattr(e, "indices", None) or []):
            if isinstance(x, Expr):
                expr(x)

    def visit(x: Any) -> None:
        if isinstance(x, IfThenElse):
            for body in (x.then_case, x.else_case):
                if body is not None:
                    out.update(_read(body))
        for name in ("value", "condition", "min", "extent"):
            e = getattr(x, name, None)
            if isinstance(e, Expr):
                expr(e)
        for y in _inner_stmts(x):
            visit(y)

    visit(stmt)
    return out


def vector_stores_into_one_element(lowered: list[Any]) -> list[str]:
    """The stores of the lowered modules ``lowered`` that write a vector of differing lanes into one element (an index
    that is a ``Broadcast``) of a buffer the function reads, each described."""
    from tvm.tirx import Broadcast

    out = []
    for mod in lowered:
        for body in _function_bodies(mod):
            stores = [s for s in _stores(body) if any(isinstance(i, Broadcast) for i in s.indices)
                      and not isinstance(s.value, Broadcast)]
            if not stores:
                continue
            read = _read(body)
            out += [f"{s.buffer.name}[{', '.join(map(str, s.indices))}] takes a vector whose lanes differ: every lane "
                    "writes one element" for s in stores if str(s.buffer.name) in read]
    return out


def updates_without_their_predicate(mod: Any) -> list[str]:
    """The update blocks of ``mod`` (before post-processing) that a loop of their scope runs again and again on one
    element, with the init in the enclosing block (a blockized reduction whose predicate ``blockize`` dropped), each
    described."""
    from tvm.tirx import BufferStore, analysis
    from tvm_ffi import structural_equal

    out = []
    for realize, loops, parent, _ in _realizes(mod):
        block, store = realize.block, realize.block.body
        if block.init is not None or not isinstance(store, BufferStore) or _idempotent_update(store):
            continue
        if not any(load.source.same_as(store.buffer) and structural_equal(list(load.indices), list(store.indices))
                   for load in _loads(store.value, [])):
            continue  # not an update of the element it writes
        if parent is None or parent.init is None or str(store.buffer.name) not in _written(parent.init):
            continue
        used = {hash(v) for e in realize.iter_values for v in analysis.undefined_vars(e, [])}
        for loop in loops:
            if getattr(loop.extent, "value", None) == 1 or hash(loop.loop_var) in used:
                continue
            if not _first_iteration_only(realize.predicate, loop, loops):
                out.append(f"block {block.name_hint} updates {store.buffer.name} under loop {loop.loop_var.name} "
                           f"({loop.extent}), which its bindings do not use and its predicate does not keep to one "
                           f"iteration, and its init is the enclosing block {parent.name_hint}'s")
                break
    return out


def regions_outside_buffers(mod: Any) -> list[str]:
    """The blocks of ``mod`` whose read or write region, their iter variables and their enclosing blocks' over their
    domains, provably leaves the buffer's static shape, each described.  Not checked: a bound TVM's analyzer cannot
    find, a block with a predicate (its iter domains may run past what the predicate lets through: a cache stage over
    a split's padding), a buffer the block reads under a condition (``_guarded_reads``)."""
    from tvm.tirx import IntImm
    from tvm.sym.analyzer import Analyzer

    out = []
    for realize, _, _, outer in _realizes(mod):
        block = realize.block
        if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1):
            continue
        analyzer = Analyzer()
        for iv in (*outer, *block.iter_vars):
            analyzer.bind(iv.var, iv.dom)
        guarded = _guarded_reads(block.body)
        for kind, regions in (("reads", block.reads), ("writes", block.writes)):
            for region in regions:
                if kind == "reads" and str(region.source.name) in guarded:
                    continue
                for d, (r, n) in enumerate(zip(region.region, region.source.shape)):
                    n = getattr(n, "value", None)
                    lo = analyzer.const_int_bound(r.min)
                    hi = analyzer.const_int_bound(r.min + r.extent - 1)
                    if n is None or lo.min_value == lo.NEG_INF or hi.max_value == hi.POS_INF:
                        continue
                    if lo.min_value < 0 or hi.max_value >= n:
                        out.append(f"block {block.name_hint} {kind} {region.source.name}[{lo.min_value}..."
                                   f"{hi.max_value}] along dimension {d}, whose extent is {n}")
                        break
    return out


def inits_without_their_update(mod: Any) -> list[str]:
    """The blocks of ``mod`` (before post-processing) whose init writes a buffer their body never writes, each
    described."""
    out = []
    for realize, _, _, _ in _realizes(mod):
        block = realize.block
        if block.init is None:
            continue
        lost = sorted(_written(block.init) - _written(block.body))
        if lost:
            out.append(f"block {block.name_hint}'s init writes {', '.join(lost)}, which its update never writes")
    return out
