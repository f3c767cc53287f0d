"""A kernel that TVM's StorageRewrite breaks is refused at the end of the script, read off its lowered code.

StorageRewrite gives a statement's output the storage of an input it reads last at the same index, assuming each
element is written once (apache/tvm#759).  Session 24's most common CPU sealed wrong result (`rms_norm`) was a
schedule that put `R[i] = rsqrt(S[i] / n + eps)` under a column loop of another block (here C, a scaled copy of B):
right as scheduled, but lowered, the pass folds R into S, and the column loop applies the rsqrt to its own output 256
times.  MetaSchedule's builder runs the same pass.  The end check refuses such a script
(``schedule_worker.finish_check``: ``constrain_state.in_place_fold_candidates`` on the scheduled kernel,
``repeated_in_place_update`` on the lowered one); no kernel runs for it.

Real parts: TVM (the llvm target's post-processors, the lowering, the build and the kernel's numbers against
numpy), the codec.
"""
from __future__ import annotations

import numpy as np
import pytest
from dragon_testkit import end_check

TARGET = {"kind": "llvm", "num-cores": 2}
SPLIT_THE_OUTPUT = "blk Out\nloops b0 2\ntile l1 = 4 64\npost *\n"  # any script: the fold is in the kernel below


_KERNEL = """
@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((64, 256), "float32"), B: T.Buffer((256,), "float32"), Out: T.Buffer((64, 256), "float32")):
        T.func_attr({"tirx.noalias": True})
        S = T.sblock_alloc_buffer((64,))
        R = T.sblock_alloc_buffer((64,))
        C = T.sblock_alloc_buffer((256,))
        for i, k in T.grid(64, 256):
            with T.sblock("S"):
                v_i, v_k = T.axis.remap("SR", [i, k])
                with T.init():
                    S[v_i] = T.float32(0.0)
                S[v_i] = S[v_i] + A[v_i, v_k] * A[v_i, v_k]
%s
        for i, j in T.grid(64, 256):
            with T.sblock("Out"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                Out[v_i, v_j] = A[v_i, v_j] * R[v_i] * C[v_j]
"""
_C_BLOCK = """with T.sblock("C"):
    v_j = T.axis.spatial(256, {j})
    {where}C[v_j] = B[v_j] * T.float32(2.0)
"""
_R_BLOCK = """with T.sblock("R"):
    v_i = T.axis.spatial(64, i)
    {where}R[v_i] = T.rsqrt(S[v_i] / T.float32(256.0) + T.float32(1e-05))
"""
# where R runs: under C's column loop, which R does not use (as the model's `rms_norm` scripts put it), that loop split
# with a guard for its padding (`T.where`), or unrolled; or in a loop of its own ("apart": computed once a row)
_NESTS = {
    "columns": ("for i, j in T.grid(64, 256):", "j", ""),
    "guarded": ("for i, j0, j1 in T.grid(64, 22, 12):", "j0 * 12 + j1", "T.where(j0 * 12 + j1 < 256)\n    "),
    "unrolled": ("for i in range(64):\n    for j in T.unroll(256):", "j", ""),
    # an unrolled padding loop (`T.where(u < 1)`): lowered, nine dead copies of the update under `if k < 1` (k = 1..9,
    # the end check's lowering leaves them unsimplified) that the rule took for other writes of S (session 25's miss)
    "padded_unrolled": ("for i, j in T.grid(64, 256):\n    for u in T.unroll(10):", "j", "T.where(u < 1)\n    "),
}


def _folding_module(placement: str = "columns"):
    """S = row sums of A^2; C = 2 B; R = rsqrt(S / 256 + eps), placed as ``placement`` says (``_NESTS``, or
    "apart"); Out = A R C."""
    import textwrap

    from little_dragon.workloads.store import module_from_script

    if placement == "apart":
        c, r = _C_BLOCK.format(j="j", where=""), _R_BLOCK.format(where="")
        middle = "for j in range(256):\n" + textwrap.indent(c, "    ") + "for i in range(64):\n" + textwrap.indent(r, "    ")
    else:
        loops, j, where = _NESTS[placement]
        body = _C_BLOCK.format(j=j, where=where) + _R_BLOCK.format(where=where)
        middle = loops + "\n" + textwrap.indent(body, "    " * (1 + loops.count("\n")))
    header = "from tvm.script import ir as I\nfrom tvm.script import tirx as T\n"
    return module_from_script(header + _KERNEL % textwrap.indent(middle, "        ").rstrip("\n"))


def _computes_right(mod, storage_rewrite: bool = True) -> bool:
    import tvm

    rng = np.random.default_rng(0)
    a, b = rng.random((64, 256), dtype=np.float32), rng.random(256, dtype=np.float32)
    out = tvm.runtime.tensor(np.full((64, 256), np.nan, np.float32))
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": not storage_rewrite}):
        kernel = tvm.compile(mod, target="llvm")
    kernel(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    want = a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-5) * (2 * b)
    return bool(np.allclose(out.numpy(), want, rtol=1e-4))


@pytest.mark.parametrize("placement", sorted(_NESTS))
def test_the_fold_is_what_breaks_the_kernel_and_the_end_check_refuses_it(placement):
    mod = _folding_module(placement)
    assert not _computes_right(mod)                        # what the judge sees: a wrong result
    assert _computes_right(mod, storage_rewrite=False)     # the schedule itself is right
    why = end_check(mod, SPLIT_THE_OUTPUT, TARGET)
    assert why.startswith("in-place fold:") and "block R" in why and "apache/tvm#759" in why, why


