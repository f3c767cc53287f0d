"""Fixtures shared by the generation tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2(token_counter):
    """SmolLM2-135M's tokenizer (49k subwords, digits split), as generation uses it."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=token_counter.tokenizer, eos_token="<|endoftext|>",
                                   clean_up_tokenization_spaces=False)


@pytest.fixture(scope="module")
def engine(smollm2):
    """llguidance's view of SmolLM2's tokenizer (``constrained.TokenEngine``), for the constraint tests' masks (a
    module may define its own ``engine`` over another tokenizer)."""
    from little_dragon.generation.constrained import TokenEngine

    return TokenEngine(smollm2)

