"""llguidance's view of a Hugging Face tokenizer, checked against the tokenizer itself.

The constraint (``constrained.TokenEngine``) masks tokens by the bytes llguidance believes each token
stands for.  llguidance reads those bytes off the tokenizer's JSON (its decoder), and a decoder it
misreads gives masks over the wrong bytes without any error.  Seen on the H200: transformers 5.17 converts
the SmolLM2 GGUF (a byte-level BPE) into a tokenizer whose decoder is
``Sequence(ByteFallback, Fuse, Replace("\u2581" -> " "), ByteLevel)``; the tokenizer itself decodes right
(its ByteLevel step maps ``\u0120`` back to a space), but llguidance, seeing ``ByteFallback``, takes the
vocabulary for a SentencePiece one and reads ``\u0120``/``\u010a`` (space/newline in byte-level BPE) as the
letters U+0120/U+010A.  No token was a space or a newline to it: a fine-tuned SmolLM2 under constraint
completed no line in 64 attempts (results/constrained-decoding.md, H200 A/B; transformers 5.24 writes a
plain ``ByteLevel`` decoder, which llguidance reads right).

``llg_tokenizer`` builds the view, checks it (the bytes of each token of a probe text, joined, must be
what the tokenizer decodes those tokens to), repairs a byte-level vocabulary whose decoder llguidance
misreads (it is handed the ``ByteLevel`` decoder alone: the same bytes, a decoder it reads), and raises
rather than return a view whose masks would be over other bytes than the model's text.
"""
from __future__ import annotations

import copy
import json
import logging
from typing import Any

log = logging.getLogger(__name__)

# what a script is made of (codec text: words, numbers, punctuation, spaces, newlines), every printable
# ASCII character, and a few non-ASCII ones (multi-byte UTF-8, split across byte-level tokens)
PROBE = ("blk conv2d_nhwc_global\nloops b0 4\ntile l3 = 4 8 2\nsplit l1 = 16 *\ncat v2 = 1\n"
         "ann b1 \"meta_schedule.unroll_explicit\" unroll = 2\npost *\n"
         + "".join(chr(c) for c in range(32, 127)) + "\n\t x  y\n\nunicode: \u00fc \u20ac \u4e2d\n")


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _decoded(tokenizer: Any, ids: list[int]) -> bytes:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).encode("utf-8")


def mismatch(lltok: Any, tokenizer: Any, text: str = PROBE) -> str | None:
    """None when llguidance's bytes of the tokens of ``text`` are those the tokenizer decodes them to (one
    leading space aside: a SentencePiece decoder strips it); else where they first differ."""
    ids = _ids(tokenizer, text)
    got = b"".join(lltok.decode_bytes([i]) for i in ids)
    want = _decoded(tokenizer, ids)
    if got == want or got == b" " + want:
        return None
    n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"llguidance reads {got[max(0, n - 20):n + 20]!r} where the tokenizer decodes {want[max(0, n - 20):n + 20]!r}"


def _json(tokenizer: Any) -> dict[str, Any]:
    backend = copy.copy(tokenizer.backend_tokenizer)  # as llguidance.hf.from_tokenizer serialises it
    backend.no_padding()
    backend.no_truncation()
    return json.loads(backend.to_str())


def _byte_level(node: Any) -> dict[str, Any] | None:
    """The ``ByteLevel`` step of a decoder or pre-tokenizer (itself, or inside a ``Sequence``)."""
    if not isinstance(node, dict):
        return None
    if node.get("type") == "ByteLevel":
        return node
    for sub in node.get("decoders") or node.get("pretokenizers") or []:
        found = _byte_level(sub)
        if found is not None:
            return found
    return None


def byte_level_json(tokenizer: Any) -> str | None:
    """The tokenizer's JSON with its decoder replaced by its ``ByteLevel`` step alone, when it is a
    byte-level vocabulary (a ``ByteLevel`` decoder step or pre-tokenizer) whose decoder is anything else;
    None otherwise.  For a byte-level vocabulary that step alone gives every token's bytes."""
    j = _json(tokenizer)
    dec = j.get("decoder")
    step = _byte_level(dec) or _byte_level(j.get("pre_tokenizer"))
    if step is None or (isinstance(dec, dict) and dec.get("type") == "ByteLevel"):
        return None
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": step.get("add_prefix_space", True),
                    "trim_offsets": step.get("trim_offsets", True), "use_regex": step.get("use_regex", True)}
    return json.dumps(j)


def llg_tokenizer(tokenizer: Any, n_vocab: int | None = None) -> Any:
    """llguidance's ``LLTokenizer`` of a fast Hugging Face tokenizer, whose token bytes are checked to be
    the tokenizer's own (``mismatch``); EOS is the tokenizer's ``eos_token_id`` (what generation stops on
    and what the constraint forces).  ValueError when no view of the tokenizer reads its tokens right."""
    import llguidance
    import llguidance.hf

    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=n_vocab)
    bad = mismatch(lltok, tokenizer)
    if bad is None:
        return lltok
    fixed = byte_level_json(tokenizer)
    if fixed is not None:
        repaired = llguidance.LLTokenizer(fixed, n_vocab=n_vocab, eos_token=tokenizer.eos_token_id)
        if mismatch(repaired, tokenizer) is None:
            log.info("constrained decoding: llguidance misreads this tokenizer's decoder (%s); "
                     "using its ByteLevel step alone", bad)
            return repaired
    raise ValueError(f"constrained decoding: llguidance's token bytes are not the tokenizer's ({bad}); "
                     "its masks would constrain other text than the model writes")
