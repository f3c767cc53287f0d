"""`rfactor` under the constraint (issue 16, session 17): TVM's RFactor takes a serial loop with one reduction block
under it that none of the block's data-parallel iters uses (and the rest of ``LoopPropertyError::CheckLoopProperty``),
and a factor axis in [-(ndim + 1), ndim]. In session 16's CPU sealed runs `rfactor` of a loop of an elementwise block
was 41 of the constrained first pass's 124 failures. The constraint reads those facts off the live schedule
(``ScheduleState.loop_rfactor``).

Real parts only: TE kernels made into TensorIR, the codec, TVM's verdicts, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest
from dragon_testkit import feed_constraint, prefix_state, prim_module, tvm_accepts


def _row_sum_then_scale():
    """B[i] = sum_k A[i, k]; C[i] = 2 B[i]: a reduction block, then an elementwise one (the shape of layer_norm's
    mean, where the tiny model wrote `rfactor` of the elementwise block's loops)."""
    from tvm import te

    a = te.placeholder((4, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    b = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="B")
    c = te.compute((4,), lambda i: b[i] * 2.0, name="C")
    return [a, c]


def _matmul():
    from dragon_testkit import matmul_tensors

    return matmul_tensors(16, 8, 32)


# prefixes: the loops as they come, one split of the reduction loop, the reduction decomposed (no block with init)
CASES = [
    (_row_sum_then_scale, "blk B\nblk C\nloops b0 2\nloops b1 1\n"),
    (_row_sum_then_scale, "blk B\nblk C\nloops b0 2\nloops b1 1\ntile l1 = 16 4\n"),
    (_row_sum_then_scale, "blk B\nblk C\nloops b0 2\nloops b1 1\ndecomp b0 l0\n"),
    (_row_sum_then_scale, "blk B\nblk C\nloops b0 2\nloops b1 1\npar l0\n"),
    (_matmul, "blk C\nloops b0 3\n"),
    (_matmul, "blk C\nloops b0 3\nreorder l2 l0 l1\n"),
]


@pytest.mark.parametrize("tensors, head", CASES)
def test_rfactor_is_allowed_exactly_where_tvm_applies_it(engine, smollm2, tensors, head):
    """Every live loop, every factor axis from one below TVM's range to one above it: the constraint allows the line
    exactly when TVM applies it (none of these kernels reaches a check the rule leaves to TVM)."""
    from little_dragon.generation.constrained import Workload

    mod = prim_module(tensors())
    wl = Workload(mod, "llvm")
    st = prefix_state(mod, head)
    allowed = applied = 0
    for loop in sorted(st.loops):
        for axis in range(-4, 4):
            line = f"rfactor l{loop} {axis}\n"
            ok = tvm_accepts(mod, head + line)
            assert (feed_constraint(engine, wl, smollm2, head + line)[0] is None) == ok, (head, line, ok)
            allowed += ok
            applied += 1
    assert applied and (allowed or "decomp" in head or "par" in head), (head, allowed)


def test_the_rule_masks_the_sealed_failure_and_keeps_the_reduction_loop(engine, smollm2):
    """The sealed runs' failing line (`rfactor` of the elementwise block's loop) is masked at the loop; the reduction
    loop's `rfactor` is allowed and TVM applies it."""
    from little_dragon.generation.constrained import Workload

    mod = prim_module(_row_sum_then_scale())
    wl = Workload(mod, "llvm")
    head = "blk B\nblk C\nloops b0 2\nloops b1 1\n"
    st = prefix_state(mod, head)
    assert st.loop_rfactor == {1: 1}
    assert feed_constraint(engine, wl, smollm2, head + "rfactor l2 0\n")[0] is not None
    assert not tvm_accepts(mod, head + "rfactor l2 0\n")
    assert feed_constraint(engine, wl, smollm2, head + "rfactor l1 0\n")[0] is None
    assert tvm_accepts(mod, head + "rfactor l1 0\n")
