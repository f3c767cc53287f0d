"""No script ends before it has changed the kernel (issue 16, session 17). A script of lookups and samples only leaves
the workload's kernel as it was: the evaluator's ``no_op``, never rewarded. The end check refused such scripts
(resampled), but the first pass kept them: 38 of the constrained first pass's 177 failures on session 17's CPU sealed
runs. The constraint now masks `post` while the prefix's kernel is the workload's (``ScheduleState.unchanged``).

Real parts only: a TE kernel made into TensorIR, the codec, TVM, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest
from dragon_testkit import feed_constraint, matmul_tensors, prim_module


@pytest.fixture(scope="module")
def workload():
    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(16, 8, 32)), "llvm")


@pytest.mark.parametrize("head", ["", "blk C\n", "blk C\nloops b0 3\n", "blk C\nloops b0 3\nptile l1 = 4 2\n"])
def test_post_is_masked_while_the_kernel_is_unchanged(engine, smollm2, workload, head):
    """Lookups and samples only: `post *` (and the explicit `post` section) may not come yet; another line may (a lookup
    not yet in its run: ``test_constrained_lookups.py``)."""
    assert feed_constraint(engine, workload, smollm2, head + "post *\n")[0] is not None, head
    assert feed_constraint(engine, workload, smollm2, head + "post\n")[0] is not None, head
    assert feed_constraint(engine, workload, smollm2, head + "blk root\n")[0] is None, head


@pytest.mark.parametrize("line", ["par l0", "ann b0 producer 1", "split l2 _ 4"])
def test_post_is_allowed_once_a_line_changed_the_kernel(engine, smollm2, workload, line):
    """A transform or an annotation changes the kernel: the script may end (the end check still judges it)."""
    head = "blk C\nloops b0 3\n" + line + "\n"
    assert feed_constraint(engine, workload, smollm2, head + "post *\n")[0] is None, line