def test_the_lowered_code_says_it_without_running_anything():
    import tvm

    from little_dragon.generation.constrain_state import in_place_fold_candidates, repeated_in_place_update
    from little_dragon.tvmx.build import lower_for_target

    mod = _folding_module()
    assert in_place_fold_candidates(mod) == [["R", "S", "R", "j"]]
    host, devices = lower_for_target(mod, "llvm")
    assert repeated_in_place_update([host, *devices], {"S", "R"}) == ["S", "loop j"]
    assert repeated_in_place_update([host, *devices], {"C"}) == []  # only the candidates' buffers are read
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": True}):
        host, devices = lower_for_target(mod, "llvm")
    assert repeated_in_place_update([host, *devices], {"S", "R"}) == []  # without the pass: no fold


def test_the_same_blocks_in_loops_of_their_own_are_accepted():
    """R in a loop of its own: computed once per row, right with the pass, no candidate, and the script accepted."""
    from little_dragon.generation.constrain_state import in_place_fold_candidates

    mod = _folding_module("apart")
    assert _computes_right(mod)
    assert in_place_fold_candidates(mod) == []
    assert end_check(mod, SPLIT_THE_OUTPUT, TARGET) == ""


# lowered code as StorageRewrite leaves a fold (S updated in place), the update in the else branch of a column guard
_ELSE_KERNEL = """from tvm.script import ir as I
from tvm.script import tirx as T

@I.ir_module
class Module:
    @T.prim_func
    def main(B: T.Buffer((256,), "float32"), S: T.Buffer((64,), "float32"), C: T.Buffer((256,), "float32")):
        for i, j in T.grid(64, 256):
            if %s:
                C[j] = B[j] * T.float32(2.0)
            else:
                S[i] = T.rsqrt(S[i] + T.float32(1.0))
"""


@pytest.mark.parametrize(("guard", "runs"), [("j < 255", 1), ("j >= 2", 2)])
def test_an_update_in_an_else_branch_runs_where_its_guard_does_not(guard, runs):
    """The else branch runs where the guard is false: once, at the last column (the kernel applies the rsqrt once),
    or at the first two (twice).  The rule reads it under the guard's negation; under the guard itself it called the
    first a repeat and missed the second."""
    import tvm

    from little_dragon.generation.constrain_state import repeated_in_place_update
    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(_ELSE_KERNEL % guard)
    s = tvm.runtime.tensor(np.full(64, 3.0, np.float32))
    tvm.compile(mod, target="llvm")(tvm.runtime.tensor(np.ones(256, np.float32)), s,
                                    tvm.runtime.tensor(np.zeros(256, np.float32)))
    want = np.float32(3.0)
    for _ in range(runs):
        want = 1 / np.sqrt(want + 1)
    assert np.allclose(s.numpy(), want)
    assert repeated_in_place_update([mod], {"S"}) == ([] if runs == 1 else ["S", "loop j"])


# S = row sums of A^2, R = rsqrt(S / 256 + eps) under a fused loop f whose guard picks R's row (`i + f % 512` where
# `f % 512 < 1`), read from S directly or through a copy stage Sc (a `cread`); Out = A R (2 B)
_FUSED_KERNEL = """from tvm.script import ir as I
from tvm.script import tirx as T

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((64, 256), "float32"), B: T.Buffer((256,), "float32"), Out: T.Buffer((64, 256), "float32")):
        T.func_attr({"tirx.noalias": True})
        S = T.sblock_alloc_buffer((64,))
        Sc = T.sblock_alloc_buffer((64,))
        R = T.sblock_alloc_buffer((64,))
        for i, k in T.grid(64, 256):
            with T.sblock("S"):
                v_i, v_k = T.axis.remap("SR", [i, k])
                with T.init():
                    S[v_i] = T.float32(0.0)
                S[v_i] = S[v_i] + A[v_i, v_k] * A[v_i, v_k]
        for i in range(64):
            with T.sblock("Sc"):
                v_i = T.axis.spatial(64, i)
                Sc[v_i] = S[v_i]
        for i, f in T.grid(64, 2048):
            with T.sblock("R"):
                v_i = T.axis.spatial(64, i + f %% 512)
                T.where(%s)
                R[v_i] = T.rsqrt(%s[v_i] / T.float32(256.0) + T.float32(1e-05))
        for i, j in T.grid(64, 256):
            with T.sblock("Out"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                Out[v_i, v_j] = A[v_i, v_j] * R[v_i] * (B[v_j] * T.float32(2.0))
"""


@pytest.mark.parametrize("read", ["S", "Sc"])
@pytest.mark.parametrize(("guard", "runs_twice"), [("f % 512 < 1", True), ("f < 1", False)])
def test_a_fused_guard_that_runs_the_block_again_at_a_later_iteration(read, guard, runs_twice):
    """`f % 512 < 1` runs R at f = 0, 512, 1024 and 1536, each time for row i (session 25's CPU sealed `rms_norm`
    wrong result: the rule looked for a loop R does not use, and at the guard's first two iterations only).  Folded,
    R applies the rsqrt to its row four times: wrong with the pass, right without, refused, also when R reads S
    through a copy stage (the pass folds S, Sc and R into one buffer).  `f < 1` runs R once a row: right, and
    accepted."""
    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(_FUSED_KERNEL % (guard, read))
    assert _computes_right(mod, storage_rewrite=False)
    assert _computes_right(mod) != runs_twice
    why = end_check(mod, SPLIT_THE_OUTPUT, TARGET)
    if runs_twice:
        assert why.startswith("in-place fold:") and "block R's output R the storage of S" in why, why
    else:
        assert why == "", why
