"""The RL reward through the real evaluator (llvm, sandboxed pool, real timing) on a real kernel: the ordering
fast correct > slow correct > copy > no_op > failures by severity, the loopholes closed (an empty script, a
refinement that hands the given script back), and a crashing, hanging or broken evaluator never raising."""
from __future__ import annotations

import pytest

LLVM = {"kind": "llvm", "num-cores": 2}


@pytest.fixture(scope="module")
def reward(tmp_path_factory):
    from little_dragon.evaluator.config import EvaluatorConfig
    from little_dragon.evaluator.pool import Evaluator
    from little_dragon.training.reward import KernelReward
    from little_dragon.tvmx.timing import TimingConfig

    d = tmp_path_factory.mktemp("rl-reward")
    cfg = EvaluatorConfig(pool_size=1, build_timeout_s=30.0, run_timeout_s=5.0, memory_limit_gb=4.0,
                          preload_tensor_intrinsics="never", cache_path=str(d / "cache.sqlite"))
    timing = TimingConfig(number=2, repeat=3, min_repeat_ms=5)
    # test_hooks: scripts '#dragon-test: hang|abort' make the worker hang or crash (inert without the flag)
    with KernelReward(lambda: Evaluator(LLVM, cfg, timing, test_hooks=True), cfg.reward, quantum=0.1) as kr:
        yield kr


@pytest.fixture(scope="module")
def kernel(standin_rows, reward):
    """matmul_64 and its MetaSchedule design-space scripts; the fastest one (as measured) and an unscheduled-
    speed script that still changes the kernel (one loop split: no parallel, no vectors)."""
    from tvm.script import from_source
    from tvm.s_tir import Schedule

    from little_dragon.codec import canonical_json
    from little_dragon.evaluator.script import encode_script

    rows = [r for r in standin_rows if r["name"] == "matmul_64"]
    tvmscript = rows[0]["tvmscript"]
    scripts = sorted({r["completion"] for r in rows})
    scored = reward.score(scripts, [tvmscript] * len(scripts), ["construction"] * len(scripts), [""] * len(scripts))
    assert all(s.category == "correct" for s in scored), [(s.category, s.message) for s in scored]
    fast = max(zip(scored, scripts), key=lambda x: x[0].speedup)[1]
    sch = Schedule(from_source(tvmscript))
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    sch.split(k, [None, 4])
    slow = encode_script(canonical_json(sch.trace.as_json(remove_postproc=False)))
    other = next(r for r in standin_rows if r["name"] == "softmax_64x128")["completion"]
    return {"tvmscript": tvmscript, "fast": fast, "slow": slow, "other_workload_script": other}


def _score(reward, kernel, items):
    """items: (script, task, start_script) on the kernel."""
    return reward.score([s for s, _, _ in items], [kernel["tvmscript"]] * len(items), [t for _, t, _ in items],
                        [ref for _, _, ref in items])


def test_reward_ordering_on_a_real_kernel(reward, kernel):
    f, s = kernel["fast"], kernel["slow"]
    out = _score(reward, kernel, [
        (f, "construction", ""),            # fast correct, vs the unscheduled baseline
        (f, "refinement", s),               # fast correct: refines the slow script
        (s, "refinement", f),               # slow correct: a refinement that made the kernel slower
        (f, "refinement", f),               # copy: the given script handed back
        ("", "construction", ""),           # no_op: the empty script
        ("\n\n", "refinement", f),          # no_op as a refinement too
        ("#dragon-test: hang", "construction", ""),    # timeout (worker killed and replaced)
        ("#dragon-test: abort", "construction", ""),   # runtime_error (worker crashed)
        (kernel["other_workload_script"], "construction", ""),  # apply_error: another kernel's blocks
        ("this is not a script", "construction", ""),           # decode_error
    ])
    fast_c, fast_r, slow_r, copy, noop, noop_r, hang, crash, apply_err, decode = out
    cats = [o.category for o in out]
    assert cats == ["correct"] * 4 + ["no_op", "no_op", "timeout", "runtime_error", "apply_error", "decode_error"], \
        [(o.category, o.message) for o in out]
    assert fast_c.speedup > 1.5 and fast_r.speedup > 1.5 and slow_r.speedup < 1 / 1.5  # real, measured gaps
    assert copy.copy and not fast_r.copy and not slow_r.copy
    # the ordering, as GRPO sees it (quantised rewards)
    assert min(fast_c.reward, fast_r.reward) > 1.0 > slow_r.reward > copy.reward > noop.reward
    assert noop.reward == noop_r.reward > max(hang.reward, crash.reward)
    assert min(hang.reward, crash.reward) > apply_err.reward > decode.reward
    # an empty script is no longer a correct kernel: it earns less than the slowest correct kernel
    assert noop.reward < slow_r.reward and not any(o.correct for o in (noop, noop_r))


def test_identical_scripts_get_identical_rewards_from_the_cache(reward, kernel):
    a, b = _score(reward, kernel, [(kernel["fast"], "construction", ""), (kernel["fast"], "construction", "")])
    assert a.reward == b.reward and a.cached and b.cached


def test_trl_call_logs_batch_metrics_and_extras(reward, kernel):
    logged, extra = {}, {}
    f = kernel["fast"]
    rewards = reward(prompts=["p"] * 4, completions=[f, "", "junk", f], completion_ids=None,
                     tvmscript=[kernel["tvmscript"]] * 4, task=["construction"] * 3 + ["refinement"],
                     start_script=["", "", "", f], log_metric=logged.__setitem__, log_extra=extra.__setitem__,
                     trainer_state=None)
    assert len(rewards) == 4 and rewards[0] > 1.0 and rewards[3] == reward.reward_cfg.copy_reward
    assert logged["kernel/correct_rate"] == 0.5 and logged["kernel/copy_rate"] == 0.25
    assert logged["kernel/no_op_rate"] == 0.25 and logged["kernel/category/decode_error"] == 0.25
    assert logged["kernel/geomean_speedup_correct"] > 1.5       # the copy does not count as a speedup
    assert 0 <= logged["evaluator/cache_hit_rate"] <= 1 and logged["evaluator/scripts"] == 4
    assert extra["category"] == ["correct", "no_op", "decode_error", "correct"]


def test_broken_evaluator_is_restarted_and_bad_workloads_score_none(reward, kernel):
    from tvm.script import from_source
    from tvm.s_tir import Schedule

    from little_dragon.codec import canonical_json
    from little_dragon.evaluator.script import encode_script

    def fresh(split: int) -> str:  # not in the cache: needs the pool
        sch = Schedule(from_source(kernel["tvmscript"]))
        _, j, _ = sch.get_loops(sch.get_sblock("C"))
        sch.split(j, [None, split])
        return encode_script(canonical_json(sch.trace.as_json(remove_postproc=False)))

    before = reward.restarts
    reward.evaluator._pool.stop()   # the pool dies under the trainer: the evaluator starts a new one by itself
    [r] = _score(reward, kernel, [(fresh(8), "construction", "")])
    assert r.category == "correct" and not r.cached and reward.restarts == before, r.message
    reward.evaluator.close()        # an evaluator that cannot heal (closed under the trainer): the reward restarts it
    [r] = _score(reward, kernel, [(fresh(4), "construction", "")])
    assert r.category == "correct" and not r.cached and reward.restarts == before + 1, r.message
    out = reward.score([kernel["fast"], kernel["fast"]], ["not tvmscript", kernel["tvmscript"]],
                       ["construction"] * 2, ["", ""])
    assert out[0] is None and out[1].category == "correct"   # the data's fault, not the policy's: no reward
