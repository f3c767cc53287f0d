"""`bind` of a loop that one block uses for both a data-parallel and a reduction iter (a `fuse` of the two) is
refused by the constraint (``ScheduleState.loop_mixed``, ``grammar_line._parallel_rules``).  TVM binds such a loop to
threadIdx, as any loop carrying a reduction iter (a cross-thread reduction), and its LowerCrossThreadReduction then
sums over the data-parallel iterations too: session 41's sealed wrong result (`pool2d`, `fuse` of pool_sum's channel
and window loops bound to threadIdx.y: 16,366 of 16,384 outputs wrong, lowered to one sum of 392 threads per 8
channels).  MetaSchedule fuses data-parallel loops only before a bind (the H200 harvest, token by token:
results/constrained-decoding.md, session 41).

Real parts: TVM's verdicts on a fresh schedule, the codec, llguidance, SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest
from dragon_testkit import allowed_by_mask, prefix_state, tvm_accepts

TARGET = json.dumps({"kind": "cuda", "arch": "sm_90", "max_shared_memory_per_block": 49152,
                     "max_threads_per_block": 1024, "thread_warp_size": 32})
_POOL = """from tvm.script import ir as I
from tvm.script import tirx as T

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((4, 16, 7, 7), "float32"), pool_avg: T.Buffer((4, 16), "float32")):
        T.func_attr({"tirx.noalias": True})
        pool_sum = T.sblock_alloc_buffer((4, 16))
        for n, c, rh, rw in T.grid(4, 16, 7, 7):
            with T.sblock("pool_sum"):
                v_n, v_c, v_rh, v_rw = T.axis.remap("SSRR", [n, c, rh, rw])
                with T.init():
                    pool_sum[v_n, v_c] = T.float32(0.0)
                pool_sum[v_n, v_c] = pool_sum[v_n, v_c] + A[v_n, v_c, v_rh, v_rw]
        for n, c in T.grid(4, 16):
            with T.sblock("pool_avg"):
                v_n, v_c = T.axis.remap("SS", [n, c])
                pool_avg[v_n, v_c] = pool_sum[v_n, v_c] / T.float32(49.0)
"""
HEAD = "blk pool_sum\nloops b0 4\n"  # l0..l3: n, c (data parallel), rh, rw (reduction)


@pytest.fixture(scope="module")
def pool():
    from little_dragon.generation.constrained import Workload
    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(_POOL)
    return mod, Workload(mod, TARGET)


def test_a_fused_data_parallel_and_reduction_loop_takes_no_thread_axis(engine, smollm2, pool):
    """`fuse l1 l2` (channel and window row) makes a loop pool_sum uses for both kinds: the state says so, TVM binds it
    to threadIdx.x, and the mask refuses that bind in each spelling of the axis, and every other axis."""
    mod, wl = pool
    head = HEAD + "fuse l1 l2\n"
    st = prefix_state(mod, head)
    assert st.loop_iters[4] == "R" and st.loop_mixed == frozenset({4}), (st.loop_iters, st.loop_mixed)
    assert allowed_by_mask(engine, wl, smollm2, head)
    for axis in ("tx", "threadIdx.x", '"threadIdx.y"', "bx", "vx"):
        assert not allowed_by_mask(engine, wl, smollm2, head + f"bind l4 {axis}\n"), axis
    assert tvm_accepts(mod, head + "bind l4 tx\n"), "TVM's Bind accepts it: the rule is the constraint's"


def test_a_fused_reduction_loop_and_a_fused_data_parallel_loop_keep_their_axes(engine, smollm2, pool):
    """`fuse l2 l3` (the window: reduction only) is bound to threadIdx.x (a cross-thread reduction, as MetaSchedule's
    rule writes it), `fuse l0 l1` (data parallel only) to blockIdx.x: neither is mixed."""
    mod, wl = pool
    st = prefix_state(mod, HEAD + "fuse l2 l3\n")
    assert st.loop_mixed == frozenset() and st.loop_iters[4] == "R"
    assert allowed_by_mask(engine, wl, smollm2, HEAD + "fuse l2 l3\nbind l4 tx\n")
    st = prefix_state(mod, HEAD + "fuse l0 l1\n")
    assert st.loop_mixed == frozenset() and st.loop_iters[4] == "S"
    assert allowed_by_mask(engine, wl, smollm2, HEAD + "fuse l0 l1\nbind l4 bx\n")
