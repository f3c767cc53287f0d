"""The bounds check of on-chip buffer accesses in lowered device code (``device_bounds.out_of_bounds_accesses``).

TVM's LowerCrossThreadReduction drops a block's predicate on a cross-thread reduction's write-back: a spatial axis of
extent 1 bound to threadIdx.x of 32 under ``T.where(tx < 1)``, the reduction bound to threadIdx.y, lowers to ``if
threadIdx_y == 0: red_shared[threadIdx_x] = red_buf0[...]`` with ``red_shared`` of 1 float a block (session 26's H200
sealed run: a pool2d's attempt faulted with cudaErrorIllegalAddress on it).  The check finds that write; it passes the
same reduction over an axis as wide as its threads, and an access out of range only where an enclosing guard excludes
it.  Real parts: TVMScript kernels at small sizes, TVM's lowering for CUDA (no GPU, no nvcc)."""
from __future__ import annotations

import json

import pytest
from dragon_testkit import H200_TARGET

TARGET = json.dumps(H200_TARGET)
HEADER = "from tvm.script import ir as I\nfrom tvm.script import tirx as T\n"

# a row sum over 7 columns into a (4, {width}) shared buffer, the spatial axis {width} wide on threadIdx.x of
# {threads} (a predicate where they differ), the reduction on threadIdx.y of 7: a cross-thread reduction
_REDUCTION = """
@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((4, 7), "float32"), B: T.Buffer((4, {width}), "float32")):
        T.func_attr({{"tirx.noalias": True}})
        red_shared = T.sblock_alloc_buffer((4, {width}), scope="shared")
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding({threads}, thread="threadIdx.x"):
                for ty in T.thread_binding(7, thread="threadIdx.y"):
                    with T.sblock("red"):
                        vi = T.axis.spatial(4, bx)
                        vj = T.axis.spatial({width}, tx)
                        vk = T.axis.reduce(7, ty)
                        T.where(tx < {width})
                        T.reads(A[vi, vk])
                        T.writes(red_shared[vi, vj])
                        with T.init():
                            red_shared[vi, vj] = T.float32(0.0)
                        red_shared[vi, vj] = red_shared[vi, vj] + A[vi, vk]
            for tx in T.thread_binding({threads}, thread="threadIdx.x"):
                with T.sblock("out"):
                    vi = T.axis.spatial(4, bx)
                    vj = T.axis.spatial({width}, tx)
                    T.where(tx < {width})
                    T.reads(red_shared[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = red_shared[vi, vj] * T.float32(2.0)
"""

# a staging copy through a 16-float shared buffer by 32 threads: the write ``S[{index}]`` guarded by
# ``T.where(tx < {limit})``
_STAGED = """
@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
        T.func_attr({{"tirx.noalias": True}})
        S = T.sblock_alloc_buffer((16,), scope="shared")
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.sblock("stage"):
                    v = T.axis.spatial(32, tx)
                    T.where(tx < {limit})
                    T.reads(A[v])
                    T.writes(S[{index}])
                    S[{index}] = A[v]
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.sblock("use"):
                    v = T.axis.spatial(32, tx)
                    T.reads(S[v % 16])
                    T.writes(B[v])
                    B[v] = S[v % 16]
"""

# lowered-style device code by hand (a ``str.format`` template): one kernel of 2 x 32 threads, A global, S 16 shared
# floats; its body follows
_KERNEL_OPEN = """
@I.ir_module
class Module:
    @T.prim_func
    def main_kernel(A_ptr: T.handle("float32", "global")):
        T.func_attr({{"calling_conv": 2, "tirx.is_global_func": True, "tirx.noalias": True}})
        A = T.decl_buffer((64,), data=A_ptr)
        with T.launch_thread("blockIdx.x", 2) as blockIdx_x:
            S = T.alloc_shared((16,))
            with T.launch_thread("threadIdx.x", 32) as threadIdx_x:
"""
# a shared index out of range exactly where the guard (if, else, if_then_else) excludes it, and one access that no
# guard covers in place of ``{bad}`` (``UNGUARDED``)
_DEVICE = _KERNEL_OPEN + """                if threadIdx_x < 16:
                    S[threadIdx_x] = A[blockIdx_x * 32 + threadIdx_x]
                else:
                    S[threadIdx_x - 16] = A[blockIdx_x * 32 + threadIdx_x] + S[threadIdx_x - 16]
                A[blockIdx_x * 32 + threadIdx_x] = T.if_then_else(threadIdx_x < 16, S[threadIdx_x], T.float32(0.0))
                for k in range(4):
                    if k * 8 + threadIdx_x < 16 and threadIdx_x < 8:
                        A[k] = S[k * 8 + threadIdx_x]
{bad}"""
UNGUARDED = "                A[0] = S[threadIdx_x]\n"


def _lowered_devices(source: str) -> list:
    """The device modules of ``source``'s kernel lowered for the H200's CUDA target as the end check lowers it."""
    from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target
    from little_dragon.workloads.store import module_from_script

    host, devices = lower_for_target(module_from_script(HEADER + source), as_target(TARGET),
                                     skip=END_CHECK_SKIPPED_PASSES)
    return devices


def _device_code(devices: list) -> str:
    return "\n".join(d.script() for d in devices)


