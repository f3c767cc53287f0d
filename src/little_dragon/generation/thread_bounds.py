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

# the checker is VerifyGPUCode's own, mirrored where its refusals are explained (``tvmx.verify_gpu``)
from little_dragon.tvmx.verify_gpu import threads_outside_bounds

__all__ = ["THREAD_BOUNDS", "gives_thread_bounds", "thread_bounds_message", "threads_outside_bounds"]

BOUND_NAMES = ("minthreads", "maxthreads")  # the codec's names of LOW and HIGH (``codec.kinds``)
# the refusal's message starts with this (it crosses the TVM worker's process boundary as text)
THREAD_BOUNDS = "thread bounds:"


def gives_thread_bounds(line: str) -> bool:
    """Whether ``line`` annotates a block with one of the thread bounds (`ann bK minthreads N`)."""
    words = line.split()
    return len(words) >= 3 and words[0] == "ann" and words[2] in BOUND_NAMES


def thread_bounds_message(hit: tuple[str, int, int, int]) -> str:
    name, threads, low, high = hit
    return (f"{THREAD_BOUNDS} block {name} runs {threads} threads a thread block, outside the bounds [{low}, {high}] "
            "it is annotated with (VerifyGPUCode refuses the kernel at `post *`)")
