"""The judge's replay never carries one script into the next: TVM 0.27 writes into the module it schedules after the
root block is replaced (tests/tvmx/test_schedule.py), and a worker keeps a workload's module for all its scripts.
Session 16's CPU sealed runs: a script that annotated the root, split a loop and failed left the cached module with
one loop more, and the workload's next scripts were judged apply errors on lines that apply (10 of 1,008 attempts).
Real TVM, the codec, the judge's own replay; no pool (the worker calls this function with its cached module)."""
from __future__ import annotations

import pytest


def _rms_like():
    """Two elementwise blocks and a reduction, buffers allocated under the root (a fused workload)."""
    import tvm
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    cast = te.compute((64, 256), lambda i, j: a[i, j] * 2.0, name="T_cast")
    k = te.reduce_axis((0, 256), name="k")
    red = te.compute((64,), lambda i: te.sum(cast[i, k], axis=k), name="T_red")
    out = te.compute((64, 256), lambda i, j: cast[i, j] / red[i], name="T_out")
    return tvm.IRModule({"main": te.create_prim_func([a, out])})


FAILS_AFTER_A_SPLIT = "blk root\nblk T_cast\nann b0 producer 1\nloops b1 2\ntile l1 = 8 32\nrfactor l3 1\n"
VALID = "blk T_cast\nloops b0 2\ntile l1 = 16 16\nblk root\nann b1 parallel 64\n"


def test_a_failed_script_leaves_the_workload_for_the_next_one():
    """The same module object, as the worker's cache holds it: a script that fails after splitting a loop (and
    annotating the root first), then a valid one; the valid one applies, and the failure names its own line."""
    from little_dragon import codec
    from little_dragon.codec.script import decode_with_lines
    from little_dragon.evaluator.replay import ReplayFailure, replay
    from little_dragon.tvmx.schedule import fingerprint

    mod = _rms_like()
    before = fingerprint(mod)
    bad, bad_lines = decode_with_lines(FAILS_AFTER_A_SPLIT, codec.SyntaxOnlyContext())
    with pytest.raises(ReplayFailure) as e:
        replay(mod, bad, [], lines=bad_lines, text=FAILS_AFTER_A_SPLIT)
    assert e.value.category == "apply_error"
    assert str(e.value).startswith("line 6:"), str(e.value)    # `rfactor`, not a line that applies
    assert fingerprint(mod) == before
    good, good_lines = decode_with_lines(VALID, codec.SyntaxOnlyContext())
    done = replay(mod, good, [], lines=good_lines, text=VALID)
    sch = done.sch
    assert len(sch.get_loops(sch.get_sblock("T_cast"))) == 3


def test_a_block_annotated_as_layout_rewrite_preprocessing_is_a_build_error():
    """`ann b preproc 1` on a block that is no layout-rewrite pre-processing block: TVM's RemoveWeightLayoutRewriteBlock
    (MetaSchedule's builder's first step) fails on it with an InternalError, which escaped the judge's replay as an
    "evaluator internal error" (session 19's CPU sealed run, 2 attempts); it is the script's build error, and the
    constraint's end check refuses the script for the same reason."""
    import json

    from dragon_testkit import LLVM

    from little_dragon import codec
    from little_dragon.evaluator.replay import ReplayFailure, replay
    from little_dragon.generation.schedule_worker import finish_check
    from little_dragon.tvmx.postprocs import target_postprocs

    mod, target = _rms_like(), json.dumps(LLVM)
    ctx = codec.PostprocContext(mod, target)
    for text in ("blk T_cast\nann b0 preproc 1\npost *\n", VALID + "blk T_red\nann b2 preproc 1\npost *\n"):
        with pytest.raises(ReplayFailure) as e:
            replay(mod, codec.decode(text, ctx), target_postprocs(mod, target))
        assert e.value.category == "build_error" and "layout-rewrite" in str(e.value), str(e.value)
        assert finish_check(mod, ctx, text).startswith("layout rewrite: "), text
    done = replay(mod, codec.decode(VALID + "post *\n", ctx), target_postprocs(mod, target))
    assert not done.layout_rewrite
    assert finish_check(mod, ctx, VALID + "post *\n") == ""
