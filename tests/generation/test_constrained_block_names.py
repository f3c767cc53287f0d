"""A line may not give a second block a name another block has.

TVM names the block a primitive adds after the block or buffer it comes from, without making it unique: `rfactor` of a
loop already factored adds a second `E_rf`.  TVM applies it, and then a `blk` lookup of the name and the
post-processing's RewriteReductionBlock fail ("Found 2 blocks with the name"): session 23's CPU sealed verify error,
an attempt that wrote `rfactor l6 1` eight times.  The constraint refuses such a line at its end, as if TVM had
(``schedule_worker.repeated_name``, after the lines of ``MAKES_BLOCKS``).

Real parts: TVM (the schedule, the llvm target's post-processors), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest
from dragon_testkit import feed_constraint, prim_module, tvm_accepts

TARGET = {"kind": "llvm", "num-cores": 2}
ONCE = "blk E\nloops b0 2\ntile l1 = 16 16\nrfactor l3 0\n"
TWICE = ONCE + "rfactor l3 0\n"


def _module():
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    return prim_module([a, te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="E")])


def test_a_second_block_of_one_name_is_refused(engine, smollm2):
    """TVM applies the second `rfactor` and names a second `E_rf`; the post-processing then fails on the name.  The
    constraint allows every token of the line and refuses it at its end; one `rfactor` passes."""
    import tvm

    from little_dragon import codec
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.generation.constrain_state import block_name_counts, replay
    from little_dragon.generation.constrained import Workload, clear_caches
    from little_dragon.tvmx.schedule import fresh_schedule

    mod = _module()
    assert tvm_accepts(mod, TWICE)
    assert block_name_counts(replay(mod, codec.decode(TWICE, codec.SyntaxOnlyContext())).sch.mod)["E_rf"] == 2
    with pytest.raises(Exception, match="blocks with the name"):
        codec.apply(TWICE + "post *\n", fresh_schedule(mod), PostprocContext(mod, tvm.target.Target(TARGET)))
    codec.apply(ONCE + "post *\n", fresh_schedule(mod), PostprocContext(mod, tvm.target.Target(TARGET)))

    clear_caches()
    wl = Workload(mod, json.dumps(TARGET))
    where, c = feed_constraint(engine, wl, smollm2, TWICE)
    assert where is None and c.dead and c.error.startswith("apply: the line would name a second block E_rf"), \
        (where, c.error)
    where, c = feed_constraint(engine, wl, smollm2, ONCE)
    assert where is None and not c.dead, (where, c.error)
