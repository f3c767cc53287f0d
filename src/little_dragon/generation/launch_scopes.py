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

from typing import Any

from little_dragon.generation.constrain_state import PlacedBlock, blocks_in_run_order, leaf_blocks

# scope prefix -> the launch axes whose every value has memory of its own in that scope
PRIVATE_AXES = {"shared": ("blockIdx.",), "local": ("blockIdx.", "threadIdx.")}


def _private_axes(buffer: Any) -> tuple[str, ...]:
    scope = str(buffer.scope())
    return next((axes for prefix, axes in PRIVATE_AXES.items() if scope == prefix or scope.startswith(prefix + ".")),
                ())


def reads_outside_launch_scope(sch: Any, blocks: list[PlacedBlock] | None = None) -> list[str]:
    """The first read of a shared or local buffer by a block outside a launch-bound loop its writer is under
    (``[reader, buffer, writer, loop, axis, extent]``; empty when none).  ``blocks``: ``blocks_in_run_order(sch)``,
    when the caller has it."""
    leaves = leaf_blocks(blocks_in_run_order(sch) if blocks is None else blocks)
    for writer in leaves:
        for buf in (w.source for w in writer.block.writes):
            axes = _private_axes(buf)
            if not axes:
                continue
            private = [b for b in writer.launch if b.tag.startswith(axes) and b.extent != 1]
            if not private:
                continue
            for reader in leaves:
                if (reader is writer or not reader.launch or reader.launch[0].handle != writer.launch[0].handle
                        or not any(r.source.same_as(buf) for r in reader.block.reads)):
                    continue  # itself, or in another kernel (there TVM makes the buffer a global one)
                around = {b.handle for b in reader.launch}
                same_axis = {(b.tag, b.extent) for b in reader.launch}
                for b in private:
                    if b.handle not in around and (b.tag, b.extent) not in same_axis:
                        return [str(reader.block.name_hint), str(buf.name), str(writer.block.name_hint), b.var, b.tag,
                                str(b.extent)]
    return []


def launch_scope_message(found: list[str]) -> str:
    reader, buf, writer, var, tag, extent = found
    memory = "a thread block's" if tag.startswith("blockIdx.") else "a thread's"
    return (f"read outside its launch scope: block {reader} reads {buf}, which block {writer} writes under loop {var} "
            f"bound to {tag} ({extent}) that does not enclose {reader}: the memory is {memory} own, so {reader} reads "
            "there what its own thread block or thread did not write")
