"""The constraint's end-of-script check (issue 16: a rule that cannot be checked while decoding is checked at the end,
the attempt rejected and resampled, counted): at `post *` the target's post-processors run (on CUDA they end in
VerifyGPUCode, whose limits depend on the whole schedule: 18 of the H200 sealed run's 192 constrained attempts), and
the finished kernel must change the kernel (no no_op), may not bind one thread axis on nested loops of different
extents (the post-processing's RewriteUnboundBlock made one such kernel in that run: a wrong result), and must lower
for the target (10 of that run's 13 build errors fail there).  Every real record passes it: the real-records
tests feed each committed record's `post *` form through the constraint, end check included.

Real parts only: TVM's post-processors for the committed CUDA records' target, the codec, llguidance, SmolLM2's
tokenizer; the constraint's TVM work in its worker process and in-process.
"""
from __future__ import annotations

import json

import pytest
from dragon_testkit import (CODEC_DATA, ROW_SUM_HEAD, feed_constraint, kept_what_it_checked, prim_module, real_records,
                            tvm_accepts)

# 4096 outputs fused, split into blocks of THREADS threads: over the target's 1024 threads per block VerifyGPUCode
# refuses the kernel; every line applies
MATMUL = "blk C\nloops b0 3\nfuse l0 l1\nsplit l3 _ {threads}\nbind l4 bx\nbind l5 tx\npost *\n"
# the model's script of the sealed wrong result, on a row sum of the same kind (512 x 256): `bind l4 bx` on the
# fused loop of `out`; `post *`'s RewriteUnboundBlock then binds the loop of `sum` computed at it to blockIdx.x too
ROW_SUM = ROW_SUM_HEAD + """bind l7 tx
ann b3 unroll cat unroll_gpu = 2
loops b2 0
fuse l1
bind l4 bx
post *
"""

# the sealed run's build error "Cannot insert syncs inside condition" (a dense + bias + GELU kernel), on a dense + bias
# + ReLU of the same shape kind: `at b0 l1` computes the matmul at a loop of an imperfect split, its shared cache read
# then needs a barrier inside that split's predicate; the post-processors accept it, ThreadSync's lowering does not
DENSE_RELU = """blk matmul
blk out
blk root
cons b0 1
loops b3 2
cat 4 8 16 32 64 128 256 512 = 2
split l0 _ v0
bind l2 tx
at b0 l1
scope b0 0 shared
loops b0 6
fuse l5 l6
split l8 _ v0
bind l10 bx
bind l11 vx
post *
"""


def _cuda_target() -> str:
    target = next(iter(real_records(CODEC_DATA / "real_cuda_db")))[2]
    return target if isinstance(target, str) else json.dumps(target)


def _row_sum_module():
    from tvm import te

    a = te.placeholder((512, 256), "float32", name="A")
    k = te.reduce_axis((0, 256), name="k")
    s = te.compute((512,), lambda i: te.sum(a[i, k], axis=k), name="sum")
    return prim_module([a, te.compute((512,), lambda i: s[i] / 256.0, name="out")])


def _dense_relu_module():
    from tvm import te, tirx

    a = te.placeholder((64, 64), "float32", name="A")
    w = te.placeholder((128, 64), "float32", name="B")
    bias = te.placeholder((128,), "float32", name="bias")
    k = te.reduce_axis((0, 64), name="k")
    mm = te.compute((64, 128), lambda i, j: te.sum(a[i, k] * w[j, k], axis=k), name="matmul")
    out = te.compute((64, 128), lambda i, j: te.max(mm[i, j] + bias[j], tirx.const(0, "float32")), name="out")
    return prim_module([a, w, bias, out])


@pytest.fixture(params=[True, False], ids=["worker", "in-process"])
def isolate(request):
    from little_dragon.generation import constrained

    before = constrained.ISOLATE_TVM
    constrained.ISOLATE_TVM = request.param
    constrained.clear_caches()
    yield request.param
    constrained.ISOLATE_TVM = before


