"""A reduction block may not sit under a loop it does not use, below where the post-processing decomposes it.

`rat` of a layer norm's variance under the mean's reduction loop is a schedule TVM applies, and before
post-processing it computes right, if slowly: the variance block starts its reduction again (its init) at each
iteration of the loop it does not use, and the last one wins.  MetaSchedule's RewriteReductionBlock then decomposes
every reduction at the first loop above it that is not data parallel (TVM's ``GetLoopIterType``, over all blocks
under the loop: the mean's reduction loop), so the init runs once, above that loop, and the block sums all of its
iterations: session 23's CPU sealed `layer_norm` wrong result (`rat b10 l2`).  The constraint refuses such a line at
its end as if TVM had (``constrain_state.reduction_restarted_by_loop``, ``schedule_worker.prefix_facts``), and the
end-of-script check refuses a script that gets there by other lines (``schedule_worker.finish_check``).

Real parts: TVM (the schedule, the llvm target's post-processors, the build and the kernel's numbers against numpy),
the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import numpy as np
from dragon_testkit import feed_constraint, mean_variance_module, tvm_accepts

TARGET = {"kind": "llvm", "num-cores": 2}
# M = row means' sums of A, V = row sums of (A - M)^2.  l0/l1: M's row and reduction loops.
UNDER_THE_MEANS_REDUCTION = "blk M\nblk V\nloops b0 2\nrat b1 l1\n"
UNDER_THE_MEANS_ROW = "blk M\nblk V\nloops b0 2\nrat b1 l0\n"


def _computes_right(mod, text: str) -> bool:
    """``text`` applied (with its `post *`, the llvm target's post-processors) and built; its numbers against numpy."""
    import tvm

    from little_dragon import codec
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text, sch, PostprocContext(mod, tvm.target.Target(TARGET)))
    a = np.random.default_rng(0).random((64, 256), dtype=np.float32)
    out = tvm.runtime.tensor(np.full((64,), np.nan, np.float32))
    tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), out)
    centred = a - a.sum(1, keepdims=True)
    return bool(np.allclose(out.numpy(), (centred * centred).sum(1), rtol=1e-4))


def _schedule(mod, text: str):
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    return replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch


def test_the_post_processing_makes_the_restarted_reduction_wrong():
    """The hazard is real and is the post-processing's: TVM applies the line, the kernel computes right without
    post-processing and wrong with it; the rule names the block, the loop and its extent.  Under the mean's row
    loop (data parallel) the variance computes right both ways and the rule is silent."""
    from little_dragon.generation.constrain_state import reduction_restarted_by_loop

    mod = mean_variance_module()
    assert tvm_accepts(mod, UNDER_THE_MEANS_REDUCTION)
    assert _computes_right(mod, UNDER_THE_MEANS_REDUCTION)
    assert not _computes_right(mod, UNDER_THE_MEANS_REDUCTION + "post *\n")
    assert reduction_restarted_by_loop(_schedule(mod, UNDER_THE_MEANS_REDUCTION).mod) == ["V", "k", "256"]

    assert _computes_right(mod, UNDER_THE_MEANS_ROW + "post *\n")
    assert reduction_restarted_by_loop(_schedule(mod, UNDER_THE_MEANS_ROW).mod) == []


def test_the_constraint_refuses_the_line_and_the_end_check_the_script(engine, smollm2):
    """Fed token by token, every token of the `rat` line is allowed (the rule needs the applied schedule) and the
    line is refused at its end, naming the block and the loop; the harmless `rat` passes.  The end-of-script check
    refuses the finished script too (the net for lines other than moves that put a loop there)."""
    import tvm

    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.generation.constrained import Workload, clear_caches
    from little_dragon.generation.schedule_worker import finish_check

    clear_caches()
    mod = mean_variance_module()
    wl = Workload(mod, json.dumps(TARGET))
    where, c = feed_constraint(engine, wl, smollm2, UNDER_THE_MEANS_REDUCTION)
    assert where is None and c.dead and c.error.startswith("apply: block V would compute its reduction again at each "
                                                           "of the 256 iterations of loop k"), (where, c.error)
    where, c = feed_constraint(engine, wl, smollm2, UNDER_THE_MEANS_ROW)
    assert where is None and not c.dead, (where, c.error)

    context = PostprocContext(mod, tvm.target.Target(TARGET))
    assert finish_check(mod, context, UNDER_THE_MEANS_REDUCTION + "post *\n").startswith("block V would compute")
    assert finish_check(mod, context, UNDER_THE_MEANS_ROW + "post *\n") == ""
