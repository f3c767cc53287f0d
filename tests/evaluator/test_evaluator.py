"""The evaluator end to end with real TVM: categories from real cases, numerics, containment, cache, API."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from evkernels import LLVM, design_space_scripts, matmul, schedule, softmax

from little_dragon.evaluator.outcome import CATEGORIES
from little_dragon.evaluator.pool import EvalRequest


def test_tuned_script_is_correct_and_faster_than_unscheduled(evaluator, mm256, tuned_scripts):
    r = evaluator.evaluate(mm256, tuned_scripts[0])
    assert r.category == "correct", r.message
    assert r.baseline_kind == "unscheduled"
    assert r.latency_us > 0 and r.baseline_us > r.latency_us
    assert r.speedup == pytest.approx(r.baseline_us / r.latency_us)
    assert r.speedup > 1.5
    cfg = evaluator.cfg.reward
    assert cfg.correct_base < r.reward < cfg.correct_base + cfg.speedup_weight
    assert r.max_abs_err is not None and r.max_abs_err < 1e-2
    assert r.input_seed is not None and not r.cached

    again = evaluator.evaluate(mm256, tuned_scripts[0])  # same workload hash + canonical script: a hit
    assert again.cached and again.category == "correct" and again.latency_us == r.latency_us
    assert again.eval_s < 0.5


def test_fp16_accumulator_is_caught_by_numerics(evaluator):
    """A real, plausible schedule: cache the fp32 accumulator, then (unsafely) store it in float16.
    It applies, verifies and builds; only the numbers are wrong (relative error ~1e-3..1e-2)."""
    mod = matmul(128)

    def edit(sch):
        blk = sch.get_sblock("C")
        sch.cache_write(blk, 0, "global")
        sch.unsafe_set_dtype(blk, 0, "float16")

    r = evaluator.evaluate(mod, schedule(mod, edit))
    assert r.category == "wrong_result", (r.category, r.message)
    assert "outside rtol" in r.message and r.max_abs_err > 1e-3
    assert r.reward == evaluator.cfg.reward.penalties["wrong_result"]
    assert r.speedup is None and r.latency_us is None


def test_each_failure_category_from_a_real_case(evaluator, mm256, tuned_scripts):
    mod = matmul(128)

    def bind_on_cpu(sch):  # a GPU thread binding on an llvm target: applies, verifies, cannot be code-generated
        i, _, _ = sch.get_loops(sch.get_sblock("C"))
        sch.bind(i, "threadIdx.x")

    def huge_padding(sch):  # pads C to 2^15 x 2^15 (4 GiB): over the worker's 4 GiB address-space limit
        sch.pad_einsum(sch.get_sblock("C"), [1 << 15, 1 << 15, 128])

    def endless_loop(sch):  # reduction split far beyond its extent: 2^28 predicated steps per output
        _, _, k = sch.get_loops(sch.get_sblock("C"))
        sch.split(k, [1 << 14, 1 << 14])

    cases = [
        ("decode_error", EvalRequest(mod, "sch.split(l0, [4, None]")),
        ("apply_error", EvalRequest(softmax(), tuned_scripts[0])),   # a matmul trace on a softmax: no block C
        ("build_error", EvalRequest(mod, schedule(mod, bind_on_cpu))),
        ("runtime_error", EvalRequest(mod, schedule(mod, huge_padding))),
        ("timeout", EvalRequest(mod, schedule(mod, endless_loop))),
    ]
    t0 = time.perf_counter()
    results = evaluator.evaluate_batch([req for _, req in cases])
    wall = time.perf_counter() - t0
    for (want, _), r in zip(cases, results):
        assert r.category == want, (want, r.category, r.message)
        assert r.message
        assert r.reward == evaluator.cfg.reward.penalties[want]
    assert "exceeded" in results[4].message
    assert wall < evaluator.cfg.run_timeout_s + evaluator.cfg.build_timeout_s + 30


def test_cuda_verifier_rejects_oversized_blocks(eval_cfg, timing_cfg, tmp_path):
    """VerifyGPUCode (MetaSchedule's CUDA verifier) rejects 2048 threads per block, without needing a GPU."""
    from little_dragon.evaluator.pool import Evaluator
    from little_dragon.tvmx.target import CUDA_H200

    mod = matmul(128)

    def too_many_threads(sch):  # 2048 threads per block; the H200 target allows 1024
        i, j, _ = sch.get_loops(sch.get_sblock("C"))
        bx, tx = sch.split(sch.fuse(i, j), [8, 2048])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")

    def bound_512(sch):  # a real (if plain) schedule: 32 blocks of 512 threads (1024 threads would be exactly
        i, j, _ = sch.get_loops(sch.get_sblock("C"))  # what RewriteUnboundBlock does to an empty script: a copy)
        bx, tx = sch.split(sch.fuse(i, j), [32, 512])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")

    cfg = dataclasses.replace(eval_cfg, pool_size=1, cache_path=str(tmp_path / "cuda.sqlite"))
    with Evaluator(CUDA_H200, cfg, timing_cfg) as ev:
        verify, build, empty = ev.evaluate_batch([EvalRequest(mod, schedule(mod, too_many_threads)),
                                                  EvalRequest(mod, schedule(mod, bound_512)),
                                                  EvalRequest(mod, schedule(mod, lambda sch: None))])
    assert verify.category == "verify_error" and "VerifyGPUCode" in verify.message, verify.message
    # a bound schedule verifies and builds; it then runs on the GPU, or (on a machine without one) fails at
    # the device, never earlier
    assert build.phase_s.get("build", 0) > 0, build.message
    assert build.category == ("correct" if ev.device != "cuda:absent" else "runtime_error"), build.message
    # the post-processors would bind an unscheduled kernel by themselves: an empty script is still a no-op
    assert empty.category == "no_op" and empty.reward == cfg.reward.penalties["no_op"], empty.message


def test_hanging_and_crashing_evaluations_are_contained(evaluator, mm256, tuned_scripts):
    """Test-only hooks compiled into the worker (enabled by the pool's test_hooks flag, never by a script
    alone): one sleeps forever inside the measurement lock, one calls os.abort()."""
    t0 = time.perf_counter()
    hang, crash, ok = evaluator.evaluate_batch([EvalRequest(mm256, "#dragon-test: hang"),
                                                EvalRequest(mm256, "#dragon-test: abort"),
                                                EvalRequest(mm256, tuned_scripts[1])])
    assert hang.category == "timeout" and hang.phase == "run" and "replaced" in hang.message
    assert crash.category == "runtime_error" and "SIGABRT" in crash.message
    assert ok.category == "correct", ok.message  # waited for the lock the hung worker held, then ran
    assert time.perf_counter() - t0 < 3 * evaluator.cfg.run_timeout_s + 30
    # the pool replaced both workers and still works
    again = evaluator.evaluate(mm256, tuned_scripts[2])
    assert again.category == "correct", again.message


def parallel_rows(mod, split: int) -> str:
    """A valid schedule of ``mod`` (a matmul) that only the containment tests evaluate: never answered from the cache."""
    def edit(sch):
        i, _, _ = sch.get_loops(sch.get_sblock("C"))
        outer, _ = sch.split(i, [None, split])
        sch.parallel(outer)
    return schedule(mod, edit)


def test_a_worker_leaves_after_a_device_error_and_its_verdict_is_kept(evaluator, mm256):
    """After a run-time error that may have broken its device context (a CUDA kernel's illegal address: sticky, and
    thrown again from the kernel's buffers' destructors), the worker hands its result over through the phase
    directory and leaves without running a destructor; the pool reports that result and replaces the worker, so the
    scripts after it are judged by a sound worker.  The ``device-error`` hook raises CUDA's message from the run."""
    def workers() -> set[str]:  # each live worker keeps its phase file, named by its pid
        return {p.name for p in Path(evaluator._phase_dir).iterdir() if p.name.isdigit()}

    def until(holds, timeout_s: float = 60.0) -> bool:  # workers start (and write their phase file) asynchronously
        end = time.monotonic() + timeout_s
        while not holds() and time.monotonic() < end:
            time.sleep(0.1)
        return holds()

    # every worker up first (earlier tests' replacements may still be starting): the hook then runs on one of these
    assert until(lambda: len(workers()) == evaluator.pool_size), (workers(), evaluator.pool_size)
    before = workers()
    bad, ok1, ok2 = evaluator.evaluate_batch([EvalRequest(mm256, "#dragon-test: device-error"),
                                              EvalRequest(mm256, parallel_rows(mm256, 8)),
                                              EvalRequest(mm256, parallel_rows(mm256, 16))])
    assert bad.category == "runtime_error" and bad.phase == "run", bad.message
    assert "cudaErrorIllegalAddress" in bad.message and "worker replaced" in bad.message, bad.message
    assert ok1.category == "correct" and ok2.category == "correct", (ok1.message, ok2.message)
    assert not (bad.cached or ok1.cached or ok2.cached)
    assert not list(Path(evaluator._phase_dir).glob("*.result*"))  # read and removed
    # the worker that ran the hook is gone, another took its place
    assert until(lambda: bool(workers() - before and before - workers())), (before, workers())


def test_a_pool_broken_by_a_worker_ending_between_tasks_is_replaced(eval_cfg, timing_cfg, mm256):
    """pebble gives up on its whole pool when a worker ends abnormally while no task runs (every later task: a
    RuntimeError); the evaluator starts a new pool and the run goes on.  The ``exit-after-task`` hook answers, then
    its worker ends 0.3 s later, while the pool is idle."""
    from little_dragon.evaluator.pool import Evaluator

    cfg = dataclasses.replace(eval_cfg, pool_size=1, cache_path="")
    with Evaluator(LLVM, cfg, timing_cfg, test_hooks=True) as ev:
        hooked = ev.evaluate(mm256, "#dragon-test: exit-after-task")
        assert hooked.message.startswith("test hook exit-after-task"), hooked.message
        deadline = time.time() + 20
        while ev._pool.active and time.time() < deadline:
            time.sleep(0.2)
        assert not ev._pool.active  # what pebble does; the case this test is about
        after = ev.evaluate(mm256, parallel_rows(mm256, 4))
        assert after.category == "correct" and not after.cached, after.message
        assert ev._pool.active


def test_scripts_aborted_by_a_broken_pool_are_evaluated_again(eval_cfg, timing_cfg, mm256):
    """A worker that dies holding the lock pebble's workers share (``exit-holding-channel-lock``) leaves the next worker
    unable to fetch a task; it gives up (after 2 s with test hooks, 60 s otherwise) and pebble aborts every waiting task
    as its pool breaks.  The script that waited is evaluated again on a new pool, not judged by the break."""
    from little_dragon.evaluator.pool import Evaluator

    cfg = dataclasses.replace(eval_cfg, pool_size=1, cache_path="")
    with Evaluator(LLVM, cfg, timing_cfg, test_hooks=True) as ev:
        t0 = time.perf_counter()
        hooked, waited = ev.evaluate_batch([EvalRequest(mm256, "#dragon-test: exit-holding-channel-lock"),
                                            EvalRequest(mm256, parallel_rows(mm256, 2))])
        assert hooked.category == "runtime_error" and "worker died" in hooked.message, hooked.message
        assert waited.category == "correct" and not waited.cached, waited.message
        assert time.perf_counter() - t0 < 90


def test_hooks_are_inert_without_the_test_flag(eval_cfg, timing_cfg):
    from little_dragon.evaluator.pool import Evaluator

    cfg = dataclasses.replace(eval_cfg, pool_size=1, cache_path="")
    with Evaluator(LLVM, cfg, timing_cfg) as ev:
        r = ev.evaluate(matmul(32), "#dragon-test: abort")
    assert r.category == "decode_error"


def test_batch_keeps_order_and_dedupes(evaluator, mm256, tuned_scripts):
    reqs = [EvalRequest(mm256, tuned_scripts[0]), EvalRequest(mm256, "junk"),
            EvalRequest(mm256, tuned_scripts[0]), EvalRequest(softmax(), tuned_scripts[0])]
    out = evaluator.evaluate_batch(reqs)
    assert [r.category for r in out] == ["correct", "decode_error", "correct", "apply_error"]
    assert out[0].latency_us == out[2].latency_us


def test_refinement_measures_against_the_given_script(evaluator, mm256, tuned_scripts):
    slow, fast = tuned_scripts[2], tuned_scripts[0]
    r = evaluator.evaluate(mm256, fast, reference_script=slow)
    ref = evaluator.evaluate(mm256, slow)
    assert r.mode == "refinement" and r.category == "correct"
    assert r.reference_us == pytest.approx(ref.latency_us)
    assert r.speedup == pytest.approx(ref.latency_us / r.latency_us)


def test_roofline_guard_flags_and_does_not_reward_impossible_speed(evaluator, mm256, tuned_scripts):
    """With peaks set absurdly low, every real kernel 'beats physics': flagged after a re-measurement."""
    from little_dragon.evaluator.config import RooflinePeak

    saved = evaluator.cfg
    evaluator.cfg = dataclasses.replace(saved, roofline_peaks={"llvm": RooflinePeak(tflops=1e-9, gbps=1e-6)})
    try:
        r = evaluator.evaluate(mm256, tuned_scripts[0])
    finally:
        evaluator.cfg = saved
    assert r.category == "correct" and r.implausible and not r.cached
    assert r.latency_us < r.roofline_bound_us and "roofline" in r.message
    assert r.reward == saved.reward.implausible_reward
    normal = evaluator.evaluate(mm256, tuned_scripts[0])  # the guard is part of the cache key
    assert not normal.implausible and normal.reward > saved.reward.correct_base


def test_fuzzed_scripts_are_all_categorised(evaluator, tuned_scripts):
    """CI-sized fuzz run (the benchmark runs thousands): nothing escapes, nothing hangs, all categorised."""
    from little_dragon.evaluator.fuzz import mutants

    mod = matmul(64)
    base = design_space_scripts(mod)
    muts = mutants(base, 60, seed=7)
    t0 = time.perf_counter()
    out = evaluator.evaluate_batch([EvalRequest(mod, text) for _, text in muts])
    assert len(out) == len(muts)
    assert all(r.category in CATEGORIES for r in out)
    assert all(r.message for r in out if r.category != "correct")
    kinds = {r.category for r in out}
    assert "decode_error" in kinds and len(kinds) >= 2, kinds
    budget = evaluator.cfg.build_timeout_s + 2 * evaluator.cfg.run_timeout_s
    assert time.perf_counter() - t0 < len(out) * 1.0 + budget


def test_cli_prints_one_json_object(tmp_path, mm256, tuned_scripts):
    wl = tmp_path / "mm.py"
    wl.write_text(mm256.script())
    script = tmp_path / "s.txt"
    script.write_text(tuned_scripts[0])
    env = dict(os.environ, DRAGON_PARAMS=str(_small_params(tmp_path)))
    dragon = os.path.join(os.path.dirname(sys.executable), "dragon")
    p = subprocess.run([dragon, "evaluate", "--workload", str(wl), "--script", str(script), "--no-cache"],
                       capture_output=True, text=True, env=env, timeout=300)
    out = json.loads(p.stdout)  # exactly one JSON document on stdout
    assert p.returncode == 0, p.stderr[-2000:]
    assert out["category"] == "correct" and out["speedup"] > 1 and out["reward"] > 1
    assert {"message", "latency_us", "baseline_us"} <= set(out)

    p = subprocess.run([dragon, "evaluate", "--workload", str(tmp_path / "nope.py"), "--script", str(script)],
                       capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(p.stdout)
    assert p.returncode == 2 and out["category"] == "input_error" and "nope.py" in out["message"]
    assert "Traceback" not in p.stdout + p.stderr


def _small_params(tmp_path):
    import yaml

    from little_dragon.config import read_params

    params = read_params()
    params["timing"] = {"number": 2, "repeat": 3, "min_repeat_ms": 5}
    params["evaluator"] = dict(params.get("evaluator") or {}, run_timeout_s=20.0, preload_tensor_intrinsics="never")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path
