"""The three model kinds behind one switch (``sft.model.kind``): tiny, gguf, local.

Load the model only after the training arguments exist: with a ZeRO-3 DeepSpeed config, transformers then
partitions the weights while loading (``zero.Init``), which is what lets a large local model fit.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from little_dragon.tokenizer import codec_words, corpus_of, default_gguf_path, extend_tokenizer, train_bpe_tokenizer
from little_dragon.training.config import ModelSpec, TinyModelConfig

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    source: str  # what was loaded, for MLflow params
    added_tokens: int = 0


def load_gguf(path: str | Path, dtype: Any = None) -> tuple[Any, Any]:
    """Model and tokenizer of a GGUF file (transformers dequantises the weights to ``dtype``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: GGUF file not found")
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    kw = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, **kw)
    # transformers dequantises GGUF tensors into plain float weights but leaves the model marked as GGUF-
    # quantised, and Trainer then refuses full fine-tuning ("purely quantized models"): drop the marker.
    if getattr(model, "hf_quantizer", None) is not None:
        del model.hf_quantizer
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
    return model, tok


def build_tiny(cfg: TinyModelConfig, train_rows: list[dict[str, Any]], seed: int) -> tuple[Any, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_bpe_tokenizer(corpus_of(train_rows), vocab_size=cfg.vocab_size, split=cfg.tokenizer_split)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                         num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_heads,
                         intermediate_size=cfg.intermediate_size,
                         max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config), tok


def load_model(spec: ModelSpec, tiny: TinyModelConfig, train_rows: list[dict[str, Any]], seed: int,
               dtype: Any = None) -> LoadedModel:
    if spec.kind == "tiny":
        model, tok = build_tiny(tiny, train_rows, seed)
        source = "tiny-llama"
    elif spec.kind == "gguf":
        path = Path(spec.path) if spec.path else default_gguf_path()
        model, tok = load_gguf(path, dtype)
        source = f"gguf:{path.name}"
    elif spec.kind == "local":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not spec.path or not Path(spec.path).is_dir():
            raise FileNotFoundError(f"sft.model.path {spec.path!r}: not a model directory (kind: local)")
        tok = AutoTokenizer.from_pretrained(spec.path)
        model = AutoModelForCausalLM.from_pretrained(spec.path, **({"dtype": dtype} if dtype is not None else {}))
        source = f"local:{Path(spec.path).name}"
    else:  # the config dataclass already rejects this; kept for callers that build specs by hand
        raise ValueError(f"unknown model kind {spec.kind!r}")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    added = 0
    if spec.extend_tokenizer and spec.kind != "tiny":
        added = extend_tokenizer(tok, codec_words(tok, [r["completion"] for r in train_rows]))
        if added:
            # new rows start at the mean embedding: closer to the model's distribution than random init
            model.resize_token_embeddings(len(tok), mean_resizing=True)
        log.info("tokenizer extended by %d codec words", added)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return LoadedModel(model, tok, source, added)
