"""The token budget of a generated script (``script_budget``): derived from the longest script a model trained on,
carried in its ``generation_config.json``, resolved where a budget of 0 asks for the model's own."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from little_dragon.script_budget import FALLBACK, model_budget, resolve_budget, script_budget


@pytest.mark.parametrize("lengths, budget", [
    ([1594], 2048),         # the H200 split's longest tensor-core script (SmolLM2 tokens): 1,992.5 -> 2,048
    ([645, 12, 300], 832),  # the tiny model's longest of the same split (its own tokens): 806.25 -> 832
    ([64], 128),            # 80 -> 128
    ([], FALLBACK),
    ([0], FALLBACK),
])
def test_budget_is_the_longest_script_with_a_margin_rounded_up(lengths, budget):
    assert script_budget(lengths) == budget
    assert all(budget >= n for n in lengths)


def test_a_model_carries_its_budget_in_generation_config(tmp_path):
    """A model folder, a run folder (its ``model/``), a loaded model's ``generation_config``; None without one."""
    folder = tmp_path / "run" / "model"
    folder.mkdir(parents=True)
    (folder / "generation_config.json").write_text(json.dumps({"max_new_tokens": 2048, "eos_token_id": 0}))
    assert model_budget(folder) == model_budget(tmp_path / "run") == model_budget(str(folder)) == 2048
    assert model_budget(SimpleNamespace(generation_config=SimpleNamespace(max_new_tokens=832))) == 832
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    assert model_budget(folder) is None
    assert model_budget(tmp_path / "nothing") is None
    assert model_budget(SimpleNamespace(generation_config=SimpleNamespace(max_new_tokens=None))) is None
    assert model_budget(None) is None


def test_zero_asks_for_the_models_budget_else_the_fallback():
    model = SimpleNamespace(generation_config=SimpleNamespace(max_new_tokens=832))
    assert resolve_budget(0, model) == 832
    assert resolve_budget(300, model) == 300          # an explicit budget wins
    assert resolve_budget(0, None) == FALLBACK
    assert resolve_budget(-1, SimpleNamespace(generation_config=SimpleNamespace(max_new_tokens=None))) == FALLBACK
