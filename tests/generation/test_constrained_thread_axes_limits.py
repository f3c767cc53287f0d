"""Two end-check rules on thread axes from session 26's H200 sealed run (``schedule_worker.finish_check``).

- One block bound through two loops of one thread axis (``constrain_state.diagonal_thread_bindings``): TVM lowers the
  loops of one axis to one thread index, so the block runs only their diagonal.  The sealed wrong result: a row sum
  under `ax1_0` and `ax1_1`, both threadIdx.x 64, bound as ``ax1_0 * 64 + ax1_1``; its lowered load is
  ``threadIdx_x * 65``, 64 of 4,096 elements summed.  The nested-binding rule allows equal extents (MetaSchedule's
  cooperative fetch binds a copy block's own loop so inside its consumer's thread loop, and that is right: the copy
  block uses only its own loop), so this rule reads the block's bindings -- and its predicate: session 28's wrong
  result used one blockIdx.z loop in its binding and another only in its predicate (``inner < 1``), so only blockIdx.z
  0 computed.
- A launch over CUDA's per-axis limits (``constrain_state.launch_over_limits`` of the lowered device modules): at most
  64 threads along threadIdx.z.  VerifyGPUCode checks only the per-block total when the target gives no per-axis
  limits (the evaluation's do not); the sealed runtime error launched 512 along threadIdx.z.

Real parts: TE kernels made into TensorIR, the codec, TVM's schedule, post-processors for sm_90 and lowering up to code
generation (no GPU needed)."""
from __future__ import annotations

import itertools

import pytest
from dragon_testkit import H200_TARGET, prim_module

H200 = H200_TARGET

# S[i] = sum_k A[i, k] over 8 x 16: l0 (i), l1 (k); k split 4 x 4 (l2, l3), i on blockIdx.x
ROW_SUM = "blk S\nloops b0 2\nsplit l1 4 _\nbind l0 bx\n"
DIAGONAL = ROW_SUM + "bind l2 tx\nbind l3 tx\npost *\n"  # both parts of k on threadIdx.x 4: the sealed form
ONE_BOUND = ROW_SUM + "bind l3 tx\npost *\n"  # k's outer part a serial loop in each thread
TWO_AXES = ROW_SUM + "bind l2 ty\nbind l3 tx\npost *\n"  # k's parts on threadIdx.y and threadIdx.x
# C[i, j] = A[i, j] + B[j] over 8 x 16: i split 2 x 4 on blockIdx.x and threadIdx.x; B copied to shared memory at the
# threadIdx.x loop, its copy loop split 4 x 4 and the inner part bound to threadIdx.x 4 (MetaSchedule's cooperative
# fetch): the copy block sits under two threadIdx.x loops of extent 4 and uses only its own
COOPERATIVE = """blk C
loops b0 2
split l0 _ 4
bind l2 bx
bind l3 tx
cread b0 1 shared
at b1 l3
loops b1 3
split l6 _ 4
bind l8 tx
post *
"""
DIAGONAL_MESSAGE = "two thread loops of one axis in one block: block S binds its iters with loops k_0 (4) and k_1 (4)"


@pytest.fixture(scope="module")
def row_sum():
    from tvm import te

    from little_dragon.codec import PostprocContext

    a = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    mod = prim_module([a, te.compute((8,), lambda i: te.sum(a[i, k], axis=k), name="S")])
    return mod, PostprocContext(mod, H200)


def _lowered_devices(mod, ctx, text: str) -> list:
    """``text``'s kernel post-processed for the H200 and lowered as the end check lowers it: the device modules."""
    import tvm

    from little_dragon import codec
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text, sch, ctx)
    return lower_for_target(sch.mod, tvm.target.Target(H200))[1]


