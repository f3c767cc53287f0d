"""Retraining warm-starts SFT from the registry's @champion: the flow's `model=champion` exports that version
(real sqlite registry) as a plain model directory that SFT's `kind: local` loads, weights unchanged."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from flows import pipeline  # noqa: E402


class _Log:
    def info(self, *a):  # the flow's run logger, outside a run
        pass


def test_champion_is_exported_for_a_warm_start(tmp_path, monkeypatch):
    import mlflow
    import torch
    from transformers import AutoModelForCausalLM

    from little_dragon.config import load_section
    from little_dragon.training.config import TinyModelConfig
    from little_dragon.training.models import build_tiny
    from little_dragon.training.registry import log_and_register

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    name = load_section("project").model_name
    assert pipeline.export_champion(tmp_path / "champion", _Log()) is None  # no registry entry yet

    rows = [{"prompt": "kernel: dense m=32", "completion": "tile b0 = 4 8\nreorder *\n"}] * 4
    model, tok = build_tiny(TinyModelConfig(vocab_size=300, hidden_size=32, num_layers=1, num_heads=2,
                                            intermediate_size=64, max_position_embeddings=128), rows, seed=0)
    saved = tmp_path / "trained"
    model.save_pretrained(saved)
    tok.save_pretrained(saved)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("warm-start-test")
    with mlflow.start_run():
        reg = log_and_register(mlflow, saved, name)
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", str(reg["version"]))

    dest = tmp_path / "artifacts" / "champion"
    overlay = pipeline.model_overlay("champion", _Log(), champion_dir=dest)
    assert overlay == {"sft": {"model": {"kind": "local", "path": str(dest)}}}
    assert (dest / "VERSION").read_text().strip() == f"{name}/{reg['version']}"
    loaded = AutoModelForCausalLM.from_pretrained(dest)
    for (k, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(loaded.state_dict().items())):
        assert torch.equal(a, b), k
