"""A block's threads per thread block against the bounds the script annotates it with, where it writes them.

MetaSchedule's GPU tiling annotates its block with ``meta_schedule.thread_extent_low_inclusive`` /
``_high_inclusive`` (the codec's `ann b minthreads 32`, `ann b maxthreads 1024`), written right after the tiling's
`bind` lines, and its VerifyGPUCode post-processor refuses a kernel whose annotated block runs a number of threads
outside them (``ThreadExtentChecker``: the product of the ``threadIdx.x/y/z`` extents of the loops bound above the
block, ``threadIdx.x`` counted as one warp inside a ``warp_execution`` block).  The constraint's end check sees that
refusal only at `post *`, and goes back to the tiling's first `tile` line (``ScriptConstraint._retry_end``): the lines
written after the bounds were drawn for nothing.

Why: session 30's H100 A/B, 133 of its 190 retries were VerifyGPUCode refusals at `post *` (42,604 tokens taken back
against 37,598 kept); session 18's H200 A/B traced 46 of 50 such refusals to the threads outside the block's bounds.

The rule (``schedule_worker.prefix_facts``, on a GPU target): after the line that gives a block both bounds, the
block's threads so far must lie within them, else the line is refused as the end check would refuse the script, and
the attempt goes back to its tiling (``ScriptConstraint._new_line``).  So the rule is part of the constrained language,
not VerifyGPUCode's whole verdict: a script that wrote the bounds before its binds, or bound another thread axis above
the block (or moved it) after them, could still pass VerifyGPUCode, and is refused here.  MetaSchedule's scripts never
do either (every harvested record is accepted token by token: ``benchmarks/constrained_bench.py --harvest``)."""
from __future__ import annotations

from typing import Any

LOW, HIGH = "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive"
WARP_EXECUTION = "warp_execution"
BOUND_NAMES = ("minthreads", "maxthreads")  # the codec's names of LOW and HIGH (``codec.kinds``)
# the refusal's message starts with this (it crosses the TVM worker's process boundary as text)
THREAD_BOUNDS = "thread bounds:"


def gives_thread_bounds(line: str) -> bool:
    """Whether ``line`` annotates a block with one of the thread bounds (`ann bK minthreads N`)."""
    words = line.split()
    return len(words) >= 3 and words[0] == "ann" and words[2] in BOUND_NAMES


def threads_outside_bounds(mod: Any, warp_size: int = 32) -> tuple[str, int, int, int] | None:
    """The first block of ``mod`` annotated with both thread bounds whose threads per thread block lie outside them:
    (block name, threads, low, high), as VerifyGPUCode's ThreadExtentChecker counts them (the innermost loop bound to
    each ``threadIdx`` axis above the block; ``threadIdx.x`` is ``warp_size`` inside a ``warp_execution`` block; a
    loop of unknown extent counts as outside).  None when every such block is within its bounds."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    def walk(stmt: Any, xyz: tuple[int, int, int]) -> tuple[str, int, int, int] | None:
        if isinstance(stmt, tirx.For):
            tag = stmt.thread_binding.thread_tag if stmt.thread_binding is not None else ""
            if tag.startswith("threadIdx."):
                ext = stmt.extent
                if not isinstance(ext, tirx.IntImm):
                    return ("(a loop of unknown extent)", -1, -1, -1)
                dim = "xyz".index(tag[-1])
                xyz = tuple(int(ext.value) if i == dim else v for i, v in enumerate(xyz))  # type: ignore[assignment]
            return walk(stmt.body, xyz)
        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            ann = block.annotations
            if WARP_EXECUTION in ann:
                xyz = (warp_size, xyz[1], xyz[2])
            if LOW in ann and HIGH in ann:
                low, high, threads = int(ann[LOW]), int(ann[HIGH]), xyz[0] * xyz[1] * xyz[2]
                if not low <= threads <= high:
                    return (str(block.name_hint), threads, low, high)
            for child in ([block.init] if block.init is not None else []) + [block.body]:
                hit = walk(child, xyz)
                if hit:
                    return hit
            return None
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                hit = walk(s, xyz)
                if hit:
                    return hit
            return None
        for attr in ("body", "then_case", "else_case"):
            child = getattr(stmt, attr, None)
            if child is not None:
                hit = walk(child, xyz)
                if hit:
                    return hit
        return None

    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            hit = walk(func.body, (1, 1, 1))
            if hit:
                return hit
    return None


def thread_bounds_message(hit: tuple[str, int, int, int]) -> str:
    name, threads, low, high = hit
    return (f"{THREAD_BOUNDS} block {name} runs {threads} threads a thread block, outside the bounds [{low}, {high}] "
            "it is annotated with (VerifyGPUCode refuses the kernel at `post *`)")
