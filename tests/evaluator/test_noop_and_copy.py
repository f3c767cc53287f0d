"""Scripts that do nothing are failures (``no_op``), refinements that hand the given kernel back are copies,
and the reward orders them: faster correct > slower correct > copy > no_op > every other failure.

Before issue 11 an empty script was judged ``correct`` (reward ~1.0 on llvm, 0.1-1.0 on CUDA), above every
failure (<= -0.5): RL would have learned to write nothing."""
from __future__ import annotations

import dataclasses

import pytest
from evkernels import matmul, schedule

from little_dragon.evaluator.pool import EvalRequest


def _annotate_only(sch):  # an annotation nothing reads: the code is the empty script's
    sch.annotate(sch.get_sblock("C"), "little_dragon.note", 1)


def _lookups_only(sch):
    sch.get_loops(sch.get_sblock("C"))


@pytest.mark.parametrize("edit", [lambda sch: None, _lookups_only, _annotate_only], ids=["empty", "lookups", "annotation"])
def test_scripts_that_schedule_nothing_are_no_op_on_llvm(evaluator, mm256, edit):
    r = evaluator.evaluate(mm256, schedule(mm256, edit))
    assert r.category == "no_op", (r.category, r.message)
    assert "schedules nothing" in r.message
    assert r.reward == evaluator.cfg.reward.penalties["no_op"]
    assert r.latency_us is None and r.speedup is None


def test_literally_empty_text_is_no_op(evaluator, mm256):
    for text in ("", "\n"):
        r = evaluator.evaluate(mm256, text)
        assert r.category == "no_op", (repr(text), r.category, r.message)


def test_empty_script_is_no_op_on_cuda(eval_cfg, timing_cfg, tmp_path):
    """On CUDA the post-processors bind an unscheduled kernel's threads, so the empty script builds and runs:
    still a no-op (checked without a GPU: the test stops after code generation)."""
    from little_dragon.evaluator.pool import Evaluator
    from little_dragon.tvmx.target import CUDA_H200

    mod = matmul(128)
    cfg = dataclasses.replace(eval_cfg, pool_size=1, cache_path="")
    with Evaluator(CUDA_H200, cfg, timing_cfg, stop_after="build") as ev:
        empty, note, real, default = ev.evaluate_batch([EvalRequest(mod, schedule(mod, lambda sch: None)),
                                                        EvalRequest(mod, schedule(mod, _annotate_only)),
                                                        EvalRequest(mod, _bound(mod, 256)),
                                                        EvalRequest(mod, _bound(mod, 1024))])
    assert empty.category == "no_op" and note.category == "no_op", (empty.message, note.message)
    assert real.category == "built" and not real.copy, real.message
    # real scheduling that lands exactly on RewriteUnboundBlock's default (MetaSchedule samples such
    # schedules): a valid kernel, credited as a copy of the default one, never as an improvement
    assert default.category == "built" and default.copy, default.message


def _bound(mod, threads: int) -> str:
    def edit(sch):
        i, j, _ = sch.get_loops(sch.get_sblock("C"))
        bx, tx = sch.split(sch.fuse(i, j), [None, threads])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")

    return schedule(mod, edit)


def test_refinement_copy_is_correct_but_never_an_improvement(evaluator, mm256, tuned_scripts):
    """The given script back (verbatim, or with a no-effect annotation added) is a copy: correct, reward
    ``copy_reward``; a genuinely different, faster script is not."""
    from little_dragon.evaluator.script import decode_script

    given, better = tuned_scripts[2], tuned_scripts[0]
    verbatim = evaluator.evaluate(mm256, given, reference_script=given)
    assert verbatim.category == "correct" and verbatim.copy, verbatim.message
    assert verbatim.reward == evaluator.cfg.reward.copy_reward

    # same kernel, different text: append an annotation that no pass reads
    from evkernels import script_of
    from tvm.s_tir import Schedule, Trace

    sch = Schedule(mm256)
    Trace.apply_json_to_schedule(decode_script(given), sch)
    sch.annotate(sch.get_sblock("C"), "little_dragon.note", 1)
    shuffled = evaluator.evaluate(mm256, script_of(sch), reference_script=given)
    assert shuffled.category == "correct" and shuffled.copy, shuffled.message

    changed = evaluator.evaluate(mm256, better, reference_script=given)
    assert changed.category == "correct" and not changed.copy
    assert changed.reward != evaluator.cfg.reward.copy_reward


def test_reward_ordering(evaluator):
    """fast correct > slow correct > copy > no_op > the other failures, from the shaped reward itself."""
    from little_dragon.evaluator.outcome import FAILURES, shaped_reward

    rc = evaluator.cfg.reward
    fast = shaped_reward("correct", 3.0, False, rc, kind="llvm")
    slow = shaped_reward("correct", 0.05, False, rc, kind="llvm")
    copy = shaped_reward("correct", 1.0, False, rc, copy=True, kind="llvm")
    no_op = shaped_reward("no_op", None, False, rc)
    others = [shaped_reward(c, None, False, rc) for c in FAILURES if c != "no_op"]
    assert fast > slow > copy > no_op > max(others)
    # within the timing noise floor a "speedup" earns nothing; beyond it, it does
    floor = rc.noise_floor["llvm"]
    assert shaped_reward("correct", 1.0 + floor / 2, False, rc, kind="llvm") == rc.correct_base
    assert shaped_reward("correct", 2.0, False, rc, kind="llvm") > rc.correct_base
    assert shaped_reward("correct", 1.1, False, rc, kind="cuda") > rc.correct_base  # the H200 is quieter


def test_code_hash_is_stable_across_builds(mm256, tuned_scripts):
    """A kernel's identity must not depend on the compiling process: LLVM's alias metadata names buffers by
    address, so the same kernel built twice (another build in between) differed until that was normalised."""
    import tvm
    from evkernels import LLVM, matmul
    from tvm.s_tir import Schedule, Trace

    from little_dragon.evaluator.replay import code_hash
    from little_dragon.evaluator.script import decode_script
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import run_postprocs, target_postprocs

    def build():
        sch = Schedule(mm256)
        Trace.apply_json_to_schedule(decode_script(tuned_scripts[0]), sch)
        run_postprocs(sch, target_postprocs(mm256, LLVM))
        return code_hash(fast_build(sch.mod, tvm.target.Target(LLVM)))

    first = build()
    fast_build(matmul(32), tvm.target.Target(LLVM))
    assert build() == first
