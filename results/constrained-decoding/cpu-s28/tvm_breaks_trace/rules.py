"""Prototype detection rules for the 7 s27 CPU wrong results (not project code; for the report).

R1 vector_scatter_collisions(lowered)    lowered TIR: a vector store whose index is a Broadcast (all lanes one element)
                                          of a value that is not lane-uniform.  [73c3, a8e8#1, a8e8#3, 656c]
R2 repeated_update_without_init(mod)     scheduled TIR before post-processing: a block with no init of its own that
                                          reads the element it writes (X[i] = f(X[i], ..), not max/min) under a loop
                                          of its scope, extent > 1, that its bindings do not use and its predicate
                                          does not pin to one iteration.  [e809]
R3 block_regions_out_of_bounds(mod)      scheduled TIR: a block's read/write region, its iter vars over their
                                          domains, outside the buffer's static shape.  [414df]
R4 init_not_updated(mod)                 scheduled TIR before post-processing: a block with an init writing buffer X
                                          whose body (its nested blocks) writes no X.  [bc1c]
"""
from __future__ import annotations
from typing import Any


PARENT: dict = {}


def _walk_blocks(stmt, loops, out, outer_ivs):
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For
    from little_dragon.generation.constrain_state import _inner_stmts
    if isinstance(stmt, For):
        _walk_blocks(stmt.body, [*loops, stmt], out, outer_ivs)
    elif isinstance(stmt, SBlockRealize):
        out.append((stmt, loops, outer_ivs))
        PARENT[hash(stmt.block)] = PARENT.get("_cur")
        ivs = [*outer_ivs, *stmt.block.iter_vars]
        prev, PARENT["_cur"] = PARENT.get("_cur"), stmt.block
        _walk_blocks(stmt.block.body, [], out, ivs)
        if stmt.block.init is not None:
            _walk_blocks(stmt.block.init, [], out, ivs)
        PARENT["_cur"] = prev
    else:
        for x in _inner_stmts(stmt):
            _walk_blocks(x, loops, out, outer_ivs)
    return out


def _blocks(mod):
    from little_dragon.generation.constrain_state import _function_bodies
    out = []
    for body in _function_bodies(mod):
        _walk_blocks(body, [], out, [])
    return out


def _loaded_names(stmt) -> set:
    """Names of the buffers loaded anywhere in ``stmt`` (store values, conditions, let values, loop bounds)."""
    from tvm.ir import Expr
    from tvm.tirx import Stmt
    from little_dragon.generation.constrain_state import _loads, _inner_stmts
    out = set()
    def visit(s):
        for name in ("value", "condition", "min", "extent"):
            e = getattr(s, name, None)
            if isinstance(e, Expr):
                out.update(str(x.source.name) for x in _loads(e, []))
        for i in getattr(s, "indices", []) or []:
            out.update(str(x.source.name) for x in _loads(i, []))
        for x in _inner_stmts(s):
            visit(x)
    visit(stmt)
    return out


def vector_scatter_collisions(lowered: list[Any]) -> list[str]:
    from tvm.tirx import Broadcast
    from little_dragon.generation.constrain_state import _function_bodies, _stores, _loads
    found = []
    for m in lowered:
        for body in _function_bodies(m):
            loaded = {str(x.source.name) for n in _stores(body) for x in _loads(n.value, [])}
            loaded |= _loaded_names(body)
            for n in _stores(body):
                if any(isinstance(i, Broadcast) for i in n.indices) and not isinstance(n.value, Broadcast) \
                        and str(n.buffer.name) in loaded:
                    found.append(f"{n.buffer.name}[{', '.join(map(str, n.indices))}] = vector")
    return found


def _store_names(stmt) -> set:
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import BufferStore
    from little_dragon.generation.constrain_state import _inner_stmts
    out = set()
    def visit(x):
        if isinstance(x, BufferStore):
            out.add(str(x.buffer.name))
        elif isinstance(x, SBlockRealize):
            visit(x.block.body)
        else:
            for y in _inner_stmts(x):
                visit(y)
    visit(stmt)
    return out


def repeated_update_without_init(mod) -> list[str]:
    from tvm.tirx import analysis
    from tvm_ffi import structural_equal
    from little_dragon.generation.constrain_state import _first_iteration_only, _idempotent_update, _loads
    for realize, loops, _ in _blocks(mod):
        block = realize.block
        if block.init is not None or _idempotent_update(block.body):
            continue
        from tvm.tirx import BufferStore
        st = block.body
        if not isinstance(st, BufferStore):
            continue
        if not any(x.source.same_as(st.buffer) and structural_equal(list(x.indices), list(st.indices))
                   for x in _loads(st.value, [])):
            continue  # not an in-place update of the element it writes
        parent = PARENT.get(hash(block))
        if parent is None or parent.init is None or str(st.buffer.name) not in _store_names(parent.init):
            continue  # its init is not the enclosing block's (a blockized reduction's): the existing rules' business
        bound = {hash(v) for b in realize.iter_values for v in analysis.undefined_vars(b, [])}
        for loop in loops:
            if getattr(loop.extent, "value", None) == 1 or hash(loop.loop_var) in bound:
                continue
            if _first_iteration_only(realize.predicate, loop, loops):
                continue
            return [block.name_hint, str(loop.loop_var.name), str(loop.extent)]
    return []


def block_regions_out_of_bounds(mod) -> list[str]:
    from tvm.sym.analyzer import Analyzer
    for realize, _, outer_ivs in _blocks(mod):
        block = realize.block
        an = Analyzer()
        for iv in [*outer_ivs, *block.iter_vars]:
            an.bind(iv.var, iv.dom)
        for region in [*block.reads, *block.writes]:
            shape = region.source.shape
            for d, (r, n) in enumerate(zip(region.region, shape)):
                n = getattr(n, "value", None)
                if n is None:
                    continue
                lo = an.const_int_bound(r.min).min_value
                hi = an.const_int_bound(r.min + r.extent - 1).max_value
                if lo < 0 or hi >= n:
                    return [block.name_hint, str(region.source.name), f"dim {d}: [{lo}, {hi}] of {n}"]
    return []


def init_not_updated(mod) -> list[str]:
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import BufferStore
    from little_dragon.generation.constrain_state import _inner_stmts

    def stores(stmt, out):  # every store, inside nested blocks too (their inits included)
        if isinstance(stmt, BufferStore):
            out.add(str(stmt.buffer.name)); return out
        if isinstance(stmt, SBlockRealize):
            stores(stmt.block.body, out)
            if stmt.block.init is not None:
                stores(stmt.block.init, out)
            return out
        for x in _inner_stmts(stmt):
            stores(x, out)
        return out
    for realize, _, _ in _blocks(mod):
        block = realize.block
        if block.init is None:
            continue
        init_w, body_w = stores(block.init, set()), stores(block.body, set())
        lost = init_w - body_w
        if lost:
            return [block.name_hint, f'{len(lost)} buffer(s)']
    return []
