"""The token engine's compiled line grammars are kept least-recently-used first, within a byte budget.

A compiled llguidance matcher over SmolLM2's 49k vocabulary holds ~0.9 MB (measured: RSS grew 27-30 MB per 30 new
grammars); the cache used to hold up to 4,096 of them per engine and then drop them all, and pytest peaked at 17 GB
inside tests/generation on the 24 GB CI machine.  Real parts: llguidance and SmolLM2's tokenizer.
"""
from __future__ import annotations

from little_dragon.generation.constrained import MATCHER_BYTES_PER_TOKEN, MATCHER_CACHE_BYTES, TokenEngine


def _grammar(i: int) -> str:
    return f'start: "line{i}" NL\nNL: /\\n/\n'


def test_the_cache_keeps_the_recent_matchers_within_its_budget(smollm2):
    engine = TokenEngine(smollm2)
    assert engine.cache_entries == MATCHER_CACHE_BYTES // (MATCHER_BYTES_PER_TOKEN * engine.vocab_size)
    assert 64 <= engine.cache_entries <= 1024, engine.cache_entries  # ~550 for 49k tokens: ~0.5 GB
    engine.cache_entries = 3
    for i in range(3):
        engine.matcher(_grammar(i))
    engine.matcher(_grammar(0))  # used again: the most recent now
    engine.matcher(_grammar(3))  # one over the bound: the least recently used (1) goes
    assert list(engine._cache) == [_grammar(2), _grammar(0), _grammar(3)]
    m = engine.matcher(_grammar(1))  # compiled again, and it works
    assert not m.is_error() and m.consume_tokens(smollm2("line1", add_special_tokens=False)["input_ids"])
    assert len(engine._cache) == 3
