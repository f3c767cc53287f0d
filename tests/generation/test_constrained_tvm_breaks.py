"""Kernels TVM 0.27 breaks without an error (``generation.tvm_breaks``; session 27's CPU sealed wrong results, traced in
session 28).  Each test schedules a small TE kernel with TVM's own primitives the way the wrong attempt did, builds and
runs it on the CPU against numpy (the wrong result is TVM's, shown here), and checks the rule finds it; the same kernel
without the breaking step computes right and the rule stays quiet.  The end check (``finish_check``) refuses a codec
script of the vectorized case.

Real parts: TE kernels made into TensorIR, TVM's schedule primitives, lowering and LLVM code generation."""
from __future__ import annotations

import numpy as np
import pytest
from dragon_testkit import prim_module

LLVM = '{"kind": "llvm", "num-cores": 2}'


def _run(sch, *shapes_out, inputs):
    """Build ``sch``'s kernel for llvm and run it on ``inputs``; the outputs (NaN-filled before)."""
    import tvm

    f = tvm.tirx.build(sch.mod, target="llvm")
    outs = [tvm.runtime.tensor(np.full(s, np.nan, "float32")) for s in shapes_out]
    f(*[tvm.runtime.tensor(x) for x in inputs], *outs)
    return [o.numpy() for o in outs]


def _lowered(sch):
    import tvm

    from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES
    from little_dragon.tvmx.build import lower_for_target

    host, devices = lower_for_target(sch.mod, tvm.target.Target("llvm"), skip=END_CHECK_SKIPPED_PASSES)
    return [host, *devices]