def test_verify_gpu_code_is_checked_at_the_end(engine, smollm2, isolate):
    """Every token of a script whose blocks have 2048 threads is allowed (the tile is legal while written); at `post *`
    the attempt is rejected with VerifyGPUCode's verdict, counted, and keeps its `post *` (the judge's verdict on it
    is the one given here).  The same script with 256 threads passes and may end."""
    from dragon_testkit import matmul_tensors

    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import Workload

    mod, target = prim_module(matmul_tensors(64)), _cuda_target()
    wl = Workload(mod, target)
    too_many = MATMUL.format(threads=2048)
    where, c = feed_constraint(engine, wl, smollm2, too_many)
    assert where is None, where
    assert c.dead and c.error.startswith("post:") and "VerifyGPUCode" in c.error, c.error
    assert (c.stats.end_checked, c.stats.rejected_end, c.stats.rejected_apply) == (1, 1, 0)
    assert c.eos_only() and kept_what_it_checked(c.script(too_many), c) and c.script(too_many) == too_many
    judge = check_module_script(too_many, mod, PostprocContext(mod, target))
    assert not judge.valid and "VerifyGPUCode" in judge.error  # the same verdict the evaluator gives
    assert tvm_accepts(mod, too_many.replace("post *\n", ""))  # every line applies: only the end can know

    fits = MATMUL.format(threads=256)
    where, c = feed_constraint(engine, wl, smollm2, fits)
    assert where is None and not c.dead, (where, c.error)
    assert (c.stats.end_checked, c.stats.rejected_end) == (1, 0)
    assert c.may_end()


def test_a_nested_binding_made_by_the_post_processing_is_rejected(engine, smollm2, isolate, monkeypatch):
    """The sealed run's post-processing case: every line is allowed and applies, TVM's post-processors accept the
    script (the codec's validity says valid), and the finished kernel binds blockIdx.x on a loop inside another
    blockIdx.x loop of another extent.  The end check rejects it, naming the loop.  (Since session 35 the script is
    refused earlier, at its `bind l4 bx` right after `fuse l1`: [bind the fused loop]; the end check is read without
    that rule, for kernels that reach the same binding by other lines.)"""
    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation import constrained
    from little_dragon.generation.constrained import Workload

    mod, target = _row_sum_module(), _cuda_target()
    assert check_module_script(ROW_SUM, mod, PostprocContext(mod, target)).valid  # TVM alone accepts it
    where, c = feed_constraint(engine, Workload(mod, target), smollm2, ROW_SUM)
    assert where is not None and where.startswith("token ") and where.endswith(r"fuse l1\nbind l'"), where
    monkeypatch.setattr(constrained, "BIND_FUSED", False)
    where, c = feed_constraint(engine, Workload(mod, target), smollm2, ROW_SUM)
    assert where is None, where
    assert c.dead and c.error.startswith("post: nested thread binding") and "blockIdx.x" in c.error, c.error
    assert c.stats.rejected_end == 1 and c.script(ROW_SUM) == ROW_SUM


def test_a_kernel_that_does_not_lower_is_rejected(engine, smollm2, isolate, monkeypatch):
    """Every line is allowed and applies, the post-processors accept the script; the target's lowering refuses it
    (no compiler needed: this runs on the CPU box).  Rejected at `post *` with TVM's message.  The script binds the
    kernel's outermost loop to threadIdx.x and a blockIdx.x loop inside it: since session 39 the outermost-loop rule
    masks that `tx` (test_constrained_outermost_bind.py); without the rule the end check is what refuses it."""
    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation import constrained
    from little_dragon.generation.constrained import Workload

    mod, target = _dense_relu_module(), _cuda_target()
    assert check_module_script(DENSE_RELU, mod, PostprocContext(mod, target)).valid
    where, _ = feed_constraint(engine, Workload(mod, target), smollm2, DENSE_RELU)
    assert where is not None and where.startswith("token 66 ' tx' after") and where.endswith("bind l2'"), where
    monkeypatch.setattr(constrained, "OUTERMOST_BLOCK_IDX", False)
    where, c = feed_constraint(engine, Workload(mod, target), smollm2, DENSE_RELU)
    assert where is None, where
    assert c.dead and c.error.startswith("post: lowering") and "Cannot insert syncs" in c.error, c.error
    assert c.stats.rejected_end == 1


