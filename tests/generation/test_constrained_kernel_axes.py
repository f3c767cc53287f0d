"""One thread axis at one extent in a kernel (issue 16, session 17). TVM's Bind accepts a loop bound to threadIdx.x at 64
beside a sibling loop of the same kernel bound to it at 16, and lowers the kernel at 64 threads without guarding the
sibling's body: threads 16-63 write past their block's outputs. The H200 sealed run of session 17 had one such
constrained attempt (`reduce`: a cross-thread sum computed at the consumer's loop), judged a wrong result (6,144 of
8,192 outputs). The constraint masks the `bind` (``ScheduleState.loop_nested_axes``) and its end check refuses the
kernel (``nested_thread_bindings``).

Real parts only: a TE kernel made into TensorIR, the codec, TVM's schedule and post-processors for sm_90, llguidance.
"""
from __future__ import annotations

import json

from dragon_testkit import H200_TARGET, ROW_SUM_HEAD, feed_constraint, prefix_state, prim_module, tvm_accepts

H200 = H200_TARGET

# the sealed attempt's script (its workload at 256 rows instead of 8,192), up to the line the rule masks
HEAD = ROW_SUM_HEAD
TAIL = """ann b3 unroll cat unroll_gpu = 0
loops b1 2
fuse l7
bind l8 bx
post *
"""


def _reduce_mean():
    """sum[i] = sum_k float32(A[i, k]); out[i] = sum[i] / 1024 (the sealed set's `reduce` family)."""
    from tvm import te

    a = te.placeholder((256, 1024), "float16", name="A")
    k = te.reduce_axis((0, 1024), name="k")
    s = te.compute((256,), lambda i: te.sum(a[i, k].astype("float32"), axis=k), name="sum")
    out = te.compute((256,), lambda i: s[i] / 1024.0, name="out")
    return [a, out]


def test_a_second_extent_of_an_axis_in_one_kernel_is_masked(engine, smollm2):
    """`bind l6 tx`: l6 (extent 64) and the consumer's l2 (threadIdx.x at 16) share their outermost loop, so one
    kernel: masked, though TVM applies it; another axis for l6 stays allowed."""
    from little_dragon.generation.constrained import Workload

    mod = prim_module(_reduce_mean())
    wl = Workload(mod, json.dumps(H200))  # as the evaluation passes its target
    st = prefix_state(mod, HEAD)
    assert st.loops[6] == 64 and "threadIdx.x" in st.loop_nested_axes[6]
    assert tvm_accepts(mod, HEAD + "bind l6 tx\n")
    assert feed_constraint(engine, wl, smollm2, HEAD + "bind l6 tx\n")[0] is not None
    assert feed_constraint(engine, wl, smollm2, HEAD + "bind l6 ty\n")[0] is None


def test_the_end_check_refuses_the_kernel_the_sealed_attempt_made():
    """The whole script passes TVM's post-processors for sm_90 (VerifyGPUCode included); the end check refuses it."""
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.schedule_worker import finish_check

    mod = prim_module(_reduce_mean())
    text = HEAD + "bind l6 tx\n" + TAIL
    context = PostprocContext(mod, H200)
    assert check_module_script(text, mod, context).valid
    why = finish_check(mod, context, text)
    assert why.startswith("nested thread binding") and "threadIdx.x" in why, why


def test_a_virtual_thread_nested_in_itself_is_masked(engine, smollm2):
    """A loop bound to `vthread.x` inside a loop bound to `vthread.x` at the same extent: TVM binds it and unifies the
    two into one index, so the inner loop's iterations are lost and the kernel computes only part of its output
    (session 24's CPU sealed wrong result, `bind l19 vthread.x` in an rms_norm).  Masked on llvm; another virtual axis
    for the inner loop computes right and stays allowed; the end check refuses the kernel."""
    import numpy as np
    import tvm
    from tvm import te

    from little_dragon import codec
    from little_dragon.generation.constrain_state import nested_thread_bindings, replay
    from little_dragon.generation.constrained import Workload

    a = te.placeholder((64, 64), name="A")
    mod = prim_module([a, te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="B")])
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    head = "blk B\nloops b0 2\nbind l0 vx\n"

    def computes_right(text: str) -> bool:
        sch = replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch
        x = np.random.default_rng(0).random((64, 64), dtype=np.float32)
        out = tvm.runtime.tensor(np.full((64, 64), np.nan, np.float32))
        tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(x), out)
        return bool(np.allclose(out.numpy(), 2 * x)), nested_thread_bindings(sch)

    assert tvm_accepts(mod, head + "bind l1 vx\n")
    right, clash = computes_right(head + "bind l1 vx\n")
    assert not right and clash and "a virtual thread" in clash[0], clash
    assert "vthread.x" in prefix_state(mod, head).loop_nested_axes[1]
    assert feed_constraint(engine, wl, smollm2, head + "bind l1 vx\n")[0] is not None
    assert computes_right(head + "bind l1 vy\n") == (True, [])
    assert feed_constraint(engine, wl, smollm2, head + "bind l1 vy\n")[0] is None
