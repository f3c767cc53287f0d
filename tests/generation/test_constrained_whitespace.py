"""Constrained decoding admits only the canonical white space the encoder writes (generation/constrained.py,
``restrict_whitespace``): one space between fields, one newline after a line, nothing before a line.  The
codec grammar's ``%ignore`` admits any run of blanks; an attempt free to take them can spend its whole token
budget on spaces (an untrained SmolLM2 under constraint did, after ``tile``).  After a space the line may
still end (whether a field follows is not known when the space is written): one blank in a row at most.

Real parts only: SmolLM2's tokenizer, llguidance, the codec grammar, a TVM matmul workload; the encoder's
text of real records stays accepted (tests/generation/test_constrained.py feeds every committed record).
"""
from __future__ import annotations

import json

import pytest


def _workload():
    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(96)), json.dumps({"kind": "llvm", "num-cores": 2}))


def _allowed_after(engine, tok, workload, text: str) -> set[int]:
    """The tokens the constraint allows after ``text`` (fed token by token, each checked allowed)."""
    import torch

    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask, unpack_bitmask

    c = ScriptConstraint(engine, workload)
    bits = allocate_bitmask(1, engine.vocab_size)
    for t in tok(text, add_special_tokens=False)["input_ids"] if text else []:
        c.fill_mask(bits, 0)
        assert unpack_bitmask(bits, engine.vocab_size)[0, t], (text, tok.decode([t]))
        c.advance(t)
    assert not c.dead, c.error
    c.fill_mask(bits, 0)
    return set(torch.nonzero(unpack_bitmask(bits, engine.vocab_size)[0]).flatten().tolist())


@pytest.mark.parametrize("semantic", [False, True])
def test_only_canonical_white_space_is_allowed(smollm2, engine, semantic):
    tok = smollm2
    wl = _workload() if semantic else None
    space, nl = tok(" ", add_special_tokens=False)["input_ids"], tok("\n", add_special_tokens=False)["input_ids"]
    assert len(space) == len(nl) == 1
    space, nl = space[0], nl[0]
    blanks = [i for i in range(engine.vocab_size) if engine.token_bytes(i) and not engine.token_bytes(i).strip()]
    assert space in blanks and nl in blanks and len(blanks) > 10  # SmolLM2 has many runs of blanks as tokens

    start = _allowed_after(engine, tok, wl, "")
    assert not start & set(blanks)  # no indent, no blank line before the first line
    mid = _allowed_after(engine, tok, wl, "blk C")
    assert space in mid and nl in mid  # a field, or the line's end
    assert not mid & {i for i in blanks if i not in (space, nl)}  # no run of blanks in one token
    after_space = _allowed_after(engine, tok, wl, "blk C\nloops b0 ")
    assert space not in after_space  # ``loops b0  3``: never
    assert tok("3", add_special_tokens=False)["input_ids"][0] in after_space
    ended = _allowed_after(engine, tok, wl, "blk C ")  # a field may follow, or the line end
    assert nl in ended and space not in ended
    next_line = _allowed_after(engine, tok, wl, "blk C\n")
    assert not next_line & set(blanks)  # no blank line, no indent
    assert tok("loops", add_special_tokens=False)["input_ids"][0] in next_line


def _walk(engine, tok, wl, prefix: str, steps: int = 60):
    """A sampler that takes white space other than the line's end whenever it may (what the untrained
    model did), from ``prefix``; (the constraint, the longest run of blank tokens, steps taken)."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask, unpack_bitmask

    c = ScriptConstraint(engine, wl)
    bits = allocate_bitmask(1, engine.vocab_size)
    for t in tok(prefix, add_special_tokens=False)["input_ids"]:
        c.advance(t)
    lines = c.stats.lines
    nl = tok("\n", add_special_tokens=False)["input_ids"][0]
    blanks = {i for i in range(engine.vocab_size) if engine.token_bytes(i) and not engine.token_bytes(i).strip()}
    run = longest = n = 0
    while c.stats.lines == lines and n < steps and not (c.dead or c.done):
        c.fill_mask(bits, 0)
        allowed = unpack_bitmask(bits, engine.vocab_size)[0].nonzero().flatten().tolist()
        ws = [t for t in allowed if t in blanks and t != nl]
        # else the line's end when allowed, else a field (not the factor 1: the tile rule lets 1s repeat)
        pick = ws[0] if ws else nl if nl in allowed else next(t for t in allowed if tok.decode([t]).strip() != "1")
        run = run + 1 if pick in blanks else 0
        longest = max(longest, run)
        c.advance(pick)
        n += 1
    return c, longest, n


def test_white_space_cannot_fill_the_budget(smollm2, engine):
    """Within a line, one blank at a time: the white-space-greedy sampler still completes the line."""
    c, longest, n = _walk(engine, smollm2, _workload(), "blk C\nloops b0 3\ntile")
    assert c.stats.lines == 3 and not c.dead, (n, c.text, c.line, c.error)
    assert longest <= 2 and "  " not in c.text  # a space, then at most the line's end


def test_a_white_space_dead_end_ends_the_attempt(smollm2, engine):
    """Where the masks leave only white space the attempt is ended at once, counted as rejected (before: spaces
    until the budget ran out, no line, not rejected).  No instruction leads there any more: since session 18 an
    instruction whose rule can write no complete line in the state (``loops`` before any block exists, ``tile``
    before any loop: the first cases seen) is not offered at all (``grammar_line._productive_kinds``); the rule
    still ends an attempt whose line's only completion is one TVM refused there (line retries' ``refused``)."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask

    bits = allocate_bitmask(1, engine.vocab_size)
    ScriptConstraint(engine, _workload()).fill_mask(bits, 0)
    for word in ("loops", "tile"):
        t = smollm2(word, add_special_tokens=False)["input_ids"][0]
        assert not (int(bits[0, t // 32]) >> (t % 32)) & 1, word
    c = ScriptConstraint(engine, _workload())
    for t in smollm2("blk C\nloops b0 3", add_special_tokens=False)["input_ids"]:
        c.advance(t)
    assert not c.dead and c.line == b"loops b0 3"
    c.refused = {b"loops b0 3"}            # its one completion, as a retry leaves it
    c.fill_mask(bits, 0)
    space = smollm2(" ", add_special_tokens=False)["input_ids"][0]
    assert not c.dead and (int(bits[0, space // 32]) >> (space % 32)) & 1   # a blank may still follow ...
    c.advance(space)
    c.fill_mask(bits, 0)                   # ... and then nothing but white space: the end
    assert c.dead and c.error.startswith("dead end") and c.stats.rejected_apply == 1, c.error
    e = engine.eos_id
    assert [(w, b) for w, b in enumerate(bits[0].tolist()) if b] == [(e // 32, int(bits[0, e // 32]))]