def test_a_script_that_schedules_nothing_is_rejected(engine, smollm2, isolate):
    """Only block and loop lookups, then `post *`: TVM applies it and its post-processors bind the kernel, but the
    script itself changes nothing (the evaluator's no_op, never rewarded).  Since session 17 its `post` is masked
    (``ScheduleState.unchanged``); the end check still refuses it where it gets there (an attempt cut at its budget
    is finished by `post *`).  A script of an annotation only that lowers to the empty script's code is refused at the
    end; a `par` is not a no-op."""
    from dragon_testkit import matmul_tensors

    from little_dragon.codec import PostprocContext
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import Workload

    mod, target = prim_module(matmul_tensors(64)), _cuda_target()
    nothing = "blk C\nloops b0 3\npost *\n"
    assert check_module_script(nothing, mod, PostprocContext(mod, target)).valid
    where, c = feed_constraint(engine, Workload(mod, target), smollm2, nothing)
    assert where is not None and where.startswith("token 11 'post'"), where
    from little_dragon.generation.schedule_worker import finish_check

    assert finish_check(mod, PostprocContext(mod, target), nothing).startswith("no_op"), "the end check"
    # the judge's other no-op (the CPU sealed run's): only an annotation, which lowers to the empty script's code
    llvm = '{"kind": "llvm", "num-cores": 2}'
    for script, refused in (('blk C\nann b0 tiling "SSRSRS"\npost *\n', True), ("blk C\nloops b0 3\npar l0\npost *\n", False)):
        assert check_module_script(script, mod, PostprocContext(mod, llvm)).valid
        where, c = feed_constraint(engine, Workload(mod, llvm), smollm2, script)
        assert where is None, where
        assert c.dead == refused, (script, c.error)
        assert not refused or "lowers to the very code an empty script gives" in c.error, c.error


def test_lower_for_target_gives_the_builds_verdict():
    """``lower_for_target`` raises the error the H200 build gave for that kernel (the TIR passes', before any code
    generation: no CUDA compiler on this machine); the same kernel for llvm lowers."""
    from tvm import s_tir

    from little_dragon.codec import PostprocContext, apply
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target

    mod, target = _dense_relu_module(), _cuda_target()
    sch = s_tir.Schedule(mod)
    apply(DENSE_RELU, sch, PostprocContext(mod, target))
    with pytest.raises(Exception, match="Cannot insert syncs inside condition"):
        lower_for_target(sch.mod, as_target(target))
    lower_for_target(mod, as_target('{"kind": "llvm", "num-cores": 2}'))


def test_nested_thread_bindings_reads_the_kernel():
    """``nested_thread_bindings`` on scheduled kernels: one thread axis on nested loops of different extents is named
    (both loops); different axes are not; nor are the committed CUDA records' finished kernels, whose cooperative
    fetches bind threadIdx.y inside the block's own threadIdx.y loop at the same extent.  And ``lower_for_target``
    agrees with MetaSchedule's builder on them: the measured records lower, the ones whose build failed do not."""
    from dragon_testkit import matmul_tensors
    from tvm import s_tir

    from little_dragon.codec import PostprocContext, apply, encode
    from little_dragon.generation.constrain_state import nested_thread_bindings
    from little_dragon.tvmx.build import import_tensor_intrinsics, lower_for_target
    from little_dragon.tvmx.postprocs import as_target

    def bound(outer: str, inner: str) -> list[str]:
        sch = s_tir.Schedule(prim_module(matmul_tensors(64)))
        i, j, _ = sch.get_loops(sch.get_sblock("C"))
        io, _ = sch.split(i, [None, 4])
        sch.bind(io, outer)
        sch.bind(j, inner)
        return nested_thread_bindings(sch)

    clash = bound("threadIdx.x", "threadIdx.x")  # extents 16 and 64
    assert len(clash) == 2 and all("threadIdx.x" in c for c in clash), clash
    assert bound("blockIdx.x", "threadIdx.x") == [] and bound("threadIdx.y", "threadIdx.x") == []
    import_tensor_intrinsics()  # the records tensorize
    n = 0
    for db, built in (("real_cuda_valid_db", True), ("real_cuda_db", False)):
        for _, mod, target, tj in real_records(CODEC_DATA / db):
            sch = s_tir.Schedule(mod)
            apply(encode(tj), sch, PostprocContext(mod, target))
            assert nested_thread_bindings(sch) == []
            if built:  # MetaSchedule built and ran it: the end check's lowering accepts it
                lower_for_target(sch.mod, as_target(target))
            else:  # stored with run_secs 1e10, its build failed in tuning: the lowering refuses it likewise
                with pytest.raises(Exception, match="tvm_access_ptr element type"):
                    lower_for_target(sch.mod, as_target(target))
            n += 1
    assert n >= 5


