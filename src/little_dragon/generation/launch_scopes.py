"""On-chip memory read outside the launch scope that wrote it, in a scheduled (post-processed) GPU kernel.

Shared memory belongs to one thread block, local memory to one thread.  A block computed under a loop bound to
``blockIdx.z`` of 8 writes the shared memory of each of 8 thread blocks its own part; a block that reads that buffer
outside the loop runs in all 8 thread blocks, and reads there what no thread of its own thread block wrote.

Why: session 20's H200 sealed run, construction prompt c65fcb3ded7b07d5 (dense_bias_act), attempt 6, the only wrong
result of sessions 17-26's H200 attempts that no end-check rule refused.  The script computes the matmul at the
output block's innermost loop, puts its buffer in shared memory, and binds the matmul's own loops to ``blockIdx.z``
(8, predicate ``ax0_1 < 1``: only blockIdx.z == 0 computes) and ``blockIdx.x`` (1).  The output block stays outside
them: the kernel launches 8 thread blocks along z, all 8 write ``out``, and 7 of them from shared memory nobody
wrote (957,578 of 2,097,152 outputs wrong on the GPU).  TVM applies, post-processes, verifies, lowers and builds it;
MetaSchedule never writes it (its kernels bind every launch axis above all of a kernel's blocks).

The rule, read off the scheduled kernel (no kernel runs): in each kernel (the outermost launch-bound loop), for every
leaf block (no block inside it; the root and
other enclosing blocks only summarise their children's accesses) that writes a buffer of a private scope, each loop
around it bound to an axis that scope is private to (shared: ``blockIdx.*``; local: ``blockIdx.*`` and
``threadIdx.*``) with extent > 1 must also be around every leaf block that reads the buffer.  A loop bound to the
same axis with the same extent counts as that loop: TVM makes two such loops of one kernel one launch index (a
reader there reads its own thread block's memory if its index agrees, which this rule does not judge: accepted).
Warp and tensor-core fragment scopes are left out (warp-level, written by intrinsics)."""
from __future__ import annotations

import dataclasses
from typing import Any

from little_dragon.generation.tir_ints import handle

# scope prefix -> the launch axes whose every value has memory of its own in that scope
PRIVATE_AXES = {"shared": ("blockIdx.",), "local": ("blockIdx.", "threadIdx.")}


@dataclasses.dataclass(frozen=True)
class _Bound:
    """A loop bound to a launch axis: its tag, extent (None: not a constant) and loop variable's name."""
    tag: str
    extent: int | None
    var: str


@dataclasses.dataclass
class _Leaf:
    name: str
    loops: list[tuple[int, _Bound]]  # (id of the For node, binding) of every launch-bound loop around it, outermost
    # first: the first is its kernel's
    reads: list[Any]
    writes: list[Any]


def _leaf_blocks(mod: Any) -> list[_Leaf]:
    """Every block with no block inside it, with the launch-bound loops around it."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, IfThenElse, SeqStmt, Stmt

    out: list[_Leaf] = []

    def visit(stmt: Any, loops: list[tuple[int, _Bound]]) -> bool:
        """Walk ``stmt``; whether a block is inside it."""
        if isinstance(stmt, For):
            if stmt.thread_binding is not None:
                extent = getattr(stmt.extent, "value", None)
                loops = [*loops, (handle(stmt), _Bound(str(stmt.thread_binding.thread_tag), extent,
                                                                str(stmt.loop_var.name)))]
            return visit(stmt.body, loops)
        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            inner = any([visit(part, loops) for part in (block.init, block.body) if part is not None])
            if not inner:
                out.append(_Leaf(str(block.name_hint), loops, [r.source for r in block.reads],
                                 [w.source for w in block.writes]))
            return True
        if isinstance(stmt, SeqStmt):
            return any([visit(s, loops) for s in stmt.seq])
        if isinstance(stmt, IfThenElse):
            return any([visit(s, loops) for s in (stmt.then_case, stmt.else_case) if s is not None])
        body = getattr(stmt, "body", None)
        return visit(body, loops) if isinstance(body, Stmt) else False

    for f in mod.functions.values():
        body = getattr(f, "body", None)
        if isinstance(body, Stmt):
            visit(body, [])
    return out


def _private_axes(buffer: Any) -> tuple[str, ...]:
    scope = str(buffer.scope())
    return next((axes for prefix, axes in PRIVATE_AXES.items() if scope == prefix or scope.startswith(prefix + ".")),
                ())


def reads_outside_launch_scope(mod: Any) -> list[str]:
    """The first read of a shared or local buffer by a block outside a launch-bound loop its writer is under
    (``[reader, buffer, writer, loop, axis, extent]``; empty when none)."""
    leaves = _leaf_blocks(mod)
    for writer in leaves:
        for buf in writer.writes:
            axes = _private_axes(buf)
            if not axes:
                continue
            private = [(h, b) for h, b in writer.loops if b.tag.startswith(axes) and b.extent != 1]
            if not private:
                continue
            for reader in leaves:
                if (reader is writer or not reader.loops or reader.loops[0][0] != writer.loops[0][0]
                        or not any(r.same_as(buf) for r in reader.reads)):
                    continue  # itself, or in another kernel (there TVM makes the buffer a global one)
                around = {h for h, _ in reader.loops}
                same_axis = {(b.tag, b.extent) for _, b in reader.loops}
                for h, b in private:
                    if h not in around and (b.tag, b.extent) not in same_axis:
                        return [reader.name, str(buf.name), writer.name, b.var, b.tag, str(b.extent)]
    return []


def launch_scope_message(found: list[str]) -> str:
    reader, buf, writer, var, tag, extent = found
    memory = "a thread block's" if tag.startswith("blockIdx.") else "a thread's"
    return (f"read outside its launch scope: block {reader} reads {buf}, which block {writer} writes under loop {var} "
            f"bound to {tag} ({extent}) that does not enclose {reader}: the memory is {memory} own, so {reader} reads "
            "there what its own thread block or thread did not write")