def test_dropped_write_back_guard_is_refused():
    """The extent-1 axis on 32 threads: TVM's lowered write-back has no ``threadIdx_x < 1`` guard, and the check names
    it (the shared buffer, its scope, the index, its extent)."""
    from little_dragon.generation.device_bounds import ANALYSIS_FAILURES, out_of_bounds_accesses

    devices = _lowered_devices(_REDUCTION.format(width=1, threads=32))
    code = _device_code(devices)
    assert "red_shared[threadIdx_x] = " in code  # the TVM bug itself: the write-back under no threadIdx_x guard
    failures = sum(ANALYSIS_FAILURES.values())
    found = out_of_bounds_accesses(devices)
    assert sum(ANALYSIS_FAILURES.values()) == failures
    assert found and "shared buffer red_shared[threadIdx_x] of extent 1" in found[0], found
    assert found[0].startswith("main_kernel: ")


@pytest.mark.parametrize("width,threads", [(32, 32), (1, 1), (16, 32)])
def test_cross_thread_reduction_write_back(width: int, threads: int):
    """The same reduction with its spatial axis as wide as its threads, or on one thread: nothing refused; on 32
    threads for 16 columns TVM's write-back is unguarded too, past its 16 floats a block: refused."""
    from little_dragon.generation.device_bounds import out_of_bounds_accesses

    found = out_of_bounds_accesses(_lowered_devices(_REDUCTION.format(width=width, threads=threads)))
    if width < threads:
        assert found and "red_shared" in found[0], found
    else:
        assert found == []


@pytest.mark.parametrize("limit,refused", [(16, False), (32, True)])
def test_a_guard_is_read(limit: int, refused: bool):
    """The shared write ``S[tx]`` (16 floats) by 32 threads: in bounds only through ``T.where(tx < 16)``, which the
    lowering keeps as an ``if``; under ``tx < 32`` (no guard left) refused.  Written ``S[tx % 16]``: in bounds with
    either guard."""
    from little_dragon.generation.device_bounds import out_of_bounds_accesses

    devices = _lowered_devices(_STAGED.format(limit=limit, index="v"))
    assert ("if threadIdx_x < 16" in _device_code(devices)) == (not refused)
    found = out_of_bounds_accesses(devices)
    assert bool(found) == refused, found
    if refused:
        assert "shared buffer S[threadIdx_x] of extent 16" in found[0], found
    assert out_of_bounds_accesses(_lowered_devices(_STAGED.format(limit=limit, index="v % 16"))) == []


@pytest.mark.parametrize("bad", ["", UNGUARDED])
def test_guards_of_hand_written_device_code(bad: str):
    """If and else branches, ``if_then_else``, ``&&`` and a loop's range: guarded accesses pass; the unguarded one
    ``S[threadIdx_x]`` (32 threads, 16 floats) is refused."""
    from little_dragon.generation.device_bounds import out_of_bounds_accesses
    from little_dragon.workloads.store import module_from_script

    found = out_of_bounds_accesses([module_from_script(HEADER + _DEVICE.format(bad=bad))])
    if bad:
        assert len(found) == 1 and "shared buffer S[threadIdx_x] of extent 16" in found[0], found
    else:
        assert found == []


# lowered-style device code whose loop of {n} iterations TVM's UnrollLoop writes out, one in-bounds shared read
# ``S[(threadIdx_x + k) % 16]`` an iteration, and the unguarded ``S[threadIdx_x]`` (32 threads, 16 floats) before
# (``{before}``) or after (``{after}``) it
_UNROLLED = _KERNEL_OPEN + """{before}                for k in T.unroll({n}):
                    A[blockIdx_x * 32 + threadIdx_x] = A[blockIdx_x * 32 + threadIdx_x] + S[(threadIdx_x + k) % 16]
{after}"""


def _unrolled(n: int, before: str = "", after: str = "") -> list:
    """``_UNROLLED`` unrolled by TVM's UnrollLoop (as the lowering does): a device module of ``n`` copies."""
    import tvm

    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(HEADER + _UNROLLED.format(n=n, before=before, after=after))
    return [tvm.tirx.transform.UnrollLoop()(mod)]


@pytest.mark.parametrize("n,refused", [(16, True), (32768, False)])
def test_an_unrolled_kernel_past_the_budget_is_not_refused(n: int, refused: bool):
    """16 unrolled reads: the unguarded read after them is refused.  32,768 (~1 million steps, ~1.7 s unbounded): the
    walk stops at ``BUDGET``, well before the unguarded read, and refuses nothing (its time: helperB's bench.py, not
    a timed test)."""
    from little_dragon.generation.device_bounds import OVER_BUDGET, out_of_bounds_accesses

    devices = _unrolled(n, after=UNGUARDED)
    stopped = sum(OVER_BUDGET.values())
    found = out_of_bounds_accesses(devices)
    assert sum(OVER_BUDGET.values()) == stopped + (not refused)
    if refused:
        assert len(found) == 1 and "shared buffer S[threadIdx_x] of extent 16" in found[0], found
    else:
        assert found == []


def test_what_the_walk_finds_before_the_budget_stands():
    """The unguarded read before the 32,768 unrolled reads: found before the budget is spent, and refused."""
    from little_dragon.generation.device_bounds import out_of_bounds_accesses

    found = out_of_bounds_accesses(_unrolled(32768, before=UNGUARDED))
    assert len(found) == 1 and "shared buffer S[threadIdx_x] of extent 16" in found[0], found