def test_a_deferred_end_check_gives_the_same_verdict_after_settle(engine, smollm2):
    """With ``defer_end`` (the shared-prefix engine's calls: ``generate_constrained``) the end check runs in the TVM
    worker beside decoding: at `post *` the attempt goes on (only the end may follow, in the masks too), and
    ``settle`` applies the verdict: the 2048-thread script is then dead with VerifyGPUCode's verdict and counted, as
    when checked at once; the 256-thread one stays alive."""
    from dragon_testkit import matmul_tensors

    from little_dragon.generation.constrained import ScriptConstraint, Workload, allocate_bitmask, unpack_bitmask

    mod, target = prim_module(matmul_tensors(64)), _cuda_target()
    wl = Workload(mod, target)
    for threads, refused in ((2048, True), (256, False)):
        c = ScriptConstraint(engine, wl)
        c.defer_end = True
        for t in smollm2(MATMUL.format(threads=threads), add_special_tokens=False)["input_ids"]:
            c.advance(t)
        assert c.finished and not c.dead and c._end is not None and c.stats.end_checked == 1
        bits = allocate_bitmask(1, engine.vocab_size)
        c.fill_mask(bits, 0)
        assert unpack_bitmask(bits, engine.vocab_size)[0].nonzero().flatten().tolist() == [engine.eos_id]
        c.settle()
        assert c.dead == refused and c.stats.rejected_end == int(refused), c.error
        if refused:
            assert c.error.startswith("post:") and "VerifyGPUCode" in c.error, c.error
            assert c.script(MATMUL.format(threads=threads)) == MATMUL.format(threads=threads)


def test_the_no_op_test_reads_the_kernel_the_post_derivation_left():
    """In the end-check worker (no live schedules) the no-op test compares the kernel that the `post *` derivation left
    before post-processing (``PostprocContext.pre_module``) with the workload's, instead of applying the lines again.
    That kernel must be the lines' alone: on llvm the post-processors rewrite the matmul's reduction block, so a kernel
    the post-processing had changed in place would hide the no-op.  The kernel rules of accelerators
    (``on_accelerator``) do not apply to a CPU target."""
    from dragon_testkit import matmul_tensors

    from little_dragon.codec import PostprocContext, SyntaxOnlyContext, decode
    from little_dragon.generation.schedule_worker import finish_check, on_accelerator
    from little_dragon.tvmx.postprocs import as_target

    mod, llvm = prim_module(matmul_tensors(64)), '{"kind": "llvm", "num-cores": 2}'
    context = PostprocContext(mod, llvm)
    nothing, par = "blk C\nloops b0 3\npost *\n", "blk C\nloops b0 3\npar l0\npost *\n"
    assert finish_check(mod, context, nothing).startswith("no_op: the script schedules nothing: the kernel is unchanged")
    assert context.pre_module(decode("blk C\nloops b0 3\n", SyntaxOnlyContext())) is not None  # read off the derivation
    assert finish_check(mod, context, par) == ""
    assert not on_accelerator(as_target(llvm)) and on_accelerator(as_target(_cuda_target()))


def test_a_cpu_kernel_that_does_not_lower_is_refused():
    """On llvm too the end check lowers the finished kernel: a software-pipeline annotation without its other half
    passes the post-processors and fails the build's lowering (session 24's CPU sealed build errors), so the check
    refuses it with the lowering's reason; TVM's own build of the same kernel fails alike."""
    import pytest
    import tvm
    from dragon_testkit import matmul_tensors

    from little_dragon.codec import PostprocContext, apply
    from little_dragon.generation.schedule_worker import finish_check
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.schedule import fresh_schedule

    mod, llvm = prim_module(matmul_tensors(64)), '{"kind": "llvm", "num-cores": 2}'
    context = PostprocContext(mod, llvm)
    half = "blk C\nloops b0 3\nann l2 order [0 1 2]\npost *\n"
    assert finish_check(mod, context, half) == "lowering: ValueError: Stage of the software pipeline is not defined."
    sch = apply(half, fresh_schedule(mod), context)
    with pytest.raises(Exception, match="Stage of the software pipeline is not defined"):
        fast_build(sch.mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))
    assert finish_check(mod, context, "blk C\nloops b0 3\npar l0\npost *\n") == ""
