"""[lazy line starts] (``constrained.LAZY_LINE_STARTS``, ``ScriptConstraint.lazy``): a line's first token is drawn before
its schedule state is known, from every token a line may start with, and checked once the state is in.  The
constraint's side: while the state is out its mask is the line-start mask (which holds every line's start mask); the
token is kept when the line's own mask allows it (the attempt then goes on exactly as an eager one), taken back when
not (or together with the line before it, when TVM refused that line); a line ended by an attempt's last token is
checked when the call settles.  The engine's side, and the law of the kept tokens, are tested in
test_constrained_shared_prefix.py.

Real parts: a real matmul kernel, TVM (its refusal of ``split l0 7``), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest

from dragon_testkit import feed_constraint, mask_of, matmul_tensors, prim_module

HEAD = "blk C\nloops b0 3\n"
NEXT = "split l1 8 8\n"
REFUSED = "split l0 7\n"   # allowed by the mask, refused by TVM at its end (one factor, not the loop's extent)


@pytest.fixture(scope="module")
def matmul():
    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(64)), json.dumps({"kind": "llvm", "num-cores": 2}))


def _lazy(engine, workload, retries: int = 2):
    from little_dragon.generation.constrained import ScriptConstraint

    c = ScriptConstraint(engine, workload)
    c.lazy, c.line_retries = True, retries
    return c


def _feed(c, engine, tok, text: str) -> int:
    """Feed ``text`` to ``c`` token by token, each one its mask allows; the number of tokens."""
    from little_dragon.generation.constrained import allocate_bitmask

    bits = allocate_bitmask(1, engine.vocab_size)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    for t in ids:
        c.fill_mask(bits, 0)
        assert engine.allowed_at(bits[0], t), (text, tok.decode([t]), c.error)
        c.advance(t)
    return len(ids)


def test_a_lazy_line_start_masks_by_the_line_start_mask_and_goes_on_as_an_eager_one(engine, smollm2, matmul):
    from little_dragon.generation.constrained import allocate_bitmask

    c = _lazy(engine, matmul)
    _feed(c, engine, smollm2, HEAD)
    assert c._lazy and c.state is not None and c.at_line_start() and c.stats.lazy_lines == 2  # the first line is not
    start = engine.line_start_mask((engine.vocab_size + 31) // 32)
    assert mask_of(c, engine) == start.tolist()
    _, eager = feed_constraint(engine, matmul, smollm2, HEAD)
    line_mask = allocate_bitmask(1, engine.vocab_size)
    eager.fill_mask(line_mask, 0)
    assert bool(((line_mask[0] & ~start) == 0).all())       # the line's own mask lies inside the line-start mask
    _feed(c, engine, smollm2, NEXT + "loops b0 ")
    refused, eager = feed_constraint(engine, matmul, smollm2, HEAD + NEXT + "loops b0 ")
    assert refused is None and not c._lazy
    assert (c.text, c.line, c.dead, c.n_tokens, c.take_back) == (eager.text, eager.line, False, eager.n_tokens, 0)
    assert c.stats.lazy_refused == 0 and c.state == eager.state and mask_of(c, engine) == mask_of(eager, engine)


def test_a_first_token_its_line_refuses_is_taken_back_and_the_line_starts_afresh(engine, smollm2, matmul):
    c = _lazy(engine, matmul)
    n = _feed(c, engine, smollm2, HEAD)
    digit = smollm2("7", add_special_tokens=False)["input_ids"][0]   # no line starts with a digit
    assert engine.allowed_at(engine.line_start_mask((engine.vocab_size + 31) // 32), digit)
    c.advance(digit)
    _, eager = feed_constraint(engine, matmul, smollm2, HEAD)
    assert (c.taken_back(), c.stats.lazy_refused, c.retried, c.n_tokens) == (1, 1, 0, n)
    assert not c._lazy and c.at_line_start() and mask_of(c, engine) == mask_of(eager, engine)
    _feed(c, engine, smollm2, NEXT)
    assert c.text == HEAD + NEXT and not c.dead


def test_a_line_tvm_refuses_is_taken_back_with_the_first_token_after_it(engine, smollm2, matmul):
    c = _lazy(engine, matmul)
    _feed(c, engine, smollm2, HEAD)
    n = _feed(c, engine, smollm2, REFUSED)
    assert c._lazy and c.text == HEAD + REFUSED and not c.dead      # TVM's verdict not in yet
    c.advance(smollm2("split", add_special_tokens=False)["input_ids"][0])
    assert (c.taken_back(), c.retried, c.stats.line_retries, c.stats.lazy_refused) == (n + 1, 1, 1, 1)
    assert c.text == HEAD and c.at_line_start() and not c.dead
    assert any("product of factors" in r for r in c.stats.retry_reasons), c.stats.retry_reasons
    # the refused line is not completed again at that start, as after an eager retry
    assert c.refused == {REFUSED.strip().encode()}


@pytest.mark.parametrize("line, dead", [(NEXT, False), (REFUSED, True)])
def test_a_line_ended_by_the_last_token_is_checked_when_the_call_settles(engine, smollm2, matmul, line, dead):
    """An attempt whose budget ends with a line's newline has no step left to draw its retry in: the line is checked
    at ``settle`` without one (refused: the attempt is dead at it, as when its retries are spent)."""
    c = _lazy(engine, matmul)
    _feed(c, engine, smollm2, HEAD + line)
    assert c._lazy
    c.settle()
    assert not c._lazy and c.dead == dead and c.retried == 0 and c.take_back == 0, c.error
    if dead:
        assert c.error.startswith("apply:") and c.text == HEAD + line
    else:
        _, eager = feed_constraint(engine, matmul, smollm2, HEAD + line)
        assert c.state == eager.state and c.at_line_start()
