"""Token counts in the model's tokenizer (SmolLM2's by default), with the slow GGUF conversion cached.

``AutoTokenizer.from_pretrained(dir, gguf_file=...)`` rebuilds the tokenizer from the GGUF metadata (~30 s);
the result is saved once as ``tokenizer.json`` under the cache folder, keyed by the source file's name,
size and mtime, and later runs load that file with the ``tokenizers`` library alone (well under a second).
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Sequence

from little_dragon.config import PROJECT_ROOT
from little_dragon.datasets.config import TokenizerSpec
from little_dragon.tokenizer import default_gguf_path

log = logging.getLogger(__name__)

def _source(spec: TokenizerSpec) -> Path:
    if spec.kind == "gguf":
        p = Path(spec.path) if spec.path else default_gguf_path()
        if not p.is_file():
            raise FileNotFoundError(f"{p}: GGUF file not found (datasets.tokenizer.path)")
        return p
    p = Path(spec.path)
    if not (p / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{p}: no tokenizer.json (datasets.tokenizer.path, kind local)")
    return p


class TokenCounter:
    """Counts tokens of texts (no special tokens added) with a ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Any, name: str):
        self.tokenizer = tokenizer
        self.name = name

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def load_counter(spec: TokenizerSpec) -> TokenCounter:
    from tokenizers import Tokenizer

    src = _source(spec)
    if spec.kind == "local":
        return TokenCounter(Tokenizer.from_file(str(src / "tokenizer.json")), f"local:{src.name}")
    st = src.stat()
    key = hashlib.sha1(f"{src.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    cache_root = Path(spec.cache_dir).expanduser()
    if not cache_root.is_absolute():
        cache_root = PROJECT_ROOT / cache_root
    cached = cache_root / f"{src.stem}-{key}" / "tokenizer.json"
    if not cached.is_file():
        from transformers import AutoTokenizer

        from little_dragon import atomic

        log.info("converting the tokenizer of %s (once; cached in %s)", src, cached.parent)
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        with atomic.atomic_path(cached.parent) as tmp:
            tmp.mkdir(parents=True)
            tok.backend_tokenizer.save(str(tmp / "tokenizer.json"))
    return TokenCounter(Tokenizer.from_file(str(cached)), f"gguf:{src.name}")
