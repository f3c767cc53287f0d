"""Why VerifyGPUCode refused a schedule (``tvmx/verify_gpu.py``): its post-processor answers only False, and a refused
script's error said "rejects the schedule" (session 43's H100 A/B: 19-27 such retries a run, five kinds among five
stored examples).  Each of its checks broken on purpose in one real MetaSchedule record, the verdict through the
constraint's end check (the codec's `post *`) and through the evaluator's replay.

Real parts only: the committed CUDA database's SIMT record (measured by MetaSchedule), TVM's schedule, post-processors
and lowering, the codec.  (VerifyGPUCode's limit of 8 virtual threads is checked after InjectVirtualThread has
removed them: this record with 12 or 24 of them and its caches under the limit passes.)
"""
from __future__ import annotations

import re

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import end_check, model_script_lines, real_records, with_tiles

REFUSED = "post-processor VerifyGPUCode rejects the schedule: "
# record 0 of real_cuda_simt_db: a 64 x 3072 x 2048 matmul; i tiled 2 1 4 8 1, j 2 6 64 4 1 (threadIdx.x = 4 x 64,
# 6 virtual threads), k 1024 1 2; A and B cached in shared memory at k's outer loop l13, pipelined in three stages
PIPELINE = ("ann l33 stage [0 0 2]", "ann l33 order [0 1 2]", "ann l33 async [0]")
# B's cache placed one loop deeper (its own 7 loops, so the later loop names move by one): the pipelined loop's body is
# then A's copy and one loop, two statements for three stages
SPLIT_CACHES = {"at b4 l13": "at b4 l14", "loops b4 6": "loops b4 7", "fuse l30 l31": "fuse l31 l32",
                **{p: p.replace("l33", "l34") for p in PIPELINE}}


def _script(lines: list[str]) -> str:
    return "".join(x + "\n" for x in lines)


@pytest.fixture(scope="module")
def record():
    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_simt_db")))
    lines = model_script_lines(tj)
    assert all(p in lines for p in PIPELINE) and lines[-1] == "post *", lines
    return mod, target, lines


def _unpiped(lines: list[str]) -> list[str]:
    return [x for x in lines if not re.match(r"ann l\d+ (stage|order|async) ", x)]


CASES = {
    # (32 + 1536) x 4 floats a stage, three stages: 75,264 bytes (the rule [shared memory] measures the same)
    "the pipeline triples the caches": (lambda ls: with_tiles(ls, {"l2": "512 1 4"}),
                                        "shared memory: 75264 bytes a thread block in main, over the limit of 49152"),
    # (32 + 1536) x 8 floats, no pipeline: the tiling's caches alone
    "the caches alone": (lambda ls: _unpiped(with_tiles(ls, {"l2": "256 1 8"})),
                         "shared memory: 50176 bytes a thread block in main, over the limit of 49152"),
    # threadIdx.x = 64 x 64 against the block's `minthreads 32` / `maxthreads 1024` (ThreadExtentChecker, first)
    "threads outside the block's bounds": (lambda ls: with_tiles(ls, {"l0": "1 1 64 1 1"}),
                                           "thread extent: block out_init runs 4096 threads a thread block, outside "
                                           "the bounds [32, 1024]"),
    # the same threads without the bounds: the target's max_threads_per_block on the lowered code
    "threads over the target's": (lambda ls: [x for x in with_tiles(ls, {"l0": "1 1 64 1 1"}) if "threads" not in x],
                                  "threads: 4096 a thread block in main, over the limit of 1024"),
    # a pipeline of three stages over a body of two statements: InjectSoftwarePipeline raises in the lowering
    "a pipeline over a body it does not fit": (lambda ls: [SPLIT_CACHES.get(x, x) for x in ls],
                                               "lowering: InternalError: Check failed: pipeline_stages.size() == "
                                               "original_order.size() (3 vs. 2)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_refusal_says_why(record, case):
    """Each check broken alone in the record: `post *` refused by VerifyGPUCode with that check's cause and numbers
    (the record itself passes); where the pipeline is the cause, the same script without its pipeline passes."""
    mod, target, lines = record
    change, why = CASES[case]
    assert end_check(mod, _script(lines), target) == ""
    verdict = end_check(mod, _script(change(lines)), target)
    assert REFUSED in verdict and why in verdict, verdict
    if case == "a pipeline over a body it does not fit":
        assert end_check(mod, _script(_unpiped(change(lines))), target) == ""


def test_the_shared_memory_why_is_the_rules_count(record):
    """The bytes a refusal names are the ones [shared memory] refuses the pipeline's `order` line with (one lowering,
    one bisection: ``tvmx.verify_gpu``), on the pipeline's prefix and on the whole script."""
    import tvm

    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay
    from little_dragon.generation.shared_memory import shared_memory_over
    from little_dragon.tvmx.verify_gpu import verify_gpu_code_why

    mod, target, lines = record
    over = with_tiles(lines, {"l2": "512 1 4"})
    head = over[:over.index(PIPELINE[1]) + 1]
    sch = replay(mod, codec.decode(_script(head), codec.SyntaxOnlyContext()))
    tgt = tvm.target.Target(target)
    assert shared_memory_over(sch.sch.mod, tgt) == ("main", 75264, 49152)
    assert verify_gpu_code_why(sch.sch.mod, tgt).startswith("shared memory: 75264 bytes")


def test_the_evaluators_verify_error_names_the_cause(record):
    """The judge's replay: a script VerifyGPUCode refuses is a verify_error whose message says why; post-processors
    given as a plain list (no target known) refuse it as before, without a why."""
    from little_dragon import codec
    from little_dragon.evaluator.replay import ReplayFailure, replay
    from little_dragon.tvmx.postprocs import target_postprocs

    mod, target, lines = record
    pre = [x for x in with_tiles(lines, {"l2": "256 1 8"}) if x != "post *"]
    trace = codec.decode(_script(_unpiped(pre)), codec.SyntaxOnlyContext())
    procs = target_postprocs(mod, target)
    with pytest.raises(ReplayFailure) as e:
        replay(mod, trace, procs)
    assert e.value.category == "verify_error"
    assert str(e.value) == REFUSED + "shared memory: 50176 bytes a thread block in main, over the limit of 49152"
    with pytest.raises(ReplayFailure) as e:
        replay(mod, trace, list(procs))
    assert e.value.category == "verify_error"
    assert str(e.value) == "post-processor VerifyGPUCode rejects the schedule"
