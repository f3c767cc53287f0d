"""The SmolLM2-135M-Instruct GGUF base: loads through the model switch, tokenizer round-trips codec text."""
from __future__ import annotations

import pytest

from little_dragon.training.models import default_gguf_path


@pytest.fixture(scope="module")
def smollm2(standin_rows):
    from little_dragon.training.config import ModelSpec, TinyModelConfig
    from little_dragon.training.models import load_model

    try:
        default_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return load_model(ModelSpec(kind="gguf"), TinyModelConfig(), standin_rows, seed=0)


def test_gguf_loads_as_llama_and_predicts(smollm2, standin_rows):
    import torch

    model, tok = smollm2.model, smollm2.tokenizer
    assert model.config.model_type == "llama"
    assert 100e6 < sum(p.numel() for p in model.parameters()) < 200e6
    enc = tok(standin_rows[0]["prompt"] + standin_rows[0]["completion"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[-1] == model.get_input_embeddings().num_embeddings
    assert torch.isfinite(logits).all()


def test_gguf_tokenizer_round_trips_codec_text(smollm2, standin_rows):
    tok = smollm2.tokenizer
    scripts = sorted({r["completion"] for r in standin_rows})
    texts = [*scripts, standin_rows[1]["prompt"], 'ann b0 .tiling_structure "SSRSRS"\n\ttile l0 64 = 2 2 2 8\n\n',
             "T.sblock é ∑ 🐉"]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids, skip_special_tokens=False) == text