def _row_read(devices: list) -> set[int]:
    """The elements of A's first row that the kernel's block 0 reads: the kernel's one load of A (no loop in the
    kernel), its index evaluated at every thread of the block (the launch extents of the lowered code)."""
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import AttrStmt, BufferStore, For

    from little_dragon.generation.constrain_state import _function_bodies, _inner_stmts

    loads, extents, loops = [], {}, []

    def walk(stmt) -> None:
        if isinstance(stmt, AttrStmt) and stmt.attr_key == "thread_extent":
            extents[stmt.node.var] = int(stmt.value)
        if isinstance(stmt, For):
            loops.append(stmt)
        if isinstance(stmt, BufferStore) and getattr(getattr(stmt.value, "source", None), "name", "") == "A":
            loads.append(stmt.value)
        for x in _inner_stmts(stmt):
            walk(x)

    for mod in devices:
        for body in _function_bodies(mod):
            walk(body)
    assert len(loads) == 1 and not loops, (loads, loops)
    index = loads[0].indices[-1]
    threads = [v for v in extents if v.name.startswith("threadIdx")]
    read = set()
    for values in itertools.product(*(range(extents[v]) for v in threads)):
        analyzer = Analyzer()
        for v, x in zip([*extents], [0 if v.name.startswith("blockIdx") else values[threads.index(v)]
                                     for v in extents]):
            analyzer.bind(v, x)
        read.add(int(analyzer.simplify(index)))
    return read


def test_two_loops_of_one_axis_lower_to_one_index_and_are_refused(row_sum):
    """TVM applies and post-processes the script (the nested-binding rule allows equal extents); the lowered kernel
    launches 4 threads, and each reads A at ``threadIdx_x * 5``: 4 of a row's 16 elements, the diagonal of the two
    loops.  The end check refuses it."""
    from little_dragon import codec
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrain_state import diagonal_thread_bindings, nested_thread_bindings, replay
    from little_dragon.generation.schedule_worker import finish_check

    mod, ctx = row_sum
    assert check_module_script(DIAGONAL, mod, ctx).valid
    sch = replay(mod, codec.decode(DIAGONAL.replace("post *\n", ""), codec.SyntaxOnlyContext())).sch
    assert nested_thread_bindings(sch) == []
    assert len(diagonal_thread_bindings(sch)) == 1
    assert _row_read(_lowered_devices(mod, ctx, DIAGONAL)) == {0, 5, 10, 15}
    assert _row_read(_lowered_devices(mod, ctx, TWO_AXES)) == set(range(16))  # two axes: the whole row
    why = finish_check(mod, ctx, DIAGONAL)
    assert why.startswith(DIAGONAL_MESSAGE) and "threadIdx.x" in why, why


# C[i, j] = 2 A[i, j] over 8 x 16: i split 1 x 8, its unit outer part fused (TVM drops it from the block's binding),
# then split _ x 8 (l6: only in the block's predicate, ``l6 < 1``), l6 and i's inner part on blockIdx.x 8 (session 28's
# H200 wrong result, a `T_multiply_red` whose row loop and a predicate-only loop were both blockIdx.z 128)
PREDICATE_LOOP = "blk C\nloops b0 2\nsplit l0 1 8\nfuse l2\nsplit l4 _ 8\nbind l6 {axis}\nbind l3 bx\nbind l1 tx\npost *\n"


