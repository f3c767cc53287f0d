"""A virtual thread of extent 1 nested in another of the same axis and extent 1 is harmless.

The nested-binding rule (``constrain_state.nested_thread_bindings``, the constraint's ``loop_nested_axes``) refuses a
loop bound to a virtual thread axis nested with another loop bound to it: TVM's LiftThreadBinding makes the two one
loop, so the kernel loses the inner loop's iterations (session 24's CPU sealed wrong result, `vthread.x` 64 in
`vthread.x` 64; tests/generation/test_constrained_kernel_axes.py).  When both loops are of extent 1 the one loop has
one iteration, as each of them had: the lowered code is the unbound kernel's, on llvm and on CUDA.  Session 24's CPU
sealed runs had three such attempts the judge scored correct that the rule refused (`vthread.x` or `vthread.z`, 1 in
1).  An extent-1 loop nested with a longer one of the same axis is still wrong: inside it the outer loop's iterations
are lost, outside it its index takes the inner loop's range and the kernel writes past its output.

Real parts: TVM (the schedule, the llvm target's post-processors, the build and the kernel's numbers against numpy,
the CUDA lowering up to code generation), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from dragon_testkit import H200_TARGET, end_check, feed_constraint, prim_module, tvm_accepts

LLVM = {"kind": "llvm", "num-cores": 2}
H200 = H200_TARGET
HEAD = "blk B\nloops b0 2\n"  # B = A * 2 over 16 x 16: l0 (i), l1 (j)
# i and j split by 1, the unit loops innermost: `vthread.x` 1 in `vthread.x` 1 (as two of the sealed attempts)
UNIT_IN_UNIT = HEAD + "split l0 _ 1\nsplit l1 _ 1\nreorder l2 l4 l3 l5\nbind l3 vx\nbind l5 vx\n"
# i and j split into 1 and 16, the unit loops outermost (as the third)
UNIT_OUTSIDE = HEAD + "split l0 1 _\nsplit l1 1 _\nreorder l2 l4 l3 l5\nbind l2 vx\nbind l4 vx\n"
UNIT_IN_16 = HEAD + "bind l0 vx\nsplit l1 _ 1\nbind l3 vx\n"  # i at 16 around j's unit loop
UNIT_AROUND_16 = HEAD + "split l0 1 _\nbind l2 vx\nbind l1 vx\n"  # i's unit loop around j at 16
SIXTEEN_IN_16 = HEAD + "bind l0 vx\nbind l1 vx\n"  # the sealed wrong result's form
# on CUDA: i and j split by 4 into blockIdx.x and threadIdx.x, their 4-loops split by 1, the unit loops innermost
CUDA_HEAD = HEAD + "split l0 4 _\nsplit l1 4 _\nreorder l2 l4 l3 l5\nbind l2 bx\nbind l4 tx\n"
CUDA_UNIT_IN_UNIT = CUDA_HEAD + "split l3 _ 1\nsplit l5 _ 1\nreorder l6 l8 l7 l9\nbind l7 vx\nbind l9 vx\n"
CUDA_UNIT_IN_4 = CUDA_HEAD + "bind l3 vx\nsplit l5 _ 1\nbind l7 vx\n"


def _module():
    from tvm import te

    a = te.placeholder((16, 16), name="A")
    return prim_module([a, te.compute((16, 16), lambda i, j: a[i, j] * 2.0, name="B")])


def _schedule(mod, text: str):
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    return replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch


def _computes_right(mod, text: str) -> bool:
    """``text`` with its `post *` (the llvm target's post-processors) applied, built and run on a random A."""
    import tvm

    from little_dragon import codec
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text + "post *\n", sch, PostprocContext(mod, tvm.target.Target(LLVM)))
    a = np.random.default_rng(0).random((16, 16), dtype=np.float32)
    out = tvm.runtime.tensor(np.full((16, 16), np.nan, np.float32))
    tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), out)
    return bool(np.allclose(out.numpy(), 2 * a))


def _cuda_device_code(mod, text: str) -> str:
    """The device code of ``text``'s kernel lowered for the H200 up to code generation (no GPU needed)."""
    import tvm

    from little_dragon.tvmx.build import lower_for_target

    _, device = lower_for_target(_schedule(mod, text).mod, tvm.target.Target(H200))
    return "\n".join(m.script() for m in device)


@pytest.mark.parametrize("text", [UNIT_IN_UNIT, UNIT_OUTSIDE], ids=["unit-in-unit", "units-outside"])
def test_unit_virtual_threads_nested_in_each_other_are_allowed(engine, smollm2, text):
    """Two loops of extent 1 bound to `vthread.x`, one in the other: the kernel computes right after the llvm
    post-processors; the rule, the end check and the constraint's mask accept it (all refused it before)."""
    from little_dragon.generation.constrain_state import nested_thread_bindings
    from little_dragon.generation.constrained import Workload

    mod = _module()
    assert tvm_accepts(mod, text)
    assert _computes_right(mod, text)
    assert nested_thread_bindings(_schedule(mod, text)) == []
    assert end_check(mod, text + "post *\n", LLVM) == ""
    assert feed_constraint(engine, Workload(mod, json.dumps(LLVM)), smollm2, text)[0] is None


@pytest.mark.parametrize(("text", "runs"), [(UNIT_IN_16, True), (SIXTEEN_IN_16, True), (UNIT_AROUND_16, False)],
                         ids=["unit-in-16", "16-in-16", "unit-around-16"])
def test_a_virtual_thread_nested_with_a_longer_one_is_still_refused(engine, smollm2, text, runs):
    """`vthread.x` on an extent-1 loop in a loop of 16 bound to it, or on two loops of 16: the kernel is wrong and
    stays refused.  An extent-1 loop around one of 16 writes past B (its index takes the range 0-15), so it is not
    run here; refused likewise."""
    from little_dragon.generation.constrain_state import nested_thread_bindings
    from little_dragon.generation.constrained import Workload

    mod = _module()
    assert tvm_accepts(mod, text)
    if runs:
        assert not _computes_right(mod, text)
    clash = nested_thread_bindings(_schedule(mod, text))
    assert len(clash) == 2 and all("vthread.x" in c and "a virtual thread" in c for c in clash), clash
    assert end_check(mod, text + "post *\n", LLVM).startswith("nested thread binding")
    workload = Workload(mod, json.dumps(LLVM))
    assert feed_constraint(engine, workload, smollm2, text[:text.rindex("bind")])[0] is None
    assert feed_constraint(engine, workload, smollm2, text)[0] is not None  # the last `bind` masked


def test_on_cuda_unit_virtual_threads_lower_to_the_unbound_kernel():
    """Under blockIdx.x and threadIdx.x, two unit loops bound to `vthread.x`, one in the other, lower to the very
    device code the unbound loops give, and the rule accepts them; a unit loop in a `vthread.x` loop of 4 loses that
    loop's iterations and stays refused."""
    from little_dragon.generation.constrain_state import nested_thread_bindings

    mod = _module()
    unbound = CUDA_UNIT_IN_UNIT.replace("bind l7 vx\nbind l9 vx\n", "")
    assert _cuda_device_code(mod, CUDA_UNIT_IN_UNIT) == _cuda_device_code(mod, unbound)
    assert nested_thread_bindings(_schedule(mod, CUDA_UNIT_IN_UNIT)) == []
    assert _cuda_device_code(mod, CUDA_UNIT_IN_4) != _cuda_device_code(mod, CUDA_UNIT_IN_4.replace("bind l7 vx\n", ""))
    assert nested_thread_bindings(_schedule(mod, CUDA_UNIT_IN_4))
