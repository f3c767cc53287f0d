"""RL building blocks without a model: retention, its sampler, reward quantisation, the prompt pool, config."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from little_dragon.training.reward import quantise
from little_dragon.training.rl import prompt_pool
from little_dragon.training.rl_trainer import ActiveSetSampler, Retention


def test_rl_section_defaults_equal_params_yaml():
    from little_dragon.config import load_section
    from little_dragon.training.rl_config import RLConfig

    assert load_section("rl") == RLConfig()


def test_retention_retires_identical_groups_and_reprobes_them():
    ret = Retention([0, 1, 2], retire_after=2, reprobe_every=3, min_active=1, seed=0)
    ret.update(0, [0, 0, 1, 1, 2, 2], [1.0, 1.0, 0.5, 1.2, -1.0, -1.0])   # 0, 2 identical; 1 varied
    assert ret.active == {0, 1, 2}
    ret.update(1, [0, 0, 2, 2], [1.0, 1.0, -1.0, -1.0])                    # second identical group: retired
    assert ret.active == {1} and set(ret.retired) == {0, 2}
    assert ret.maybe_reprobe(2) == 0                                        # not yet (every 3 steps)
    assert ret.maybe_reprobe(3) == 2 and ret.active == {0, 1, 2}
    ret.update(3, [0, 0], [1.0, 1.0])                                       # one more identical group retires
    assert 0 not in ret.active
    ret.update(4, [2, 2], [0.1, 1.5])                                       # a re-probed prompt that varies stays
    assert 2 in ret.active and ret.streak[2] == 0
    assert [e["event"] for e in ret.events].count("retire") == 3


def test_retention_keeps_a_minimum_active_set_and_ignores_nan():
    ret = Retention([0, 1], retire_after=1, reprobe_every=0, min_active=1, seed=0)
    ret.update(0, [0, 0, 1, 1], [1.0, 1.0, 1.0, 1.0])
    assert len(ret.active) == 1                        # never retires the last prompt
    ret2 = Retention([0], retire_after=1, reprobe_every=0, seed=0)
    ret2.update(0, [0, 0], [float("nan"), float("nan")])
    assert ret2.visits.get(0, 0) == 0                  # a group without rewards says nothing


def test_retention_state_round_trips_including_the_draw_order():
    a = Retention(list(range(7)), retire_after=1, reprobe_every=2, seed=3)
    a.draw(5)
    a.update(1, [4, 4], [0.0, 0.0])
    b = Retention(list(range(7)), retire_after=1, reprobe_every=2, seed=99)
    b.load_state_dict(a.state_dict())
    assert b.active == a.active and b.retired == a.retired
    assert [b.draw(3) for _ in range(4)] == [a.draw(3) for _ in range(4)]


def test_sampler_has_repeat_sampler_layout_and_draws_only_active_prompts():
    ret = Retention([10, 11, 12, 13], retire_after=1, reprobe_every=0, seed=0)
    index_of = {10: 0, 11: 1, 12: 2, 13: 3}
    it = iter(ActiveSetSampler(ret, index_of, num_generations=3, batch_prompts=2, repeat_count=2))
    block = list(itertools.islice(it, 12))
    first, again = block[:6], block[6:]
    assert first == again                                    # the generation batch repeated repeat_count times
    assert first[0:3] == [first[0]] * 3 and first[3:6] == [first[3]] * 3 and first[0] != first[3]
    ret.update(0, [10, 10, 11, 11, 12, 12], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # retire 3 of 4 (min 1 stays)
    later = set(itertools.islice(it, 60))
    assert {index_of[p] for p in ret.active} >= later and len(ret.active) == 1


def test_quantise_ties_noise_but_keeps_the_ordering():
    from little_dragon.evaluator.config import RewardConfig
    from little_dragon.evaluator.outcome import EvalResult, shaped_reward

    cfg = RewardConfig()

    def correct(speedup):
        return EvalResult(category="correct", speedup=speedup, reward=shaped_reward("correct", speedup, False, cfg))

    # 3% timing noise around the same kernel: an exact tie after rounding to 0.1
    assert quantise(correct(1.00), 0.1, cfg) == quantise(correct(1.03), 0.1, cfg) == 1.0
    # a real 2x speedup still earns more than 1x, and a slow kernel less
    assert quantise(correct(2.0), 0.1, cfg) > 1.0 > quantise(correct(0.5), 0.1, cfg)
    # a very slow kernel is never rounded down onto the copy/worst-correct reward (base - weight)
    very_slow = correct(1e-4)
    assert quantise(very_slow, 0.1, cfg) > cfg.correct_base - cfg.speedup_weight
    # failures pass unchanged; quantum 0 is the identity
    fail = EvalResult(category="build_error", reward=-0.6)
    assert quantise(fail, 0.1, cfg) == -0.6
    assert quantise(correct(1.37), 0.0, cfg) == correct(1.37).reward


def test_prompt_pool_is_unique_per_target_kind_and_task_balanced():
    base = {"prompt": "p", "completion": "c", "tvmscript": "T", "target": '{"kind": "llvm"}'}
    rows = [dict(base, workload_id="a", task="construction", start_script=""),
            dict(base, workload_id="a", task="construction", start_script="", completion="c2"),  # same prompt
            dict(base, workload_id="a", task="refinement", start_script="s1"),
            dict(base, workload_id="a", task="refinement", start_script="s2"),
            dict(base, workload_id="b", task="refinement", start_script="s1"),
            dict(base, workload_id="c", task="construction", start_script="", target='{"kind": "cuda"}')]
    pool = prompt_pool(rows, "llvm", 0, seed=0)
    assert [(p["workload_id"], p["task"], p["start_script"]) for p in pool] == [
        ("a", "construction", ""), ("a", "refinement", "s1"), ("a", "refinement", "s2"), ("b", "refinement", "s1")]
    assert [p["prompt_id"] for p in pool] == [0, 1, 2, 3]
    two = prompt_pool(rows, "llvm", 2, seed=0)
    assert sorted(p["task"] for p in two) == ["construction", "refinement"]
    with pytest.raises(ValueError, match="tvmscript"):
        prompt_pool([dict(rows[0], tvmscript="")], "llvm", 0, seed=0)


def test_reward_timing_override_changes_only_given_fields():
    from little_dragon.config import load_section
    from little_dragon.training.rl import reward_timing
    from little_dragon.training.rl_config import RewardTimingConfig, RLConfig

    base = load_section("timing")
    t = reward_timing(RLConfig(reward_timing=RewardTimingConfig(repeat=3, min_repeat_ms=5)))
    assert (t.repeat, t.min_repeat_ms, t.number) == (3, 5, base.number)
    assert dataclasses.replace(t, repeat=base.repeat, min_repeat_ms=base.min_repeat_ms) == base


def test_a_retrained_start_model_at_the_same_path_does_not_resume_the_old_checkpoint(tmp_path):
    """SFT rewrites artifacts/sft/model in place: the RL resume fingerprint must change with its content (a
    smoke run followed by a longer SFT resumed the old RL checkpoint: 'size mismatch for embed_tokens')."""
    from little_dragon.training.rl import _fingerprint
    from little_dragon.training.rl_config import RLConfig

    model = tmp_path / "sft" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"vocab_size": 929}')
    (model / "model.safetensors").write_bytes(b"\x00" * 64)
    prompts = [{"workload_id": "w1", "task": "refinement", "start_script": "s"}]
    cfg = RLConfig()
    first = _fingerprint(cfg, str(model), prompts)
    assert _fingerprint(cfg, str(model), prompts) == first  # same files: a killed run still resumes
    (model / "model.safetensors").write_bytes(b"\x01" * 64)  # retrained weights, same path
    assert _fingerprint(cfg, str(model), prompts) != first
    assert _fingerprint(cfg, "models:/little-dragon/3", prompts) != _fingerprint(cfg, "models:/little-dragon/4", prompts)
