"""A max or min reduction repeated over the same inputs is no restart.

``constrain_state.reduction_restarted_by_loop`` refuses a reduction block under a loop it does not use, below where
MetaSchedule's RewriteReductionBlock decomposes it: the init goes above that loop and a sum adds the loop's extent
times over (tests/generation/test_constrained_reduction_restart.py).  A max (or min) taken again over the same values
is the value it was, so the kernel stays right: session 23's CPU sealed softmax whose row max sat under the exp-sum's
reduction loop, which the judge scored correct and the rule refused.  The rule now lets such a reducer through when
nothing under the loop writes what it reads; a sum placed the same way, and a max whose input the loop changes, are
still refused (both compute wrong).

Real parts: TVM (the schedule, the llvm target's post-processors, the build and the kernel's numbers against numpy),
the codec.
"""
from __future__ import annotations

import numpy as np
import pytest
from dragon_testkit import end_check, prim_module, tvm_accepts

TARGET = {"kind": "llvm", "num-cores": 2}
# M = a row reduction of A, V = row sums of exp(A - M) (a softmax's max and exp-sum); M computed at V's reduction
# loop k2, which M does not use
M_UNDER_THE_EXPSUMS_REDUCTION = "blk M\nblk V\nloops b1 2\nat b0 l1\n"
REDUCERS = {"max": np.max, "min": np.min, "sum": np.sum}


def _softmax_sums_module(reducer: str):
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    m = te.compute((64,), lambda i: getattr(te, reducer)(a[i, k], axis=k), name="M")
    k2 = te.reduce_axis((0, 256), name="k2")
    v = te.compute((64,), lambda i: te.sum(te.exp(a[i, k2] - m[i]), axis=k2), name="V")
    return prim_module([a, v])


# M = row max of C, C = A - t rewritten at each iteration t of V's reduction loop: M's input changes with the loop
_MAX_OF_A_CHANGING_INPUT = """from tvm.script import ir as I
from tvm.script import tirx as T

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((64, 256), "float32"), Out: T.Buffer((64,), "float32")):
        T.func_attr({"tirx.noalias": True})
        C = T.sblock_alloc_buffer((64, 256))
        M = T.sblock_alloc_buffer((64,))
        V = T.sblock_alloc_buffer((64,))
        for i, k2 in T.grid(64, 256):
            for k in range(256):
                with T.sblock("C"):
                    v_i, v_k, v_t = T.axis.remap("SSS", [i, k, k2])
                    C[v_i, v_k] = A[v_i, v_k] - T.Cast("float32", v_t)
            for k in range(256):
                with T.sblock("M"):
                    v_i, v_k = T.axis.remap("SR", [i, k])
                    with T.init():
                        M[v_i] = T.float32(-3.0e38)
                    M[v_i] = T.max(M[v_i], C[v_i, v_k])
            with T.sblock("V"):
                v_i, v_k2 = T.axis.remap("SR", [i, k2])
                with T.init():
                    V[v_i] = T.float32(0.0)
                V[v_i] = V[v_i] + (A[v_i, v_k2] - M[v_i])
        for i in range(64):
            with T.sblock("Out"):
                v_i = T.axis.spatial(64, i)
                Out[v_i] = V[v_i]
"""
SPLIT_THE_OUTPUT = "blk Out\nloops b0 1\nsplit l0 _ 16\n"  # any script: the placement is in the kernel above


def _output(mod, text: str, a: np.ndarray) -> np.ndarray:
    """``text`` applied (with the llvm target's post-processors when it ends in `post *`), built, run on ``a``."""
    import tvm

    from little_dragon import codec
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text, sch, PostprocContext(mod, tvm.target.Target(TARGET)))
    out = tvm.runtime.tensor(np.full((64,), np.nan, np.float32))
    tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), out)
    return out.numpy()


def _restart(mod, text: str) -> list[str]:
    from little_dragon import codec
    from little_dragon.generation.constrain_state import reduction_restarted_by_loop, replay

    return reduction_restarted_by_loop(replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch.mod)


@pytest.mark.parametrize(("reducer", "right"), [("max", True), ("min", True), ("sum", False)])
def test_a_max_or_min_repeated_over_the_same_inputs_is_no_restart(reducer, right):
    """M at each of V's 256 iterations of k2, its init hoisted above k2 by the post-processing: a max or min of the
    same row again is the same, so the kernel is right and the rule and the end check accept it (both refused it
    before); a sum adds the row 256 times over, wrong, and still refused."""
    mod = _softmax_sums_module(reducer)
    assert tvm_accepts(mod, M_UNDER_THE_EXPSUMS_REDUCTION)
    a = np.random.default_rng(0).random((64, 256), dtype=np.float32) / 256  # a row sums to ~0.5: exp(A - M) > 0
    want = np.exp(a - REDUCERS[reducer](a, 1, keepdims=True)).sum(1)
    assert np.allclose(_output(mod, M_UNDER_THE_EXPSUMS_REDUCTION, a), want, rtol=1e-4)  # right before post
    after_post = _output(mod, M_UNDER_THE_EXPSUMS_REDUCTION + "post *\n", a)
    assert bool(np.allclose(after_post, want, rtol=1e-4)) == right
    assert _restart(mod, M_UNDER_THE_EXPSUMS_REDUCTION) == ([] if right else ["M", "k2", "256"])
    why = end_check(mod, M_UNDER_THE_EXPSUMS_REDUCTION + "post *\n", TARGET)
    assert (why == "") if right else why.startswith("block M would compute its reduction again"), why


def test_a_max_whose_input_the_loop_rewrites_still_restarts():
    """C = A - t is written at each iteration t of V's loop, and M is the row max of C: with its init hoisted M keeps
    the largest max seen (that of t = 0), not C's of the iteration, so the kernel is wrong after post-processing.  M's
    input is written under the loop, and the rule still refuses."""
    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(_MAX_OF_A_CHANGING_INPUT)
    assert tvm_accepts(mod, SPLIT_THE_OUTPUT)
    a = np.random.default_rng(0).random((64, 256), dtype=np.float32)
    want = (a - (a.max(1, keepdims=True) - np.arange(256, dtype=np.float32))).sum(1)
    assert np.allclose(_output(mod, SPLIT_THE_OUTPUT, a), want, rtol=1e-4)
    assert not np.allclose(_output(mod, SPLIT_THE_OUTPUT + "post *\n", a), want, rtol=1e-4)
    assert _restart(mod, SPLIT_THE_OUTPUT) == ["M", "k2", "256"]
    assert end_check(mod, SPLIT_THE_OUTPUT + "post *\n", TARGET).startswith("block M would compute its reduction")
