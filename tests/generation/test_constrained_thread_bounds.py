"""A block's threads against the thread bounds the script gives it, checked at the line that gives them (issue 16,
``generation/thread_bounds.py``).  VerifyGPUCode refuses a kernel whose annotated block runs a thread count outside
its `minthreads`/`maxthreads` bounds; the end check found that only at `post *`, and the attempt went back to its
tiling after drawing every line in between (session 30's H100 A/B: 133 of 190 retries, 42,604 tokens taken back).
Now the line that gives the block both bounds is refused so, and the attempt goes back to the tiling there.

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), TVM (its schedule, VerifyGPUCode through
the end check), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import re

import pytest

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import back_to_tiling, end_check, feed_constraint, model_script_lines, real_records, tvm_accepts
from dragon_testkit import lines_through as _through
from dragon_testkit import with_tiles as _with_tiles

# record 0 of real_cuda_valid_db (measured by MetaSchedule): a tensor-core matmul (warp_execution: threadIdx.x counts
# 32), threadIdx.y bound to the fused third factors of l15 (8 = 1 1 4 2 1) and l16 (48 = 2 2 1 3 4): 32 x 4 threads.
# Every factor at that level gives 32 x 384 = 12,288 threads, over the bound 1,024
OVER = {"l15": "1 1 8 1 1", "l16": "1 1 48 1 1"}


@pytest.fixture(scope="module")
def record():
    from little_dragon.generation.constrained import Workload

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_valid_db")))
    lines = model_script_lines(tj)
    assert "ann b5 maxthreads 1024" in lines and "ann b5 warp 1" in lines, lines
    return mod, target, Workload(mod, target), lines


def _facts(mod, wl, text: str):
    from little_dragon import codec
    from little_dragon.generation.schedule_worker import prefix_facts

    return prefix_facts(mod, text, codec.decode(text, codec.SyntaxOnlyContext()), wl.key)


def test_threads_outside_the_bounds_are_refused_at_the_line_that_gives_them(record):
    """The record passes its bounds lines; with its thread factors raised (12,288 threads) the `maxthreads` line is
    refused with the count -- not the `minthreads` line before it (one bound is no bound to VerifyGPUCode) -- although
    TVM applies it, and the end check refuses the finished script for VerifyGPUCode: the same verdict, known earlier.
    Without the block's `warp` annotation threadIdx.x is no warp: 1 x 4 threads, under 32."""
    from little_dragon.generation.thread_bounds import THREAD_BOUNDS

    mod, target, wl, lines = record
    assert _facts(mod, wl, _through(lines, "ann b5 maxthreads 1024")) is not None
    over = _with_tiles(lines, OVER)
    _facts(mod, wl, _through(over, "ann b5 minthreads 32"))
    with pytest.raises(RuntimeError, match=re.escape(THREAD_BOUNDS) + r" block \S+ runs 12288 threads .*\[32, 1024\]"):
        _facts(mod, wl, _through(over, "ann b5 maxthreads 1024"))
    assert tvm_accepts(mod, _through(over, "ann b5 maxthreads 1024"))
    assert "VerifyGPUCode" in end_check(mod, "".join(x + "\n" for x in over), target)
    assert not end_check(mod, "".join(x + "\n" for x in lines), target)
    no_warp = [ln for ln in lines if ln != "ann b5 warp 1"]
    with pytest.raises(RuntimeError, match=re.escape(THREAD_BOUNDS) + r" block \S+ runs 4 threads"):
        _facts(mod, wl, _through(no_warp, "ann b5 maxthreads 1024"))


def test_no_harvested_record_is_refused_at_its_bounds(record):
    """Every record of the committed CUDA databases through each of its bounds lines: none refused (the full
    harvests, token by token: results/constrained-decoding.md, session 30)."""
    from little_dragon.generation.constrained import Workload

    n = 0
    for db in ("real_cuda_db", "real_cuda_valid_db"):
        for _, mod, target, tj in real_records(DATA / db):
            lines = model_script_lines(tj)
            wl = Workload(mod, target)
            for ln in lines:
                if re.match(r"ann b\d+ (minthreads|maxthreads) ", ln):
                    _facts(mod, wl, _through(lines, ln))
                    n += 1
    assert n >= 10, n


def test_the_attempt_goes_back_to_its_tiling(engine, smollm2, record, monkeypatch):
    """Under the constraint, token by token: the over-bound attempt is taken back at its `maxthreads` line to the
    first `tile` line of its tiling (the tokens since then dropped, one retry counted with its reason), where a
    fresh constraint would stand; without retries it ends there.  The record itself goes through.  The thread factors
    are drawn free here (``THREAD_FACTORS`` off): with them on, the over-bound factor is refused at its token
    (``test_constrained_thread_factors.py``), and this line is what catches any count they do not bound."""
    from little_dragon.generation import constrained

    monkeypatch.setattr(constrained, "THREAD_FACTORS", False)
    mod, target, wl, lines = record
    over = _with_tiles(lines, OVER)
    head = _through(over, "ann b5 maxthreads 1024")
    refused, c = feed_constraint(engine, wl, smollm2, head)
    assert refused is None and c.dead and "thread bounds" in c.error, (refused, c.error)
    refused, ok = feed_constraint(engine, wl, smollm2, _through(lines, "ann b5 maxthreads 1024"))
    assert refused is None and not ok.dead, (refused, ok.error)

    c, ids, first_tile = back_to_tiling(engine, wl, smollm2, over, "ann b5 maxthreads 1024", "threads: thread bounds:")
    # the engine drops every token since the tiling's first line: the tile, reorder, fuse and bind lines too
    tiling = "".join(x + "\n" for x in over[first_tile:over.index("ann b5 maxthreads 1024") + 1])
    assert c.take_back >= len(smollm2(tiling, add_special_tokens=False)["input_ids"]) - 1
