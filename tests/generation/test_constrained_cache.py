"""Compiled line grammars are shared between schedule states (generation/constrained.py ``TokenEngine``, cached
by the grammar's text): a shared grammar must never be the wrong one.  States with different live variables
get different grammars and masks; a cache hit masks exactly as a fresh compile of the same text; using a
cached matcher does not change it for the next state that shares it; the grammar shared by every finished
attempt (after ``post *``) and the cheaper cat chain mask exactly as the grammars they replace.

Real parts only: SmolLM2's tokenizer, llguidance, the codec grammar, a TVM matmul workload, a real llvm record.
"""
from __future__ import annotations

import json
from pathlib import Path


CODEC_DATA = Path(__file__).resolve().parents[2] / "tests" / "codec" / "data"


def _workload():
    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(96)), json.dumps({"kind": "llvm", "num-cores": 2}))


def _walk(engine, workload, tok, prefix: str, then: str):
    """A constraint fed ``prefix`` + ``then`` token by token (each allowed); returns the constraint and the
    allowed-token masks (bool ``[vocab]``) before each token of ``then`` and after its last one."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask, unpack_bitmask

    c = ScriptConstraint(engine, workload)
    bits = allocate_bitmask(1, engine.vocab_size)
    ids = tok(prefix, add_special_tokens=False)["input_ids"] if prefix else []
    tail = tok(then, add_special_tokens=False)["input_ids"] if then else []
    masks = []
    for i, t in enumerate(ids + tail):
        c.fill_mask(bits, 0)
        allowed = unpack_bitmask(bits, engine.vocab_size)[0].clone()
        assert allowed[t], (prefix + then, tok.decode([t]), c.error)
        if i >= len(ids):
            masks.append(allowed)
        c.advance(t)
    assert not c.dead, c.error
    c.fill_mask(bits, 0)
    masks.append(unpack_bitmask(bits, engine.vocab_size)[0].clone())
    return c, masks


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_states_with_different_live_variables_get_different_grammars_and_masks(smollm2):
    """Before the split l0, l1, l2 exist; after ``tile l0 = 4 8 3`` l0 is gone and l3 .. l5 exist: the two line
    grammars differ, and after ``par l`` the masks differ exactly where the loops differ (each compiled once,
    the second walk through either state is a cache hit that masks the same)."""
    from little_dragon.generation.constrained import TokenEngine

    engine = TokenEngine(smollm2)
    wl = _workload()
    before, after = "blk C\nloops b0 3\n", "blk C\nloops b0 3\ntile l0 = 4 8 3\n"
    c1, m1 = _walk(engine, wl, smollm2, before, "par l")
    c2, m2 = _walk(engine, wl, smollm2, after, "par l")
    assert c1.state.loops.keys() != c2.state.loops.keys()
    from little_dragon.generation.grammar_line import line_grammar

    assert line_grammar(c1.state) != line_grammar(c2.state)
    zero, three = _ids(smollm2, "0")[0], _ids(smollm2, "3")[0]
    assert m1[-1][zero] and not m1[-1][three]  # l0 exists, l3 not yet
    assert m2[-1][three] and not m2[-1][zero]  # l0 was split away, l3 is one of its tiles
    n = len(engine._cache)
    _, m1b = _walk(engine, wl, smollm2, before, "par l")
    _, m2b = _walk(engine, wl, smollm2, after, "par l")
    assert len(engine._cache) == n  # cache hits only
    assert all((a == b).all() for a, b in zip(m1 + m2, m1b + m2b))


def test_a_cache_hit_masks_as_a_fresh_compile_of_a_real_record(smollm2):
    """Every prefix of a real llvm record: the masks of a warm engine (every line grammar a cache hit, its
    matchers used before) equal those of a cold engine that compiles each grammar afresh, token by token."""
    from little_dragon.codec import encode
    from little_dragon.codec.roundtrip import read_database
    from little_dragon.generation.constrained import TokenEngine, Workload

    db = sorted((CODEC_DATA / "real_llvm_db").iterdir())[0]
    name, mod, recs = next(iter(read_database(db)))
    _, trace_json, target = recs[0]
    lines = encode(trace_json).splitlines()
    text = "\n".join(lines[:lines.index("post")] + ["post *"] if "post" in lines else lines) + "\n"
    wl = Workload(mod, target)
    warm = TokenEngine(smollm2)
    _walk(warm, wl, smollm2, "", text)  # fills the cache (and uses its matchers' copies)
    compiled = len(warm._cache)
    assert compiled >= 3
    _, hit = _walk(warm, wl, smollm2, "", text)
    assert len(warm._cache) == compiled  # the second walk compiled nothing
    _, fresh = _walk(TokenEngine(smollm2), wl, smollm2, "", text)
    assert len(hit) == len(fresh) == len(_ids(smollm2, text)) + 1
    assert all((a == b).all() for a, b in zip(hit, fresh))


def _old_cat_rules() -> list[str]:
    """The cat chain as written before the cheaper form (session 6): ``dd<n>`` wrappers, alternations."""
    from little_dragon.codec.kinds import CANDIDATES
    from little_dragon.generation.grammar_line import MAX_LISTED_CANDIDATES

    alts, rules = ["SINT cr1"], []
    for n in range(1, MAX_LISTED_CANDIDATES + 1):
        more = f"SINT cr{n + 1}" if n < MAX_LISTED_CANDIDATES else "SINT SINT* probs? decision"
        rules.append(f"cr{n}: probs? dd{n} | {more}")
        rules.append(f'dd{n}: "=" DD{n}')
        rules.append(f"DD{n}: / (" + "|".join(str(i) for i in range(n)) + ")/")
    for name, cands in sorted(CANDIDATES.items()):
        alts.append(f"cn_{name}")
        rules.append(f'cn_{name}: "{name}" probs? dd{len(cands)}')
    rules.insert(0, "catsel: " + " | ".join(alts))
    return rules


def _masks_of(engine, grammar: str, ids: list[int]):
    import torch

    from little_dragon.generation.constrained import allocate_bitmask, unpack_bitmask

    m = engine._compile(grammar)
    bits = allocate_bitmask(1, engine.vocab_size)
    out = []
    for t in ids + [None]:
        m.unsafe_compute_mask_ptr(bits.data_ptr(), bits.numel() * 4)
        out.append(unpack_bitmask(bits, engine.vocab_size)[0].clone())
        if t is not None and not m.consume_token(t):
            break
    return torch.stack(out)


def test_cheaper_cat_chain_and_finished_grammar_mask_as_the_grammars_they_replace(smollm2):
    """The same masks, token by token, from the line grammar with the cat chain as before and as now (lines
    that index within and past their candidates, named lists, more than 16 candidates), and from the full
    line grammar with the finished start against the one grammar every finished attempt now shares."""
    from little_dragon.generation import grammar_line as gl
    from little_dragon.generation.constrained import TokenEngine

    engine = TokenEngine(smollm2)
    new = gl.line_grammar(None)
    old_fixed = gl._fixed_rules().split("catsel:")[0] + "\n".join(_old_cat_rules()) + "\n"
    old = old_fixed + gl._line_start(False, False) + "\n" + gl._semantic_rules(None) + "\n"
    assert old != new
    many = " ".join(str(i) for i in range(20))
    for line in ["cat 0 16 64 = 2\n", "cat 0 16 = 2\n", "cat 1 2 3 4 5 6 7 8 9 10 11 12 = 11\n",
                 "cat 1 2 3 4 5 6 7 8 9 10 11 12 = 12\n", "ann b0 .unroll_explicit cat unroll = 3\n",
                 "ann b0 .unroll_explicit cat unroll = 4\n",
                 f"ann b0 .unroll_explicit cat {many} = 19\n", "cat 3 = 0\n",
                 "ann b2 .unroll_explicit cat lanes8 = 3\n"]:
        ids = _ids(smollm2, line)
        assert (_masks_of(engine, old, ids) == _masks_of(engine, new, ids)).all(), line
    # with probabilities the chain is narrower now (issue 16: one probability per candidate, the decoder's "wrong
    # number of probabilities"; the old chain let any number through): a subset of the old masks at every token,
    # the same lines accepted, the wrong count refused
    for line in ["ann l1 k cat threads ~ 0.1 0.1 0.1 0.1 0.1 0.5 = 5\n", "cat 4 8 ~ 0.25 0.75 = 1\n"]:
        ids = _ids(smollm2, line)
        o, n = _masks_of(engine, old, ids), _masks_of(engine, new, ids)
        assert len(o) == len(n) == len(ids) + 1 and not (n & ~o).any(), line
    ids = _ids(smollm2, "ann l1 k cat threads ~ 0.5 0.5 = 5\n")
    assert len(_masks_of(engine, old, ids)) == len(ids) + 1 > len(_masks_of(engine, new, ids))
    full_finished = gl._fixed_rules() + gl._line_start(False, True) + "\n" + gl._semantic_rules(None) + "\n"
    assert gl.line_grammar(None, finished=True) == gl.finished_grammar() != full_finished
    for tail in ["\n", "\n\n", "", "x", " \n"]:
        ids = _ids(smollm2, tail) if tail else []
        assert (_masks_of(engine, full_finished, ids) == _masks_of(engine, gl.finished_grammar(), ids)).all()
