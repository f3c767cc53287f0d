"""llguidance's view of the tokenizer (generation/llg_tokenizer.py): the bytes it masks by are the bytes the
tokenizer decodes, for the SmolLM2 tokenizer as transformers 5.17 converts it from the GGUF (the H200's
stack), whose decoder llguidance misread: under constraint no token was a space or a newline to it.

Real parts only: SmolLM2's tokenizer (the same vocabulary and merges, with the pipeline that transformers
5.17's GGUF conversion writes, copied from its tokenizer.json), llguidance, the codec, TVM, a real CUDA
tensor-core record of tests/codec/data.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

CODEC_DATA = Path(__file__).resolve().parents[1] / "codec" / "data"

# what `AutoTokenizer.from_pretrained(dir, gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf)` writes on
# transformers 5.17.0 (tokenizers 0.23.3) into its tokenizer.json; 5.24 writes a plain ByteLevel decoder,
# no normalizer and byte_fallback false.  5.17 also takes <|im_start|> for EOS (the GGUF says id 2).
GGUF_517 = {
    "normalizer": {"type": "Sequence", "normalizers": []},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
}


@pytest.fixture(scope="module")
def smollm2_517(token_counter):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    j = json.loads(token_counter.tokenizer.to_str())
    j.update(GGUF_517)
    j["model"]["byte_fallback"] = True
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(j)), eos_token="<|im_start|>",
                                   pad_token="<|im_start|>", clean_up_tokenization_spaces=False)


@pytest.fixture(scope="module")
def cuda_record():
    """(prompt, script) of the first record of the committed real CUDA tensor-core database of measured records
    (MetaSchedule built and ran it: the constraint's end check passes it): the prompt as the datasets write it, the
    script as the model writes it (``post *``)."""
    from little_dragon import codec
    from little_dragon.codec.roundtrip import read_database
    from little_dragon.datasets.prompts import construction_prompt

    name, mod, recs = next(iter(read_database(CODEC_DATA / "real_cuda_valid_db")))
    _, trace_json, target = recs[0]
    lines = codec.encode(trace_json).splitlines()
    script = "\n".join(lines[:lines.index("post")] + ["post *"]) + "\n" if "post" in lines else "\n".join(lines) + "\n"
    return construction_prompt(mod.script(), target), script


def test_the_517_tokenizer_is_smollm2s_to_the_model(smollm2_517, token_counter, cuda_record):
    """The 5.17 pipeline tokenizes and decodes a script exactly as SmolLM2's tokenizer does: the model
    sees the same ids and the same text; only llguidance's reading of it differed."""
    _, script = cuda_record
    ids = smollm2_517(script, add_special_tokens=False)["input_ids"]
    assert ids == token_counter.tokenizer.encode(script, add_special_tokens=False).ids
    assert smollm2_517.decode(ids) == script


def test_token_bytes_are_the_tokenizers(smollm2_517, token_counter, cuda_record):
    from little_dragon.generation.constrained import TokenEngine
    from little_dragon.generation.llg_tokenizer import llg_tokenizer, mismatch

    _, script = cuda_record
    engine = TokenEngine(smollm2_517)
    ids = smollm2_517(script, add_special_tokens=False)["input_ids"]
    assert b"".join(engine.token_bytes(i) for i in ids) == script.encode()
    assert engine.token_bytes(smollm2_517(" ", add_special_tokens=False)["input_ids"][0]) == b" "
    assert engine.token_bytes(smollm2_517("\n", add_special_tokens=False)["input_ids"][0]) == b"\n"
    assert engine.eos_id == engine.lltok.eos_token == smollm2_517.eos_token_id
    assert mismatch(llg_tokenizer(smollm2_517), smollm2_517) is None


def test_a_real_cuda_record_is_accepted_through_the_h200_path(smollm2_517, cuda_record):
    """What the H200 ran: ``logits_processor_factory(tokenizer)([prompt], k)`` inside generate, workload
    semantics on; every token of a real record and then EOS is allowed (teacher forcing), and every line
    is completed and checked.  Before the fix the first token with a space
    (``\u0120`` to llguidance) was forbidden and no line could end (``\u010a``)."""
    import torch

    from little_dragon.generation.constrained import logits_processor_factory

    prompt, script = cuda_record
    tok = smollm2_517
    proc = logits_processor_factory(tok)([prompt], 1)
    ids = tok([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
    completion = tok(script, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    vocab = len(tok)
    for step, t in enumerate(completion):
        scores = proc(ids, torch.zeros(1, vocab))
        assert torch.isfinite(scores[0, t]), (step, tok.decode(completion[:step])[-80:], tok.decode([t]))
        ids = torch.cat([ids, torch.tensor([[t]])], 1)
    proc(ids, torch.zeros(1, vocab))  # consumes the EOS
    c = proc.constraints[0]
    assert c.done and not c.dead, c.error
    assert c.stats.lines == script.count("\n") and c.stats.rejected_decode == c.stats.rejected_apply == 0

