"""The RL stage end to end on CPU: a tiny SFT model -> screening -> real GRPO steps with rewards from the real
evaluator (llvm, sandboxed pool, sqlite cache) -> probes -> a killed-and-resumed run from a real checkpoint ->
model, metrics, curves, MLflow run and a registry version tagged stage=rl with its SFT parent."""
from __future__ import annotations

import json

import pytest

from little_dragon.config import from_dict
from little_dragon.training.config import SFTConfig
from little_dragon.training.rl_config import RLConfig

MODEL_NAME = "little-dragon-rl-test"


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory, standin_rows, jsonl, mlflow_store):
    """A tiny model trained on one workload's rows (as tests/training/test_sft_tiny.py), registered."""
    from little_dragon.training.sft import train_sft

    rows = [r for r in standin_rows if r["name"] == "matmul_64"]
    d = tmp_path_factory.mktemp("rl-sft")
    train = jsonl(d / "train.jsonl", rows)
    cfg = from_dict(SFTConfig, {
        "tiny": {"vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128},
        "construction_fraction": None, "max_steps": 160, "batch_size": 4, "learning_rate": 5e-3,
        "logging_steps": 20, "eval_steps": 1000, "validity_samples": 2, "final_validity_samples": 2,
        "final_greedy_validity": False, "validity_max_new_tokens": 400, "validity_temperature": 0.0,
        "deepspeed": "off", "max_length": 1024,
    }, "test")
    metrics = train_sft(cfg, train, jsonl(d / "validation.jsonl", rows[:2]), d / "sft", model_name=MODEL_NAME)
    return {"dir": d / "sft", "train": train, "rows": rows, "registry": metrics["registry"]}


def _cfg(**kw):
    base = {"max_prompts": 6, "screen_rollouts": 4, "min_active_prompts": 2, "prompts_per_step": 2,
            "num_generations": 4, "max_completion_length": 0, "probe_prompts": 2, "probe_rollouts": 10,
            "probe_every": 2, "save_steps": 2, "retire_after": 1, "reprobe_every": 2, "eval_pool_size": 1,
            "reward_timing": {"number": 2, "repeat": 3, "min_repeat_ms": 5}}
    return from_dict(RLConfig, {**base, **kw}, "test")


@pytest.fixture(scope="module")
def rl_run(sft_model, tmp_path_factory):
    """Two stage calls: the first stops after 2 steps (the checkpoint a killed run leaves), the second is
    the same run asked for 3 steps, which must resume from that checkpoint rather than start over."""
    import dataclasses

    from little_dragon.config import load_section
    from little_dragon.training.rl import train_rl

    d = tmp_path_factory.mktemp("rl")
    ecfg = dataclasses.replace(load_section("evaluator"), cache_path=str(d / "cache.sqlite"), run_timeout_s=20.0,
                               preload_tensor_intrinsics="never")
    kw = dict(model_name=MODEL_NAME, evaluator_cfg=ecfg, plot_png=d / "plots" / "rl_probe.png",
              plot_json=d / "plots" / "rl_probe.json")
    first = train_rl(_cfg(max_steps=2), sft_model["train"], str(sft_model["dir"] / "model"), d / "out", **kw)
    # a finished 2-step run left checkpoint-2; a larger max_steps continues it as a killed run would. DVC
    # deletes a stage's outs before rerunning it, all but the persisted checkpoints/: so do we
    import shutil

    shutil.rmtree(d / "out" / "model")
    (d / "out" / "screen.json").unlink()
    (d / "out" / "metrics.json").unlink()
    second = train_rl(_cfg(max_steps=3), sft_model["train"], str(sft_model["dir"] / "model"), d / "out", **kw)
    return {"first": first, "second": second, "dir": d}


def test_screen_is_written_with_per_prompt_statistics(rl_run):
    screen = json.loads((rl_run["dir"] / "out" / "screen.json").read_text())
    s = screen["summary"]
    assert s["candidates"] >= 2 and s["kept"] >= 2 and s["rollouts_per_prompt"] == 4
    for p in screen["prompts"]:
        assert p["n"] == 4 and set(p) >= {"mean_reward", "std_reward", "correct_rate", "categories", "kept"}
        assert sum(p["categories"].values()) == 4
        if p["kept"] and not p["filled"]:
            assert p["distinct_rewards"] >= 2 and p["correct_rate"] > 0   # varied, not all failing
    assert s["kept"] == sum(p["kept"] for p in screen["prompts"])


def test_grpo_steps_ran_on_real_rewards_and_resumed(rl_run):
    first, second = rl_run["first"], rl_run["second"]
    assert first["steps"] == 2 and first["resumed_from"] is None
    assert second["steps"] == 3 and second["resumed_from"] == "checkpoint-2"
    steps = second["per_step"]
    assert [s["step"] for s in steps] == [1, 2, 3]  # the resumed run's history holds the checkpoint's steps
    for s in steps:
        assert -1.0 <= s["reward"] <= 2.0 and s["reward_std"] >= 0
        assert 0 <= s["kernel/correct_rate"] <= 1
        assert abs(sum(v for k, v in s.items() if k.startswith("kernel/category/")) - 1) < 1e-6
        assert s["time/reward_s"] > 0 and s["time/generation_s"] > 0 and 0 < s["time/reward_share"] < 1
        assert s["rl/active_prompts"] >= 1 and "entropy" in s and "completions/mean_length" in s
        assert s["kl"] >= 0  # beta 0.02: the SFT model is the reference
    ev = second["evaluator"]
    assert ev["scripts"] > 0 and 0 <= ev["cache_hit_rate"] <= 1 and ev["restarts"] == 0
    assert (rl_run["dir"] / "out" / "model" / "model.safetensors").is_file()
    assert json.loads((rl_run["dir"] / "out" / "metrics.json").read_text())["steps"] == 3


def test_probe_curves_start_at_the_sft_model_and_continue_across_resume(rl_run):
    hist = rl_run["second"]["probe"]
    assert [h["step"] for h in hist] == [0, 2, 3]   # step 0 = SFT; 2 from the first call; 3 after resuming
    for h in hist:
        assert h["scripts"] == 2 * 10 and 0 <= h["correctness"] <= 1 and -1 <= h["utility"] <= 2
    curves = json.loads((rl_run["dir"] / "plots" / "rl_probe.json").read_text())
    assert [c["step"] for c in curves] == [0, 2, 3] and {"utility", "correctness"} <= set(curves[0])
    png = rl_run["dir"] / "plots" / "rl_probe.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mlflow_run_and_registry_version(rl_run, sft_model):
    import mlflow

    client = mlflow.MlflowClient()
    run = client.get_run(rl_run["second"]["mlflow_run_id"])
    assert run.data.tags["stage"] == "rl" and run.data.params["resumed_from"] == "checkpoint-2"
    # rl.max_completion_length 0: the SFT model's own budget (script_budget), recorded and kept in the RL model
    from little_dragon.script_budget import model_budget

    budget = model_budget(sft_model["dir"] / "model")
    assert budget and run.data.params["max_completion_length"] == str(budget)
    assert model_budget(rl_run["dir"] / "out" / "model") == budget
    hist = {k: client.get_metric_history(run.info.run_id, k) for k in
            ("reward", "kernel/correct_rate", "rl/active_prompts", "time/reward_share", "evaluator/cache_hit_rate")}
    assert all(len(v) == 1 for v in hist.values()), {k: len(v) for k, v in hist.items()}
    assert [m.step for m in hist["reward"]] == [3]
    assert "screen/kept" in run.data.metrics and "probe/utility" in run.data.metrics
    assert any(a.path == "rl/screen.json" for a in client.list_artifacts(run.info.run_id, "rl"))
    reg = rl_run["second"]["registry"]
    v = client.get_model_version(MODEL_NAME, str(reg["version"]))
    assert v.tags["stage"] == "rl" and v.tags["parent_model"] == sft_model["registry"]["registry_uri"]
    assert v.tags["parent_version"] == str(sft_model["registry"]["version"])