def test_a_loop_of_the_same_axis_in_the_predicate_alone_is_refused():
    """The block's binding uses one blockIdx.x loop and its predicate another: TVM lowers both to one index, so the
    kernel writes only ``C[threadIdx_x]`` under ``blockIdx_x < 1`` (row 0 of 8); the end check refuses it.  On
    blockIdx.y the predicate loop is a loop of its own (the rows written, by the blocks with blockIdx.y 0) and the end
    check accepts it."""
    from tvm import te

    from little_dragon import codec
    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrain_state import diagonal_thread_bindings, replay
    from little_dragon.generation.schedule_worker import finish_check

    a = te.placeholder((8, 16), name="A")
    mod = prim_module([a, te.compute((8, 16), lambda i, j: a[i, j] * 2.0, name="C")])
    ctx = PostprocContext(mod, H200)
    same, other = PREDICATE_LOOP.format(axis="bx"), PREDICATE_LOOP.format(axis="by")
    assert check_module_script(same, mod, ctx).valid
    sch = replay(mod, codec.decode(same.replace("post *\n", ""), codec.SyntaxOnlyContext())).sch
    assert len(diagonal_thread_bindings(sch)) == 1
    (kernel,) = _lowered_devices(mod, ctx, same)
    text = kernel.script()
    assert "if blockIdx_x < 1:" in text and "C[threadIdx_x] = A[threadIdx_x]" in text, text
    assert "C[blockIdx_y * 16" not in text
    why = finish_check(mod, ctx, same)
    assert why.startswith("two thread loops of one axis in one block: block C binds its iters with loops i_0_fused_1 "
                          "(8) and i_1 (8), all bound to blockIdx.x"), why
    (kernel,) = _lowered_devices(mod, ctx, other)
    assert "C[blockIdx_x * 16 + threadIdx_x]" in kernel.script()
    assert finish_check(mod, ctx, other) == ""


@pytest.mark.parametrize("text", [ONE_BOUND, TWO_AXES], ids=["one-loop-bound", "threadIdx.y-and-x"])
def test_the_row_sum_bound_otherwise_is_accepted(row_sum, text):
    from little_dragon.generation.schedule_worker import finish_check

    mod, ctx = row_sum
    assert finish_check(mod, ctx, text) == ""


def test_a_cooperative_fetch_stays_accepted():
    """The copy block sits under the consumer's threadIdx.x loop and its own, both of extent 4, and its bindings use
    only its own: each thread copies its part of B, which is right; the end check accepts it."""
    from tvm import te

    from little_dragon import codec
    from little_dragon.codec import PostprocContext
    from little_dragon.generation.constrain_state import diagonal_thread_bindings, replay
    from little_dragon.generation.schedule_worker import finish_check

    a, b = te.placeholder((8, 16), name="A"), te.placeholder((16,), name="B")
    mod = prim_module([a, b, te.compute((8, 16), lambda i, j: a[i, j] + b[j], name="C")])
    sch = replay(mod, codec.decode(COOPERATIVE.replace("post *\n", ""), codec.SyntaxOnlyContext())).sch
    copy = sch.get(sch.get_sblock("B_shared"))
    loops = [str(sch.get(x).thread_binding.thread_tag) if sch.get(x).thread_binding is not None else ""
             for x in sch.get_loops(sch.get_sblock("B_shared"))]
    assert loops.count("threadIdx.x") == 2, (loops, copy)  # two threadIdx.x loops above the copy block
    assert diagonal_thread_bindings(sch) == []
    assert finish_check(mod, PostprocContext(mod, H200), COOPERATIVE) == ""


@pytest.mark.parametrize("rows, refused", [(128, True), (64, False)])
def test_threadIdx_z_over_64_is_refused_on_cuda(rows, refused):
    """B = A * 2 over rows x 4, the rows on threadIdx.z: 128 is within the 1,024 threads a block may have (TVM's
    post-processors accept it) but over CUDA's 64 along z; 64 is accepted."""
    from tvm import te

    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrain_state import launch_over_limits
    from little_dragon.generation.schedule_worker import finish_check

    a = te.placeholder((rows, 4), name="A")
    mod = prim_module([a, te.compute((rows, 4), lambda i, j: a[i, j] * 2.0, name="B")])
    ctx = PostprocContext(mod, H200)
    text = "blk B\nloops b0 2\nbind l0 tz\nbind l1 bx\npost *\n"
    assert check_module_script(text, mod, ctx).valid
    over = launch_over_limits(_lowered_devices(mod, ctx, text))
    why = finish_check(mod, ctx, text)
    if refused:
        assert [o[1:] for o in over] == [("threadIdx.z", 128, 64)]
        assert why.startswith("launch over CUDA's limits: kernel ") and "launches 128 along threadIdx.z" in why, why
        assert why.endswith("allows at most 64"), why
    else:
        assert over == [] and why == "", why
