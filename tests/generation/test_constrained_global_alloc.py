"""The end check refuses a kernel that allocates global memory inside a device kernel
(``constrain_state.device_global_allocations`` of the lowered device modules, in ``schedule_worker.finish_check`` on an
accelerator).

A reduction computed at its consumer's loop that post-processing binds to threads keeps its buffer's global scope; its
allocation goes where its uses meet, inside the kernel.  TVM lowers that kernel; its CUDA code generation, which the
end check's lowering stops before, refuses it ("Cannot allocate global memory when targeting CUDA": session 26's H200
sealed run, 3 build errors, attempts 2, 4 and 6 of one rms_norm refinement prompt, all this script).  Real parts: an
rms_norm kernel of the sealed workload's blocks at a small size, the model's script of those attempts, TVM's
post-processors, lowering and CUDA code generation (no GPU and no nvcc needed)."""
from __future__ import annotations

import json

import pytest
from dragon_testkit import H200_TARGET, prim_module

TARGET = json.dumps(H200_TARGET)

# the model's script of the 3 sealed build errors (`cat … = 4`: 64 threads there; 16 here, for 16 rows): T_multiply_red
# computed at rsqrt's loop (`at b2 = 0`), which `post *` binds to threadIdx.x under a one-block blockIdx.x
SEALED = """blk T_cast
blk T_multiply
blk T_multiply_red
blk rsqrt
blk T_cast_1
blk T_rms_norm
blk T_cast_2
blk root
rinline b6
inline b4
inline b3
inline b1
inline b0
cons b2 1
loops b7 0
cat 4 8 16 32 64 128 256 512 = 2
at b2 = 0
loops b7 0
fuse l0
loops b5 2
split l2 _ v0
post *
"""
# the same kernel with the reduction's buffer made local: one float a thread, which CUDA code generation accepts
LOCAL = SEALED.replace("post *\n", "scope b2 0 local\npost *\n")
MESSAGE = "device kernel allocates global memory: buffer T_multiply_red "


def _rms_norm(n: int, m: int):
    """The sealed rms_norm workload's blocks (float16 in and out, float32 inside), ``n`` rows of ``m``."""
    from tvm import te

    a = te.placeholder((n, m), "float16", name="A")
    b = te.placeholder((m,), "float16", name="B")
    x = te.compute((n, m), lambda i, j: a[i, j].astype("float32"), name="T_cast")
    sq = te.compute((n, m), lambda i, j: x[i, j] * x[i, j], name="T_multiply")
    k = te.reduce_axis((0, m), name="k1")
    red = te.compute((n,), lambda i: te.sum(sq[i, k], axis=k), name="T_multiply_red")
    r = te.compute((n,), lambda i: te.rsqrt(red[i] / float(m) + 1e-5), name="rsqrt")
    w = te.compute((m,), lambda j: b[j].astype("float32"), name="T_cast_1")
    y = te.compute((n, m), lambda i, j: r[i] * x[i, j] * w[j], name="T_rms_norm")
    return prim_module([a, b, te.compute((n, m), lambda i, j: y[i, j].astype("float16"), name="T_cast_2")])


@pytest.fixture(scope="module")
def kernel():
    """(module, post context) of a 16 x 64 rms_norm on the H200's target."""
    from little_dragon.codec import PostprocContext

    mod = _rms_norm(16, 64)
    return mod, PostprocContext(mod, TARGET)


def _built(mod, text: str):
    """TVM's build of ``text``'s kernel as the judge builds it (replayed, post-processed; ``tvmx.build.fast_build``:
    lowering, then CUDA code generation): the generated CUDA source, or the build's error as its last line."""
    import tvm

    from little_dragon import codec
    from little_dragon.evaluator.replay import replay
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import target_postprocs

    target = tvm.target.Target(json.loads(TARGET))
    done = replay(mod, codec.decode(text, codec.PostprocContext(mod, TARGET)), target_postprocs(mod, target),
                  text=text)
    try:
        return fast_build(done.sch.mod, target).imports[0].inspect_source()
    except Exception as e:  # noqa: BLE001 - TVM's InternalError
        return "error: " + str(e).strip().splitlines()[-1]


def test_the_sealed_script_is_refused_naming_the_buffer(kernel):
    """The post-processors accept the script and the lowering passes (what the end check did before this rule): the
    lowered device module allocates T_multiply_red in global scope, and the end check names it."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrain_state import device_global_allocations
    from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES, finish_check
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target
    from little_dragon.tvmx.schedule import fresh_schedule

    mod, ctx = kernel
    why = finish_check(mod, ctx, SEALED)
    assert why.startswith(MESSAGE) and why.endswith("which CUDA code generation refuses"), why
    sch = fresh_schedule(mod)
    assert check_module_script(SEALED, mod, ctx, schedule=sch).valid
    host, devices = lower_for_target(sch.mod, as_target(ctx.target), skip=END_CHECK_SKIPPED_PASSES)
    assert device_global_allocations(devices) == ["T_multiply_red"]
    assert device_global_allocations([host]) == []  # the host function allocates nothing: the kernel does


def test_tvm_code_generation_agrees(kernel):
    """The rule is CUDA code generation's verdict: TVM's build of the refused kernel fails with the sealed run's error;
    the kernel with the buffer made local stays accepted and builds (its reduction in one register a thread)."""
    import tvm

    from little_dragon.generation.schedule_worker import finish_check

    if tvm.get_global_func("target.build.cuda", allow_missing=True) is None:
        pytest.skip("this TVM has no CUDA code generation")
    mod, ctx = kernel
    refused = _built(mod, SEALED)
    assert refused.startswith("error: ") and "Cannot allocate global memory when targeting CUDA" in refused, refused
    assert finish_check(mod, ctx, LOCAL) == ""
    source = _built(mod, LOCAL)
    assert "__global__" in source and "float T_multiply_red_local" in source, source[:2000]

