"""End to end on the tiny model: real rows -> TRL SFT -> MLflow run (sqlite) -> registry -> load -> generate."""
from __future__ import annotations

import json

import pytest

from little_dragon.config import from_dict
from little_dragon.tracking import dvc_hash
from little_dragon.training.config import SFTConfig
from little_dragon.datasets.validity import check_script

MODEL_NAME = "little-dragon-test"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, standin_rows, jsonl, mlflow_store):
    from little_dragon.training.sft import train_sft

    # one workload, so a few dozen steps are enough to learn its scripts (validity must rise from zero)
    rows = [r for r in standin_rows if r["name"] == "matmul_64"]
    d = tmp_path_factory.mktemp("sft")
    train = jsonl(d / "train.jsonl", rows)
    val = jsonl(d / "validation.jsonl", rows[:2])
    cfg = from_dict(SFTConfig, {
        "tiny": {"vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128},
        "construction_fraction": None, "rename_copies": 0, "max_steps": 160, "batch_size": 4, "learning_rate": 5e-3,
        "logging_steps": 5, "eval_steps": 80, "validity_samples": 2, "final_validity_samples": 2,
        "validity_max_new_tokens": 400, "validity_temperature": 0.0, "deepspeed": "off", "max_length": 1024,
    }, "test")
    metrics = train_sft(cfg, train, val, d / "out", model_name=MODEL_NAME)
    return {"metrics": metrics, "dir": d, "train": train, "val": val, "rows": rows}


def test_training_writes_model_and_metrics(trained):
    m = trained["metrics"]
    out = trained["dir"] / "out"
    assert (out / "model" / "model.safetensors").is_file() and (out / "model" / "tokenizer.json").is_file()
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["steps"] == 160 and on_disk["tokens_per_s"] > 0
    assert m["train_tasks"]["construction"] > 0 and m["train_tasks"]["refinement"] > 0
    # the per-attempt validity rate was measured during training and at the end, and learning moved it
    assert [h["step"] for h in m["validity_history"]] == [80, 160]  # the final evaluate() reuses step 160's pass
    assert m["validity_rate"] > m["validity_rate_untrained"]
    # greedy and per-task rates on the same final prompts (temperature 0 here, so the two passes agree)
    assert m["validity_rate_greedy"] == m["validity_rate"]
    tasks = {r["task"] for r in trained["rows"][:2]}
    assert {f"validity_rate_{t}" for t in tasks} <= set(m)


def test_the_model_carries_the_budget_its_scripts_need(trained):
    """The saved model's generation_config.json holds ``max_new_tokens``: its longest training or validation script
    in its own tokens x1.25, rounded up (``script_budget``); a generator asked for budget 0 samples with it."""
    from transformers import AutoTokenizer

    from little_dragon.generation.config import GenerationConfig
    from little_dragon.generation.sample import LocalGenerator
    from little_dragon.generation.sources import resolve
    from little_dragon.script_budget import model_budget, script_budget

    model_dir = trained["dir"] / "out" / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    longest = max(len(tok(r["completion"], add_special_tokens=False)["input_ids"]) for r in trained["rows"])
    budget = json.loads((model_dir / "generation_config.json").read_text())["max_new_tokens"]
    assert budget == script_budget([longest]) == trained["metrics"]["max_new_tokens"] == model_budget(model_dir)
    assert longest < budget <= longest * 1.25 + 64
    gen = LocalGenerator(resolve(str(model_dir)), GenerationConfig(max_new_tokens=0, device="cpu"))
    assert gen.cfg.max_new_tokens == budget
    assert LocalGenerator(resolve(str(model_dir)), GenerationConfig(max_new_tokens=7, device="cpu")).cfg \
        .max_new_tokens == 7


def test_mlflow_run_has_params_step_metrics_hashes_and_commit(trained):
    import mlflow

    run = mlflow.get_run(trained["metrics"]["mlflow_run_id"])
    assert run.data.params["model.kind"] == "tiny"
    assert run.data.params["batching"] == "bucketing"
    assert run.data.tags["dvc_hash.in.train"] == dvc_hash(trained["train"])
    assert run.data.tags["dvc_hash.in.validation"] == dvc_hash(trained["val"])
    assert run.data.tags["git_commit"] not in ("", "unknown")
    losses = mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert len(losses) >= 4 and losses[-1].value < losses[0].value  # per-step, and it learned
    assert "eval_validity_rate" in run.data.metrics and "eval_loss" in run.data.metrics
    assert run.data.metrics["validity_rate_greedy"] == trained["metrics"]["validity_rate_greedy"]


def test_registered_model_loads_back_and_writes_a_valid_script(trained):
    import mlflow

    reg = trained["metrics"]["registry"]
    assert reg["registered_model"] == MODEL_NAME and reg["version"] == 1
    version = mlflow.MlflowClient().get_model_version(MODEL_NAME, "1")
    assert version.run_id == trained["metrics"]["mlflow_run_id"]
    from little_dragon.training.callbacks import sample_scripts
    from little_dragon.training.registry import load_registered

    model, tok = load_registered(f"models:/{MODEL_NAME}/1")
    # a refinement prompt has one completion in these rows (a construction prompt has three, which greedy
    # decoding of a barely trained model blends), so 160 steps are enough for the greedy script to be right
    row = next(r for r in trained["rows"] if r["task"] == "refinement")
    [script] = sample_scripts(model, tok, [row["prompt"]], max_new_tokens=400, temperature=0.0)
    verdict = check_script(script, row)
    assert verdict.decoded, verdict.error
    assert verdict.valid, verdict.error  # and TVM applies it to a fresh schedule of the workload
