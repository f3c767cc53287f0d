"""No end while a block is half bound (issue 16, session 37). `post *`'s RewriteUnboundBlock binds the blocks no
blockIdx/threadIdx pair encloses, and refuses one under a blockIdx loop and no threadIdx loop ("Unsupported case,
where blockIdx is bound but threadIdx is not", MetaSchedule's thread_bind.cc). Session 36's H100 A/B drew that end in
51 of its 101 line retries, and 12 of its 128 attempts ended refused so (`loops b1 4`, `fuse l8` of one loop, `bind l16
bx`, `post *`). The line grammar does not offer `post` in such a state while a loop above the block is free to take a
threadIdx (``ScheduleState.half_bound``); where none is, the end check refuses as before.

Real parts only: a TE kernel made into TensorIR, the codec, TVM's post-processors for sm_90, the committed real CUDA
databases, llguidance.
"""
from __future__ import annotations

import json

from dragon_testkit import LLVM, CODEC_DATA, H200_TARGET, allowed_by_mask, matmul_tensors, prim_module, real_records

H200 = json.dumps(H200_TARGET)
HEAD = "blk C\nloops b0 3\n"


def _gpu_state(mod, text, target: str = H200):
    """The facts of ``text`` as the worker gives them for ``target`` (``schedule_worker.prefix_facts``)."""
    from little_dragon.generation import constrained

    return constrained._prefix_state(mod, text, constrained.Workload(mod, target).key)


def _post_refusal(mod, text) -> str:
    """TVM's post-processors for sm_90 on ``text`` + `post *`: their error's message, "" when they pass."""
    from tvm import s_tir

    from little_dragon.codec import PostprocContext, apply

    try:
        apply(text + "post *\n", s_tir.Schedule(mod), PostprocContext(mod, H200_TARGET))
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        return str(e)
    return ""


def test_a_block_under_blockidx_alone_may_not_end_while_a_loop_can_take_threadidx(engine, smollm2, monkeypatch):
    """`fuse l0` of one loop bound to blockIdx.x, two loops left: RewriteUnboundBlock refuses the end, the state is half
    bound and `post` is masked (allowed with ``HALF_BOUND_RULE`` off, as before session 37); binding a loop under it to
    threadIdx.x makes it whole, and `post` is allowed and passes."""
    from little_dragon.generation import constrained
    from little_dragon.generation.constrained import Workload

    mod = prim_module(matmul_tensors(64))
    wl = Workload(mod, H200)
    half = HEAD + "fuse l0\nbind l3 bx\n"
    assert "blockIdx is bound but threadIdx is not" in _post_refusal(mod, half)
    assert _gpu_state(mod, half).half_bound == "C"
    assert not allowed_by_mask(engine, wl, smollm2, half + "post *\n")
    monkeypatch.setattr(constrained, "HALF_BOUND_RULE", False)
    assert allowed_by_mask(engine, wl, smollm2, half + "post *\n")
    monkeypatch.setattr(constrained, "HALF_BOUND_RULE", True)
    assert allowed_by_mask(engine, wl, smollm2, half + "bind l1 tx\n")
    whole = half + "bind l1 tx\n"
    assert _gpu_state(mod, whole).half_bound == "" and _post_refusal(mod, whole) == ""
    assert allowed_by_mask(engine, wl, smollm2, whole + "post *\n")


def test_a_block_with_no_free_loop_left_keeps_its_end(engine, smollm2):
    """C's two loops fused into the one bound to blockIdx.x: no line can bind a threadIdx above C any more, so `post`
    stays allowed (the end check refuses it, and the attempt's end retry goes back, as before this rule); with no
    blockIdx at all, `post *` binds the blocks itself and nothing is half bound."""
    from dragon_testkit import two_block_tensors

    from little_dragon.generation.constrained import Workload

    mod = prim_module(two_block_tensors())
    wl = Workload(mod, H200)
    head = "blk B\nblk C\nloops b1 2\n"
    stuck = head + "fuse l0 l1\nbind l2 bx\n"
    assert "blockIdx is bound but threadIdx is not" in _post_refusal(mod, stuck)
    assert _gpu_state(mod, stuck).half_bound == ""
    assert allowed_by_mask(engine, wl, smollm2, stuck + "post *\n")
    unbound = head + "fuse l0 l1\n"
    assert _post_refusal(mod, unbound) == "" and _gpu_state(mod, unbound).half_bound == ""
    half = head + "bind l0 bx\n"  # C's inner loop still free: half bound on the GPU, nothing on a CPU target
    assert _gpu_state(mod, half).half_bound == "C"
    assert _gpu_state(mod, half, json.dumps(LLVM)).half_bound == ""


def test_no_real_cuda_record_is_half_bound_before_its_end():
    """Every committed CUDA record (MetaSchedule's own traces, their post-processing passed) is whole where it writes
    `post *`: the rule never masks a real end."""
    from dragon_testkit import model_script_lines

    from little_dragon.generation.constrain_state import half_bound_blocks, replay
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    seen = 0
    for db in ("real_cuda_db", "real_cuda_valid_db"):
        for _, mod, target, tj in real_records(CODEC_DATA / db):
            lines = [x for x in model_script_lines(tj) if x != "post *"]
            state = _gpu_state(mod, "".join(x + "\n" for x in lines), json.dumps(target) if isinstance(target, dict)
                               else str(target))
            assert not state.cpu and state.loop_bound and state.half_bound == "", db
            assert half_bound_blocks(replay(mod, tj).sch) == ([], True), db  # none at all, fixable or not
            seen += 1
    assert seen >= 4
