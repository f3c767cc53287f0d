"""No block outside the kernels on a GPU (issue 16, session 20). The H200 sealed run of session 20 lost 22 of 96
constrained attempts to segfaults at run time: each script annotates a block as multi-level tiled (`ann b0 tiling ..`,
MetaSchedule's `meta_schedule.tiling_structure`) and never binds it; `post *`'s RewriteUnboundBlock skips a block so
annotated (the tiling rule binds its own), VerifyGPUCode and TVM's build accept the kernel (VerifyMemory does not see
it), and the block is computed in the host function on device pointers. The end check refuses such a kernel
(``constrain_state.host_blocks``); every measured CUDA record binds every block.

Real parts only: a TE kernel made into TensorIR, the codec, TVM's post-processors and lowering for sm_90, the committed
real CUDA databases.
"""
from __future__ import annotations

from dragon_testkit import CODEC_DATA, H200_TARGET, prim_module, real_records

H200 = H200_TARGET

# the sealed attempt's script (bias + SiLU, 8,192 x 8,192 float16), at 256 x 256
TILED = """blk out
blk root
ann b0 tiling "SSSSSRRSRS"
loops b0 2
tile l0 = 8 1 1 2 2 2 4
tile l1 = 8 1 16 1 1 1 2
post *
"""


def _bias_silu():
    """out[i, j] = x / (1 + exp(-x)), x = A[i, j] + B[j] (the sealed set's `bias_act` family)."""
    from tvm import te

    a = te.placeholder((256, 256), "float16", name="A")
    b = te.placeholder((256,), "float16", name="B")

    def silu(i, j):
        x = a[i, j].astype("float32") + b[j].astype("float32")
        return (x / (1.0 + te.exp(-x))).astype("float16")

    return [a, b, te.compute((256, 256), silu, name="out")]


def _finished(mod, text):
    from tvm import s_tir

    from little_dragon.codec import PostprocContext, apply

    sch = s_tir.Schedule(mod)
    apply(text, sch, PostprocContext(mod, H200))
    return sch


def test_a_tiled_block_left_unbound_is_host_code_that_tvm_builds():
    """TVM's post-processors (VerifyGPUCode included) accept the script and its lowering makes no device kernel at
    all: the whole computation is in the host function. Without the annotation `post *` binds the block."""
    from little_dragon.generation.constrain_state import host_blocks
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target

    mod = prim_module(_bias_silu())
    sch = _finished(mod, TILED)
    assert host_blocks(sch) == ["out"]
    _host, devices = lower_for_target(sch.mod, as_target(H200))
    assert devices == []
    untiled = _finished(mod, TILED.replace('ann b0 tiling "SSSSSRRSRS"\n', ""))
    assert host_blocks(untiled) == []
    _host, devices = lower_for_target(untiled.mod, as_target(H200))
    assert len(devices) == 1


def test_the_end_check_refuses_host_code_and_passes_the_bound_kernel():
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.schedule_worker import finish_check

    mod = prim_module(_bias_silu())
    context = PostprocContext(mod, H200)
    assert check_module_script(TILED, mod, context).valid
    why = finish_check(mod, context, TILED)
    assert why.startswith("host code: block out"), why
    assert finish_check(mod, context, TILED.replace('ann b0 tiling "SSSSSRRSRS"\n', "")) == ""
    # on a CPU the same block is the kernel: no such rule
    cpu = '{"kind": "llvm", "num-cores": 2}'
    assert finish_check(mod, PostprocContext(mod, cpu), TILED) == ""


def test_every_committed_cuda_record_binds_every_block():
    """MetaSchedule's records, measured or not, finished as the judge finishes them: no block outside a kernel (so
    were the 818 measured records of the committed H200 harvest, data/harvest, when the rule was written)."""
    from little_dragon.codec import PostprocContext, apply, encode
    from little_dragon.generation.constrain_state import host_blocks
    from little_dragon.tvmx.build import import_tensor_intrinsics
    from tvm import s_tir

    import_tensor_intrinsics()  # the records tensorize
    n = 0
    for db in ("real_cuda_valid_db", "real_cuda_db"):
        for _, mod, target, tj in real_records(CODEC_DATA / db):
            sch = s_tir.Schedule(mod)
            apply(encode(tj), sch, PostprocContext(mod, target))
            assert host_blocks(sch) == []
            n += 1
    assert n >= 5


def test_an_attempt_ended_as_host_code_is_finished_without_its_tiling_annotation(engine, smollm2):
    """The sealed attempt's script, refused at its `post *` as host code (its retries spent), or cut at the token
    budget after its tile lines: no prefix is a kernel (each one after the annotation leaves the block unbound, the one
    before it schedules nothing), so with ``finish_back`` it ends as its lines without the tiling annotation and
    `post *`, which binds the block: the end check passes it, and the lowering makes one device kernel.  Without
    ``finish_back`` the refused script stays as written."""
    import json

    from dragon_testkit import feed_constraint

    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.generation.constrained import ScriptConstraint, Workload
    from little_dragon.generation.schedule_worker import finish_check

    mod = prim_module(_bias_silu())
    wl = Workload(mod, json.dumps(H200))
    untiled = TILED.replace('ann b0 tiling "SSSSSRRSRS"\n', "")
    where, c = feed_constraint(engine, wl, smollm2, TILED)
    assert where is None and c.dead and c.error.startswith("post: host code: block out"), (where, c.error)
    assert c.script(TILED) == TILED
    c.finish_back = 24
    assert c.script(TILED) == untiled
    assert (c.stats.finished_earlier, c.stats.finished_earlier_lines, c.stats.finished_untiled) == (1, 0, 1)
    assert finish_check(mod, PostprocContext(mod, H200), untiled) == ""

    cut = ScriptConstraint(engine, wl)
    cut.finish_back = 24
    head = TILED.replace("post *\n", "")
    for t in smollm2(head + "fu", add_special_tokens=False)["input_ids"]:
        cut.advance(t)
    assert not cut.dead and cut.script(head + "fu") == untiled, cut.error
    assert cut.stats.truncated == 1 and cut.stats.finished_untiled == 1


def test_a_tile_line_ended_without_its_annotation_carries_the_factor_tvm_ran(engine, smollm2):
    """The same attempt with a first tile factor that is not TVM's (9 where 256 / 32 = 8: the constraint leaves t1 to
    TVM's replay and the script carries what TVM ran): ended without its annotation, the tile line still carries 8
    (the repair finds tile lines by index, which the dropped annotation shifts)."""
    import json

    from dragon_testkit import feed_constraint

    from little_dragon.generation.constrained import Workload

    mod = prim_module(_bias_silu())
    sampled = TILED.replace("tile l0 = 8 1 1 2 2 2 4", "tile l0 = 9 1 1 2 2 2 4")
    where, c = feed_constraint(engine, Workload(mod, json.dumps(H200)), smollm2, sampled)
    assert where is None and c.dead and c.error.startswith("post: host code"), (where, c.error)
    assert c.repaired, "the sampled first factor was not TVM's"
    c.finish_back = 24
    assert c.script(sampled) == TILED.replace('ann b0 tiling "SSSSSRRSRS"\n', "")
