"""Line retries (``generation.constrained_line_retries``): a line the grammar allows and TVM refuses at its end is
taken back and drawn again in its attempt, instead of ending it.  The constraint's side: it returns to the line's
start exactly (the same prefix, schedule and mask as a fresh constraint there), tells the engine how many tokens to
drop, counts every retry, and ends the attempt as before once its retries are spent.  The engine's side
(dropping the tokens, drawing again from the line's first logits) is tested in test_shared_prefix.py and, together,
in test_constrained_shared_prefix.py.

Real parts: a real matmul kernel, TVM (its ScheduleError for compute-at under the block's own loop), the codec,
llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest

from dragon_testkit import feed_constraint, matmul_tensors, prim_module

HEAD = "blk C\nloops b0 3\n"
REFUSED = ("at b0 l1", "at b0 l2", "rat b0 l1")   # C's compute-at under its own loops: TVM refuses each


@pytest.fixture(scope="module")
def matmul():
    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(64)), json.dumps({"kind": "llvm", "num-cores": 2}))


def _feed(c, engine, tok, text):
    """Feed ``text`` to ``c`` token by token, each one its mask allows; the number of tokens."""
    from little_dragon.generation.constrained import allocate_bitmask

    bits = allocate_bitmask(1, engine.vocab_size)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    for t in ids:
        c.fill_mask(bits, 0)
        assert (int(bits[0, t // 32]) >> (t % 32)) & 1, (text, tok.decode([t]), c.error)
        c.advance(t)
    return len(ids)


def _mask(c, engine):
    from little_dragon.generation.constrained import allocate_bitmask

    bits = allocate_bitmask(1, engine.vocab_size)
    c.fill_mask(bits, 0)
    return bits[0].tolist()


def test_a_refused_line_goes_back_to_its_start(engine, smollm2, matmul):
    from little_dragon.generation.constrained import ScriptConstraint

    for line in REFUSED:  # each is allowed by the mask and refused by TVM
        refused, c = feed_constraint(engine, matmul, smollm2, HEAD + line + "\n")
        assert refused is None and c.dead and c.error.startswith("apply:"), (line, refused, c.error)
    refused, fresh = feed_constraint(engine, matmul, smollm2, HEAD)
    assert refused is None and fresh.at_line_start()
    c = ScriptConstraint(engine, matmul)
    c.line_retries = 2
    _feed(c, engine, smollm2, HEAD)
    assert c.taken_back() == 0
    for i, line in enumerate(REFUSED[:2]):
        n = _feed(c, engine, smollm2, line + "\n")
        assert not c.dead and c.taken_back() == n and c.taken_back() == 0, c.error   # the line's tokens, once
        assert (c.text, c.line, c.n_insts, c.retried) == (HEAD, b"", fresh.n_insts, i + 1)
        assert c.at_line_start() and _mask(c, engine) == _mask(fresh, engine)          # the line starts afresh
    st = c.stats
    assert (st.line_retries, st.rejected_apply) == (2, 0)
    assert st.retried_tokens == sum(len(smollm2(x + "\n", add_special_tokens=False)["input_ids"]) for x in REFUSED[:2])
    assert sum(st.retry_reasons.values()) == 2 and all("to be under the same block sc" in r for r in st.retry_reasons)
    # its retries spent, the next refused line ends the attempt as without retries: the lines up to it are its script
    _feed(c, engine, smollm2, REFUSED[2] + "\n")
    assert c.dead and c.error.startswith("apply:") and c.taken_back() == 0
    assert (st.line_retries, st.rejected_apply) == (2, 1)
    assert c.script("") == HEAD + REFUSED[2] + "\n"


def test_after_a_retry_the_attempt_goes_on_to_a_finished_kernel(engine, smollm2, matmul):
    from little_dragon.generation.constrained import ScriptConstraint

    c = ScriptConstraint(engine, matmul)
    c.line_retries = 1
    _feed(c, engine, smollm2, HEAD + REFUSED[0] + "\n")
    assert c.taken_back() > 0 and not c.dead
    rest = "tile l1 = 8 8\npost *\n"
    _feed(c, engine, smollm2, rest)
    c.advance(smollm2.eos_token_id)
    assert c.done and not c.dead and c.text == HEAD + rest, (c.text, c.error)
    assert c.stats.end_checked == 1 and c.stats.rejected_end == 0


def test_no_retries_where_the_engine_cannot_take_tokens_back(smollm2):
    """Retries are the shared-prefix engine's (``attempt_processor``), not the generate path's (``__call__``), not when
    greedy (the same line again), not with syntax only (nothing is refused at a line end); 0 keeps the engine's plain
    path (``takes_back`` false: the same samples as before retries existed)."""
    from dragon_testkit import matmul_tensors as mm
    from little_dragon.datasets.prompts import construction_prompt
    from little_dragon.generation.constrained import ConstrainedDecoding

    prompt = construction_prompt(prim_module(mm(32)).script(), {"kind": "llvm", "num-cores": 2})
    assert ConstrainedDecoding(smollm2, line_retries=3).attempt_processor([prompt], 2).takes_back
    assert not ConstrainedDecoding(smollm2, line_retries=3).attempt_processor([prompt], 1, retries=False).takes_back
    assert not ConstrainedDecoding(smollm2).attempt_processor([prompt], 2).takes_back
    assert not ConstrainedDecoding(smollm2, semantic=False, line_retries=3).attempt_processor([prompt], 2).takes_back
    hook = ConstrainedDecoding(smollm2, line_retries=3)
    hook([prompt], 2)
    assert all(c.line_retries == 0 for c in hook.last_constraints)
