"""Shared fixtures: the tiny real harvest + datasets (tests/datasets), a private MLflow registry, and two
tiny models registered there: one barely trained (1 step), one trained until it writes correct kernels."""
from __future__ import annotations

from pathlib import Path

import pytest
from dragon_testkit import LLVM  # the tiny harvest and datasets (built, harvested) come from tests/conftest.py

MODEL_NAME = "little-dragon-evaltest"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A temporary sqlite tracking store + registry (artifacts beside it)."""
    root = tmp_path_factory.mktemp("mlflow-eval")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    mp.delenv("DRAGON_NO_MLFLOW", raising=False)
    mp.chdir(root)
    yield root
    mp.undo()


def _train(rows_path: Path, out: Path, steps: int, lr: float) -> dict:
    from little_dragon.config import from_dict
    from little_dragon.training.config import SFTConfig
    from little_dragon.training.sft import train_sft

    cfg = from_dict(SFTConfig, {
        "tiny": {"vocab_size": 384, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128},
        "construction_fraction": None, "rename_copies": 0, "max_steps": steps, "batch_size": 4,
        "learning_rate": lr, "logging_steps": 5, "eval_steps": 10_000, "validity_samples": 1,
        "final_validity_samples": 1, "validity_max_new_tokens": 8, "validity_temperature": 0.0,
        "deepspeed": "off", "max_length": 1536, "cpu_threads": 2,
    }, "test")
    return train_sft(cfg, rows_path, rows_path, out, model_name=MODEL_NAME)


@pytest.fixture(scope="module")
def models(built, registry, tmp_path_factory):
    """{"untrained": run folder (registry v1), "trained": run folder (registry v2)}.

    The trained one learns the evaluated slices' own scripts (sealed ones: this is a test model whose job is
    to be measurably better, not a fair one), so its greedy refinement attempts are correct."""
    import json

    import numpy as np

    _, res = built
    d = tmp_path_factory.mktemp("eval-models")
    # the rows of the evaluated slices only (~10 rows, long softmax scripts among them): 300 steps memorise them.
    # 120 steps did on some tiny harvests, not on all: on the CI harvest of 2026-12-02 (loss 0.23) every greedy
    # script misspelled a mnemonic ('rallelctorize', 0 of 12 attempts decoded); 300 steps wrote all 7 of its
    # prompts' scripts exactly
    evaluated = res.examples[res.examples["split"].isin(["sealed", "heldout_family"])]
    rows = evaluated[["prompt", "completion", "task", "workload_id", "target", "tvmscript", "family", "name",
                         "structural_hash"]].copy()
    path = d / "rows.jsonl"
    with open(path, "w") as f:
        for r in rows.to_dict("records"):
            f.write(json.dumps({k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}) + "\n")
    out = {}
    for name, steps, lr in (("untrained", 1, 1e-6), ("trained", 300, 5e-3)):
        m = _train(path, d / name, steps, lr)
        assert m["registry"]["registered_model"] == MODEL_NAME
        out[name] = d / name
    return out


@pytest.fixture(scope="module")
def eval_cfgs(built, harvested, tmp_path_factory):
    from little_dragon.evaluation.eval_config import EvaluationConfig
    from little_dragon.evaluator.config import EvaluatorConfig
    from little_dragon.generation.config import GenerationConfig
    from little_dragon.tvmx.timing import TimingConfig

    cfg, _ = built
    d = tmp_path_factory.mktemp("eval-cfg")
    ev = EvaluationConfig(target=LLVM, sealed_dir=cfg.sealed_dir, harvest_roots=[str(harvested / "harvest")],
                          attempts=3, max_prompts_per_task=2, report_dir=str(d / "reports"), bootstrap_samples=300)
    # greedy: the memorised scripts come out as trained (sampled, a tiny model this small misspells mnemonics)
    # budget 0: each model's own, saved by its SFT run (script_budget; both learned the same rows: the same budget)
    gen = GenerationConfig(max_new_tokens=0, temperature=0.0, batch_size=12)
    evaluator = EvaluatorConfig(pool_size=2, cache_path=str(d / "cache.sqlite"))
    timing = TimingConfig(number=2, repeat=3, min_repeat_ms=5)
    return ev, gen, evaluator, timing


@pytest.fixture(scope="module")
def evaluations(models, eval_cfgs, tmp_path_factory):
    """Both models evaluated on the sealed prompts: {"untrained": EvaluationResult, "trained": ...}."""
    from little_dragon.evaluation.stage import evaluate_model

    ev, gen, evaluator, timing = eval_cfgs
    d = tmp_path_factory.mktemp("evals")
    return {name: evaluate_model(str(models[name]), d / name, ev, gen, evaluator, timing)
            for name in ("untrained", "trained")}
