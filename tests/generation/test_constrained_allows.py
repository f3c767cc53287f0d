"""``ScriptConstraint.allows`` (the check of a drawn token, ``constrained.SAMPLE_FIRST``) is the bit of the mask
``fill_mask`` writes, for every token the mask allows and a sample of those it forbids, at every position of real
records; where the line grammar is not compiled it decides on the grammars of the instruction kinds the line may be
(``grammar_line.LineKinds``), which must give the same answers, and so must the mask of a line checked by kind (its
kinds' masks OR-ed, no line grammar compiled).

Real parts: the committed MetaSchedule records (llvm, and measured CUDA tensor-core ones), SmolLM2's tokenizer,
llguidance, TVM schedules (in the constraint's worker process)."""
from __future__ import annotations

import random

from dragon_testkit import CODEC_DATA, model_script_lines, real_records


def _compare(engine, tok, mod, target, text: str, limit: int, rng: random.Random) -> tuple[int, int, int, list]:
    from little_dragon.generation.constrained import ScriptConstraint, Workload, allocate_bitmask

    wl = Workload(mod, target)
    checked, ref = ScriptConstraint(engine, wl), ScriptConstraint(engine, wl)
    bits, own = allocate_bitmask(1, engine.vocab_size), allocate_bitmask(1, engine.vocab_size)
    ids = (tok(text, add_special_tokens=False)["input_ids"] + [engine.eos_id])[:limit]
    by_kind = n = masks = 0
    wrong = []
    for pos, t in enumerate(ids):
        ref.fill_mask(bits, 0)
        row = bits[0].tolist()
        allowed = {v for v in range(engine.vocab_size) if (row[v // 32] >> (v % 32)) & 1}
        by_kind += checked.pending is not None
        if checked.by_kind():  # past the line's first token, by kind: its mask (the kinds' OR-ed) is the same
            checked.fill_mask(own, 0)
            if not (own == bits).all():
                wrong.append(f"position {pos} after {checked.line!r}: the kinds' mask differs")
            masks += 1
        for v in sorted(allowed) + rng.sample(range(engine.vocab_size), 64) + [engine.eos_id]:
            n += 1
            if checked.allows(v) != (v in allowed):
                wrong.append(f"position {pos} token {tok.decode([v])!r} after {checked.line!r}: mask {v in allowed}")
        assert t in allowed, (pos, tok.decode([t]))
        if not ref.line and not ref.pending:  # a line's start: also its first letters one token each (bytes the
            wrong += _letters(engine, tok, wl, ref.text, text, rng)  # grammars force: `bl` + `ay` before `out`)
        checked.advance(t)
        ref.advance(t)
    assert (checked.text, checked.dead, checked.done) == (ref.text, ref.dead, ref.done)
    return n, by_kind, masks, wrong


def _letters(engine, tok, wl, head: str, script: str, rng: random.Random) -> list[str]:
    """At the start of the line after ``head``, that line's first letters one single-letter token at a time: at each
    step ``allows`` must give the mask's bit (where a grammar forces bytes the mask keeps only their canonical token)."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask

    line = script[len(head):].split("\n", 1)[0]
    a, b = ScriptConstraint(engine, wl), ScriptConstraint(engine, wl)
    bits = allocate_bitmask(1, engine.vocab_size)
    for c in (a, b):
        for t in tok(head, add_special_tokens=False)["input_ids"]:
            c.advance(t)
    wrong = []
    for ch in line[:5]:
        one = tok.convert_tokens_to_ids(ch)
        if one is None or one == tok.unk_token_id or not ch.isalpha():
            break
        b.fill_mask(bits, 0)
        row = bits[0].tolist()
        allowed = {v for v in range(engine.vocab_size) if (row[v // 32] >> (v % 32)) & 1}
        for v in sorted(allowed) + rng.sample(range(engine.vocab_size), 32):
            if a.allows(v) != (v in allowed):
                wrong.append(f"after {a.line!r}: token {tok.decode([v])!r}, mask {v in allowed}")
        if one not in allowed:
            break
        a.advance(one)
        b.advance(one)
    return wrong


def test_allows_is_the_masks_bit_on_real_records(engine, smollm2):
    rng = random.Random(0)
    total = by_kind = masks = 0
    cases = [(CODEC_DATA / "real_llvm_db", 2, 10_000), (CODEC_DATA / "real_cuda_valid_db", 1, 160)]
    for db, records, limit in cases:
        for i, (name, mod, target, tj) in enumerate(real_records(db)):
            if i >= records:
                break
            text = "\n".join(model_script_lines(tj)) + "\n"
            n, k, m, wrong = _compare(engine, smollm2, mod, target, text, limit, rng)
            assert not wrong, (name, wrong[:5])
            total, by_kind, masks = total + n, by_kind + k, masks + m
    # many checks, many of them decided by kind grammars alone, and masks of lines checked by kind
    assert total > 10_000 and by_kind > 20 and masks > 20, (total, by_kind, masks)


def test_allows_is_the_masks_bit_with_whole_tile_prefixes_in_one_token(monkeypatch):
    """A tokenizer like the tiny model's (a byte-level BPE whose merges cross spaces: ``tile l3 = `` is one token)
    starts a `tile` line with its loop written, so the line is checked on that loop's `tile` kind alone
    (``k_tile@tl3``): ``allows`` and the mask still give the line grammar's bits at every position of real records, and
    the one-loop kinds did the checking."""
    from little_dragon.codec import encode
    from little_dragon.generation import grammar_line
    from little_dragon.generation.constrained import TokenEngine
    from little_dragon.tokenizer import train_bpe_tokenizer

    records = list(real_records(CODEC_DATA / "real_llvm_db"))[:3]
    texts = ["\n".join(model_script_lines(tj)) + "\n" for _, _, _, tj in records] + [encode(tj) for *_, tj in records]
    bpe = train_bpe_tokenizer(texts * 4, vocab_size=700, split="phrases")
    assert any(bpe.decode([i]).startswith("tile l") and bpe.decode([i])[6:7].isdigit()
               and not bpe.decode([i]).rstrip("0123456789").endswith("tile l") for i in range(len(bpe)))
    engine = TokenEngine(bpe)
    used: list[str] = []
    grammar = grammar_line.LineKinds.grammar
    monkeypatch.setattr(grammar_line.LineKinds, "grammar", lambda self, kind: used.append(kind) or grammar(self, kind))
    rng = random.Random(0)
    for name, mod, target, tj in records[:2]:
        text = "\n".join(model_script_lines(tj)) + "\n"
        n, k, m, wrong = _compare(engine, bpe, mod, target, text, 10_000, rng)
        assert not wrong, (name, wrong[:5])
    assert any(u.startswith("k_tile@tl") for u in used), sorted(set(used))


def test_kind_grammars_split_the_line_grammar(engine):
    """Each kind's grammar compiles; the kinds by keyword are ``?inst``'s alternatives that the state leaves a line
    of (``ann`` names two kinds); ``kinds_for`` reads a keyword still being written and one run into its field."""
    import llguidance

    from dragon_testkit import prefix_state
    from little_dragon.generation.grammar_line import line_kinds

    name, mod, target, tj = next(iter(real_records(CODEC_DATA / "real_llvm_db")))
    lines = model_script_lines(tj)
    st = prefix_state(mod, "".join(x + "\n" for x in lines[:10]))
    kinds = line_kinds(st, reorder_derived=False)
    assert kinds.keywords["ann"] == ("k_ann", "k_anncat") and "inline" not in kinds.keywords  # nothing to inline
    for names in kinds.keywords.values():
        for k in names:
            assert llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(kinds.grammar(k))) == ""
    assert kinds.kinds_for(b"ti") == ["k_tile"] and kinds.kinds_for(b"blkroot") == ["k_blk"]
    # no `at b l` here: the conv2d block's loops all enclose it, and the other blocks are the root and an inlined one
    assert not any(st.compute_at.values()), st.compute_at
    assert set(kinds.kinds_for(b"a")) == {"k_align", "k_ann", "k_anncat", "k_atloc"}
    assert kinds.kinds_for(b"x") == []
    # a `tile` line that names its loop is that loop's kind: only its alternative of the `tile` rule
    loop = next(n for n in sorted(kinds._graph["k_tile"][1]) if n.startswith("tl"))
    assert kinds.kinds_for(f"tile {loop[1:]} =".encode()) == [f"k_tile@{loop}"]
    assert kinds.kinds_for(f"tile {loop[1:]}".encode()) == ["k_tile"]  # more digits may follow
    one = kinds.grammar(f"k_tile@{loop}")
    assert f'k_tile: "tile" {loop}\n' in one and len(one) < len(kinds.grammar("k_tile"))
    assert llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(one)) == ""
