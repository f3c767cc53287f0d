"""`generation.constrained` reaches the SFT validity passes (issue 16).

training sits below generation (tests/test_layers.py), so `dragon train sft` (training/cli.py, a top-layer
module; the Prefect flow runs the same command in-process) injects generation.validity's constrained
sampler into `train_sft`.  On: every validity pass samples under the constraint, so every script decodes,
and every validity metric says so by its name (`*_constrained`) and the MLflow param `validity_sampler`.
Off: the free pass is what it was (same scripts, same keys).  A tiny model, real llvm rows, no mocks.
"""
from __future__ import annotations

import json

import pytest
import yaml

MAX_NEW = 96


@pytest.fixture(scope="module")
def constrained_run(tmp_path_factory, standin_rows, jsonl, mlflow_store):
    """`dragon --params P train sft` with `generation.constrained: true` in P: a short real SFT run on one
    workload's rows (enough steps that the model writes codec lines), through the project's CLI entry."""
    from little_dragon.cli import main

    rows = [r for r in standin_rows if r["name"] == "matmul_64"]
    d = tmp_path_factory.mktemp("sft-constrained")
    train = jsonl(d / "train.jsonl", rows)
    val = jsonl(d / "validation.jsonl", rows[:2])
    params = d / "params.yaml"
    params.write_text(yaml.safe_dump({
        "generation": {"constrained": True},
        "sft": {"tiny": {"vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 2,
                         "intermediate_size": 128},
                "construction_fraction": None, "rename_copies": 0, "max_steps": 60, "batch_size": 4,
                "learning_rate": 5e-3, "logging_steps": 10, "eval_steps": 60, "validity_samples": 2,
                "final_validity_samples": 2, "validity_max_new_tokens": MAX_NEW, "validity_temperature": 1.0,
                "final_greedy_validity": True, "deepspeed": "off", "max_length": 1024, "register": False,
                "cpu_threads": 2},
    }))
    out = d / "out"
    assert main(["--params", str(params), "train", "sft", "--train", str(train), "--val", str(val),
                 "--out", str(out)]) == 0
    return {"out": out, "metrics": json.loads((out / "metrics.json").read_text()), "rows": rows}


def test_the_cli_injects_the_constraint_into_every_validity_pass(constrained_run):
    """Untrained, periodic, final and greedy passes all ran constrained: their metrics carry the name, every
    script decoded, and no free-sampling name is there to be compared with a free run by mistake."""
    import mlflow

    m = constrained_run["metrics"]
    for key in ("validity_rate", "decode_rate", "validity_attempts", "validity_rate_untrained",
                "validity_rate_greedy", "decode_rate_greedy"):
        assert f"{key}_constrained" in m, sorted(m)
        assert key not in m, f"{key}: a free-sampling name in a constrained run"
    assert m["decode_rate_constrained"] == 1.0 and m["decode_rate_greedy_constrained"] == 1.0
    assert m["validity_attempts_constrained"] == 2
    [entry] = m["validity_history"]  # eval_steps = max_steps: one periodic pass
    assert entry["step"] == 60 and entry["eval_decode_rate_constrained"] == 1.0
    assert not any(k.startswith(("eval_validity_rate", "eval_decode_rate")) and not k.endswith("_constrained")
                   for k in entry), entry

    run = mlflow.get_run(m["mlflow_run_id"])
    assert run.data.params["validity_sampler"] == "constrained"
    assert run.data.metrics["decode_rate_constrained"] == 1.0
    assert "eval_validity_rate_constrained" in run.data.metrics and "eval_validity_rate" not in run.data.metrics
    assert "validity_rate" not in run.data.metrics


@pytest.fixture(scope="module")
def trained_model(constrained_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = constrained_run["out"] / "model"
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _few_llvm_rows(standin_rows):
    """Both tasks, the workload the model learned and two it never saw (its lines there fail their checks)."""
    pick = []
    for name in ("matmul_64", "softmax_64x128", "row_sum_128x512"):
        for task in ("construction", "refinement"):
            pick += [r for r in standin_rows if r["name"] == name and r["task"] == task][:1]
    assert len(pick) == 6 and all("llvm" in str(r["target"]) for r in pick), pick
    return pick


def test_the_constrained_pass_writes_only_scripts_that_decode(trained_model, standin_rows):
    """On real llvm rows the constrained validity pass decodes every script (first pass only: the attempts a
    line check ended count as they are, nothing is resampled); the same model sampling freely does not."""
    import torch

    from little_dragon.generation.validity import ConstrainedValiditySampler
    from little_dragon.training.callbacks import validity_rate

    model, tok = trained_model
    rows = _few_llvm_rows(standin_rows)
    sampler = ConstrainedValiditySampler()
    torch.manual_seed(0)
    rates = validity_rate(model, tok, rows, MAX_NEW, 1.0, batch_size=4, sampler=sampler)
    assert all(k.endswith("_constrained") for k in rates), rates
    assert rates["decode_rate_constrained"] == 1.0 and rates["validity_attempts_constrained"] == len(rows)
    assert {"validity_rate_construction_constrained", "validity_rate_refinement_constrained"} <= set(rates)
    st = sampler.stats
    assert st.attempts == len(rows) and st.lines > 0, st  # the model wrote real lines, each one checked
    assert st.resampled == 0, st  # the pass measures the model: no second chances

    torch.manual_seed(0)
    free = validity_rate(model, tok, rows, MAX_NEW, 1.0, batch_size=4)
    assert free["decode_rate"] < 1.0, free  # what the constraint changed


def test_the_free_pass_is_unchanged(trained_model, standin_rows):
    """Switch off (no sampler): the scripts of `sample_scripts` (sorted batches, as before), checked one by one,
    under the metric names the pipeline always had."""
    import torch

    from little_dragon.datasets.validity import check_script
    from little_dragon.training.callbacks import sample_scripts, validity_rate

    model, tok = trained_model
    rows = _few_llvm_rows(standin_rows)
    torch.manual_seed(1)
    rates = validity_rate(model, tok, rows, MAX_NEW, 1.0, batch_size=4)
    torch.manual_seed(1)
    scripts = sample_scripts(model, tok, [r["prompt"] for r in rows], MAX_NEW, 1.0, 4, sort_by_length=True)
    verdicts = [check_script(s, r) for s, r in zip(scripts, rows)]
    assert set(rates) == {"validity_rate", "decode_rate", "validity_attempts", "validity_seconds",
                          "validity_rate_construction", "validity_rate_refinement"}
    assert rates["validity_attempts"] == len(rows)
    assert rates["decode_rate"] == sum(v.decoded for v in verdicts) / len(rows)
    assert rates["validity_rate"] == sum(v.valid for v in verdicts) / len(rows)


def test_the_switch_off_injects_nothing():
    """`generation.constrained: false` (the default): the CLI passes no sampler, so the sft stage's validity
    passes stay free and its outputs stay what `dvc.lock` recorded."""
    from little_dragon.generation.validity import ConstrainedValiditySampler
    from little_dragon.training.cli import validity_sampler

    assert validity_sampler(False) is None
    assert isinstance(validity_sampler(True), ConstrainedValiditySampler)