@pytest.fixture(scope="module")
def row_sum_then_double():
    """S[i] = sum_k A[i, k]; R[i] = 2 S[i] over 16 x 32."""
    from tvm import te

    a = te.placeholder((16, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    s = te.compute((16,), lambda i: te.sum(a[i, k], axis=k), name="S")
    return prim_module([a, te.compute((16,), lambda i: s[i] * 2.0, name="R")])


def test_a_vectorized_loop_over_a_compacted_buffer_writes_one_element(row_sum_then_double):
    """S computed at R's row loop, that loop vectorized: TVM shrinks S to one element inside the loop and vectorizes
    without widening it, so every lane writes S[0] (`S[T.Broadcast(0, 16)] = <16 lanes>`) and R is one row's sum,
    doubled, sixteen times.  Serial, the same kernel is right."""
    from tvm import s_tir

    from little_dragon.generation.tvm_breaks import vector_stores_into_one_element

    a = np.random.default_rng(0).random((16, 32), dtype="float32")
    for vectorized in (False, True):
        sch = s_tir.Schedule(row_sum_then_double)
        (i,) = sch.get_loops(sch.get_sblock("R"))
        sch.compute_at(sch.get_sblock("S"), i)
        if vectorized:
            sch.vectorize(i)
        (r,) = _run(sch, (16,), inputs=[a])
        found = vector_stores_into_one_element(_lowered(sch))
        if vectorized:
            assert np.abs(r - 2 * a.sum(1)).max() > 1.0  # TVM's wrong result
            assert len(set(r.tolist())) == 1              # one value for every row
            assert found and found[0].startswith("S[T.Broadcast(0, 16)]"), found
        else:
            np.testing.assert_allclose(r, 2 * a.sum(1), rtol=1e-5)
            assert found == []


def test_the_end_check_refuses_the_vectorized_script(row_sum_then_double):
    """The same schedule written in the codec: the end check refuses it, naming the store; without `vec` it passes."""
    from little_dragon.codec import PostprocContext
    from little_dragon.generation.schedule_worker import finish_check

    ctx = PostprocContext(row_sum_then_double, LLVM)
    base = "blk S\nblk R\nloops b1 1\nat b0 l0\n"
    why = finish_check(row_sum_then_double, ctx, base + "vec l0\npost *\n")
    assert why.startswith("vector stored into one element: S[T.Broadcast(0, 16)]"), why
    assert finish_check(row_sum_then_double, ctx, base + "post *\n") == ""


@pytest.fixture(scope="module")
def sum_of_squares():
    """S[i] = sum_k A[i, k]^2 over 8 x 256."""
    from tvm import te

    a = te.placeholder((8, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    return prim_module([a, te.compute((8,), lambda i: te.sum(a[i, k] * a[i, k], axis=k), name="S")])


def test_blockize_drops_the_predicate_that_ran_an_update_once(sum_of_squares):
    """A unit loop added above k and split by 256 (`u_0 * 256 + u_1 < 1`: one iteration runs), then the row loop
    blockized: TVM drops the predicate, the update runs 256 times and each row's sum comes out 256 times too large.
    Without the blockize the predicate holds and the sums are right."""
    from tvm import s_tir

    from little_dragon.generation.tvm_breaks import updates_without_their_predicate

    a = np.random.default_rng(1).random((8, 256), dtype="float32")
    for blockized in (False, True):
        sch = s_tir.Schedule(sum_of_squares)
        b = sch.get_sblock("S")
        sch.add_unit_loop(sch.get_loops(b)[1])
        sch.split(sch.get_loops(b)[1], [None, 256])
        if blockized:
            sch.blockize(sch.get_loops(b)[0])
        (s,) = _run(sch, (8,), inputs=[a])
        found = updates_without_their_predicate(sch.mod)
        if blockized:
            np.testing.assert_allclose(s / (a * a).sum(1), 256.0, rtol=1e-4)  # TVM's wrong result
            assert found and found[0].startswith("block S updates S under loop"), found
        else:
            np.testing.assert_allclose(s, (a * a).sum(1), rtol=1e-5)
            assert found == []


def test_blockize_leaves_a_reduction_over_rows_its_buffer_lacks(sum_of_squares):
    """k split 4 x 64, its outer part split _ x 64 (`k0_0 * 64 + k0_1 < 4`), k0_1 fused with k1 (4,096 iterations),
    then the row loop blockized: the inner block reduces over 4,096 of A's 256 columns (the predicate dropped).  The
    region rule finds the read outside A; without the blockize the region stays inside.  A padding block, whose declared
    read region leaves its input where its condition is false, is not one."""
    import tvm
    from tvm import s_tir, te

    from little_dragon.generation.tvm_breaks import regions_outside_buffers

    for blockized in (False, True):
        sch = s_tir.Schedule(sum_of_squares)
        b = sch.get_sblock("S")
        k0, k1 = sch.split(sch.get_loops(b)[1], [None, 64])
        _, k01 = sch.split(k0, [None, 64])
        sch.fuse(k01, k1)
        if blockized:
            sch.blockize(sch.get_loops(b)[0])
        found = regions_outside_buffers(sch.mod)
        if blockized:
            assert any("reads A[" in f and "whose extent is 256" in f for f in found), found
        else:
            assert found == []
    x = te.placeholder((8,), name="X")
    pad = prim_module([x, te.compute((10,), lambda i: tvm.tirx.if_then_else(
        tvm.tirx.all(i >= 1, i < 9), x[i - 1], tvm.tirx.const(0.0, "float32")), name="P")])
    assert "X[v_i - 1]" in pad.script()  # the declared region: X[-1..8] of 8
    assert regions_outside_buffers(pad) == []


def test_reindex_of_a_blockized_accumulator_copies_nothing_back():
    """A row max, its row loop blockized, then the update block's read 0 (the accumulator) reindexed: TVM moves the
    max to a new buffer with a copy-in and no write-back, so S keeps its init (-3.4e38).  The init rule finds it;
    reindexing read 0 of the block not blockized (A, its input) is right."""
    from tvm import s_tir, te

    from little_dragon.generation.tvm_breaks import inits_without_their_update

    a_ = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    mod = prim_module([a_, te.compute((8,), lambda i: te.max(a_[i, k], axis=k), name="S")])
    a = np.random.default_rng(2).random((8, 16), dtype="float32")
    for blockized in (False, True):
        sch = s_tir.Schedule(mod)
        b = sch.get_sblock("S")
        if blockized:
            sch.blockize(sch.get_loops(b)[0])
        sch.reindex(b, ("read", 0))
        (s,) = _run(sch, (8,), inputs=[a])
        found = inits_without_their_update(sch.mod)
        if blockized:
            assert (s < -1e38).all()  # TVM's wrong result: the init value
            assert found and "init writes S" in found[0], found
        else:
            np.testing.assert_allclose(s, a.max(1))
            assert found == []


PREDICATED_WRITE = """
# from tvm.script import ir as I
# from tvm.script import tirx as T
@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((64,), "float32")):
        for i in range(128):
            with T.sblock("W"):
                v = T.axis.spatial(128, i)
{where}
                T.reads()
                T.writes(A[v])
                A[v] = T.float32(1.0)
"""


def test_a_block_kept_inside_its_buffer_by_its_predicate_is_not_refused():
    """A block over 128 iterations writing a 64-element buffer: refused without a predicate, not with `i < 64` (its
    iter domain runs past the buffer, its predicate does not: MetaSchedule's padded write-back stages, seven measured
    records of the H200 harvest)."""
    from little_dragon.generation.tvm_breaks import regions_outside_buffers
    from little_dragon.workloads.store import module_from_script

    bare = module_from_script(PREDICATED_WRITE.replace("{where}\n", ""), None, where="test")
    assert regions_outside_buffers(bare) == ["block W writes A[0...127] along dimension 0, whose extent is 64"]
    kept = module_from_script(PREDICATED_WRITE.replace("{where}", "                T.where(i < 64)"), None, where="test")
    assert regions_outside_buffers(kept) == []
