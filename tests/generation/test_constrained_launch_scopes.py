"""The end check refuses a read of on-chip memory outside the launch scope that wrote it (``launch_scopes``).

Session 20's H200 sealed wrong result (dense_bias_act construction, c65fcb3ded7b07d5 attempt 6): the matmul is computed
at the output block's innermost loop into shared memory, its own loops bound to blockIdx.z (8, predicate: z == 0
computes) and blockIdx.x (1), the output block outside them.  Here the same script on a smaller kernel of the same
form; the lowered code shows why it is wrong (no GPU needed): the shared stores run only at ``blockIdx_z < 1``, the
store of ``out`` at every blockIdx.z of 8, reading that thread block's shared memory.  Bound to threadIdx.y instead,
the same kernel is right (one thread block shares its memory, synced) and accepted.

Real parts: a TE kernel made into TensorIR, the codec, TVM's schedule, sm_90 post-processors and lowering."""
from __future__ import annotations

import pytest
from dragon_testkit import H200_TARGET, end_check, prim_module

# the sealed attempt's script, as it was written (two `fuse` lines end in a space)
SEALED = "".join(line + "\n" for line in [
    'blk matmul',
    'blk out',
    'blk root',
    'cons b0 1',
    'loops b3 2',
    'cat 4 8 16 32 64 128 256 512 = 1',
    'split l0 _ v0',
    'bind l2 tx',
    'at b0 l1',
    'scope b0 0 shared',
    'loops b0 6',
    'fuse l5 l6',
    'split l7 _ v0',
    'bind l8 bx',
    'ann b1 unroll cat unroll_gpu = 0',
    'loops b1 2',
    'fuse l9 ',
    'cat threads = 0',
    'split l10 _ v2',
    'bind l12 bz',
    'ann b1 unroll cat unroll_gpu = 3',
    'loops b1 3',
    'fuse l15 ',
    'bind l16 by',
    'post *',
])
THREAD_Y = SEALED.replace("bind l12 bz", "bind l12 ty")  # the same split on threadIdx.y: one thread block's memory


@pytest.fixture(scope="module")
def dense_bias():
    from tvm import te

    m, n, k = 64, 128, 32
    a = te.placeholder((m, k), name="A", dtype="float16")
    b = te.placeholder((n, k), name="B", dtype="float16")
    c = te.placeholder((n,), name="C", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    mm = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("float32") * b[j, r].astype("float32"), axis=r),
                    name="matmul")
    out = te.compute((m, n), lambda i, j: (mm[i, j] + c[j].astype("float32")).astype("float16"), name="out")
    return prim_module([a, b, c, out])


def _stores_and_guards(mod, text: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """For each buffer the lowered kernel stores to, the conditions around each store (as text), and the kernel's
    launch extents by axis."""
    import tvm
    from tvm.tirx import AttrStmt, BufferStore, IfThenElse

    from little_dragon import codec
    from little_dragon.codec import PostprocContext
    from little_dragon.generation.constrain_state import _inner_stmts
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text, sch, PostprocContext(mod, H200_TARGET))
    (device,) = lower_for_target(sch.mod, tvm.target.Target(H200_TARGET))[1]
    guards: dict[str, list[str]] = {}
    extents: dict[str, int] = {}

    def visit(stmt, conds: tuple) -> None:
        if isinstance(stmt, AttrStmt) and stmt.attr_key == "thread_extent":
            extents[str(stmt.node.thread_tag)] = int(stmt.value)
        if isinstance(stmt, BufferStore):
            guards.setdefault(str(stmt.buffer.name), []).append(" and ".join(conds))
        if isinstance(stmt, IfThenElse):
            visit(stmt.then_case, (*conds, str(stmt.condition)))
            return
        for x in _inner_stmts(stmt):
            visit(x, conds)

    for f in device.functions.values():
        visit(f.body, ())
    return guards, extents


def test_the_sealed_form_reads_shared_memory_its_thread_block_never_wrote(dense_bias):
    guards, extents = _stores_and_guards(dense_bias, SEALED)
    assert extents["blockIdx.z"] == 8
    shared = next(name for name in guards if name.startswith("matmul"))
    assert guards[shared] and all("blockIdx_z < 1" in g for g in guards[shared])   # z == 0 computes the matmul
    assert guards["out"] == [""]                                                   # every z writes out from it
    why = end_check(dense_bias, SEALED, H200_TARGET)
    assert why.startswith("read outside its launch scope: block out reads matmul_shared"), why
    assert "blockIdx.z (8)" in why


def test_the_same_split_on_a_thread_axis_shares_the_memory_and_is_accepted(dense_bias):
    guards, extents = _stores_and_guards(dense_bias, THREAD_Y)
    assert extents["threadIdx.y"] == 8 and "blockIdx.z" not in extents
    shared = next(name for name in guards if name.startswith("matmul"))
    assert all("threadIdx_y < 1" in g for g in guards[shared])   # one thread row computes, the thread block reads
    assert end_check(dense_bias, THREAD_Y, H200_TARGET) == ""


def test_a_shared_buffer_between_two_kernels_is_left_to_tvm():
    """A "shared" buffer one kernel writes and another reads: TVM allocates it in global memory on the host and
    passes it to both (session 26's correct conv2d_transpose attempts), so the rule compares blocks of one kernel."""
    from tvm.script import tirx as T

    from little_dragon.generation.launch_scopes import reads_outside_launch_scope

    @T.prim_func(s_tir=True)
    def two_kernels(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        s = T.sblock_alloc_buffer((64,), scope="shared")
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.sblock("fill"):
                    vi = T.axis.spatial(64, bx * 16 + tx)
                    s[vi] = a[vi] * T.float32(2)
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.sblock("use"):
                    vi = T.axis.spatial(64, bx * 32 + tx)
                    b[vi] = s[vi] + T.float32(1)

    import tvm

    from little_dragon.tvmx.schedule import fresh_schedule

    assert reads_outside_launch_scope(fresh_schedule(tvm.IRModule({"main": two_kernels}))) == []
