"""A GPU tiling's thread factors kept within MetaSchedule's thread bounds while they are drawn (issue 16,
``grammar_line._tile_rules`` [thread factors]).  MetaSchedule's `SSSRRSRS` tiling binds each S loop's third factor to
threadIdx, then annotates the block with the bounds [warp size, max threads per block]; a count outside them was
refused at the bounds line (``thread_bounds``), and the attempt went back to its first `tile` line (session 30's H100
A/B: 161 of 204 retries).  Now the third factor is refused at its token.

Real parts only: a CUDA MetaSchedule database measured on the H200 (tests/codec/data/real_cuda_simt_db: a matmul's
SIMT tiling, no tensor cores), TVM, the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import feed_constraint, model_script_lines, real_records, tvm_accepts
from dragon_testkit import lines_through as _through
from dragon_testkit import with_tiles as _with_tiles


@pytest.fixture(scope="module")
def records():
    from little_dragon.generation.constrained import Workload

    out = []
    for _, mod, target, tj in real_records(DATA / "real_cuda_simt_db"):
        out.append((mod, target, Workload(mod, target), model_script_lines(tj)))
    assert len(out) == 3
    return out


def test_the_bounds_follow_the_factors_drawn(records):
    """(low, high, threads so far) after each tile line of the run, and the third factor each loop may take: the
    first S loop at most 1,024 (the second could make up any shortfall: its extent is 3,072), the second within
    [ceil(32 / first), 1024 // first]."""
    from little_dragon import codec
    from little_dragon.generation.grammar_line import _thread_factor_bounds, tiling_threads

    lines = records[0][3]
    assert lines[2:7] == ['ann b0 tiling "SSSRRSRS"', "loops b0 3", "tile l0 = 2 1 4 8 1", "tile l1 = 2 6 64 4 1",
                          "tile l2 = 1024 1 2"]

    def at(last: str):
        return tiling_threads(codec.decode(_through(lines, last), codec.SyntaxOnlyContext()), 32, 1024)

    assert at("loops b0 3") == (32, 1024, 1)
    assert at("tile l0 = 2 1 4 8 1") == (32, 1024, 4)
    assert at("tile l1 = 2 6 64 4 1") == (32, 1024, 256)  # the R loop's line follows: no third factor to bound
    assert at("tile l2 = 1024 1 2") == (32, 1024, 256)    # every loop tiled: nothing left to bound
    assert at("reorder *") is None                         # the run is over
    loops, kinds = {0: 64, 1: 3072, 2: 2048}, {0: "S", 1: "S", 2: "R"}
    assert _thread_factor_bounds(0, loops, frozenset({0, 1, 2}), kinds, (32, 1024, 1)) == (1, 1024)
    assert _thread_factor_bounds(1, loops, frozenset({1, 2}), kinds, (32, 1024, 4)) == (8, 256)
    assert _thread_factor_bounds(1, loops, frozenset({1, 2}), kinds, (32, 1024, 64)) == (1, 16)


def test_thread_factors_outside_the_bounds_are_refused_at_their_token(engine, smollm2, records):
    """Token by token under the constraint: every record is accepted; raising the second loop's third factor to 512
    (4 x 512 = 2,048 threads) is refused inside that factor, as is a last third factor that leaves the block under a
    warp (1 x 16 threads), although TVM applies both lines -- the bounds line would have refused them later."""
    for mod, target, wl, lines in records:
        assert feed_constraint(engine, wl, smollm2, _through(lines, "ann b0 maxthreads 1024"))[0] is None
    mod, target, wl, lines = records[0]
    over = _with_tiles(lines, {"l1": "1 1 512 6 1"})
    under = _with_tiles(lines, {"l0": "64 1 1 1 1", "l1": "192 1 16 1 1"})
    for bad, line in ((over, "tile l1 = 1 1 512 6 1"), (under, "tile l1 = 192 1 16 1 1")):
        assert tvm_accepts(mod, _through(bad, line))
        refused, c = feed_constraint(engine, wl, smollm2, _through(bad, line))
        assert refused is not None and not c.dead, (line, c.error)
        assert "tile l1 = " in refused.split(" after ", 1)[1], refused   # refused inside the line's factors
        ok_prefix = line.rsplit(" ", 3)[0]                                # `tile l1 = t1 t2`: still allowed
        assert feed_constraint(engine, wl, smollm2, _through(bad, bad[bad.index(line) - 1]) + ok_prefix)[0] is None


def test_a_tensor_core_tiling_counts_the_warp(engine, smollm2):
    """A tensor-core tiling (the `tiling` annotation on the block before `blockize`, the tiles on the block it made,
    annotated `warp`): its run's S lines take 5 factors and R lines 3, as MetaSchedule's, and its threadIdx.x is the
    warp, so a measured record (32 x 4 x 1 threads) starts from 32 and goes through; third factors of 8 then 48
    (12,288 threads) are refused at the 48."""
    from little_dragon import codec
    from little_dragon.generation.constrained import Workload
    from little_dragon.generation.grammar_line import tiling_run, tiling_threads

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_valid_db")))
    lines = model_script_lines(tj)
    wl = Workload(mod, target)
    head = _through(lines, "loops b5 3")
    trace = codec.decode(head, codec.SyntaxOnlyContext())
    assert tiling_run(trace)[0] == (5, 3) and tiling_threads(trace, 32, 1024) == (32, 1024, 32)
    assert feed_constraint(engine, wl, smollm2, _through(lines, "ann b5 maxthreads 1024"))[0] is None
    over = _with_tiles(lines, {"l15": "1 1 8 1 1", "l16": "1 1 48 1 1"})
    refused, c = feed_constraint(engine, wl, smollm2, _through(over, "tile l16 m=4 = 1 1 48 1 1"))
    assert refused is not None and refused.split(" after ", 1)[1].endswith("tile l16 m=4 = 1 1 4'"), refused


def test_no_rule_on_a_cpu_target_or_without_the_bounds():
    """The rule needs MetaSchedule's GPU bounds: none on a CPU target, nor without `max_threads_per_block` in the
    target."""
    from little_dragon.generation.constrained import _target_thread_bounds

    assert _target_thread_bounds('{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, '
                                 '"thread_warp_size": 32}') == (32, 1024)
    assert _target_thread_bounds('{"kind": "cuda", "arch": "sm_90"}') is None
    assert _target_thread_bounds("not json") is None
