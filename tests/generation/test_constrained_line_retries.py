"""Line retries (``generation.constrained_line_retries``): a line the grammar allows and TVM refuses at its end is
taken back and drawn again in its attempt, instead of ending it.  The constraint's side: it returns to the line's
start exactly (the same prefix, schedule and mask as a fresh constraint there), tells the engine how many tokens to
drop, counts every retry, and ends the attempt as before once its retries are spent.  The engine's side
(dropping the tokens, drawing again from the line's first logits) is tested in test_shared_prefix.py and, together,
in test_constrained_shared_prefix.py.

Real parts: a real matmul kernel, TVM (its ScheduleErrors for the lines ``REFUSED``), the codec,
llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest

from dragon_testkit import feed_constraint, mask_of, matmul_tensors, prim_module

HEAD = "blk C\nloops b0 3\n"
# lines the mask allows and TVM refuses at their end: a split into one factor that is not the loop's extent, a loop
# twice in a reorder, a reduction block reverse-inlined
REFUSED = ("split l0 7", "reorder l1 l1", "rinline b0")


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
        assert c.at_line_start() and mask_of(c, engine) == mask_of(fresh, engine)          # the line starts afresh
    st = c.stats
    assert (st.line_retries, st.rejected_apply) == (2, 0)
    assert st.retried_tokens == sum(len(smollm2(x + "\n", add_special_tokens=False)["input_ids"]) for x in REFUSED[:2])
    assert sum(st.retry_reasons.values()) == 2 and all(r.startswith("apply: ") for r in st.retry_reasons)
    assert any("product of factors" in r for r in st.retry_reasons), st.retry_reasons  # TVM's own reasons, counted
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


def test_a_refused_line_is_not_written_again_at_its_start(engine, smollm2, matmul):
    """After a retry the token that would end the refused line again is forbidden, by the mask and by ``allows`` alike
    (draw-then-check samples the same set), with or without a trailing space; other lines, and the refused line's
    own start, stay allowed; once a line is accepted the next line may write it again."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask, unpack_bitmask

    c = ScriptConstraint(engine, matmul)
    c.line_retries = 3
    _feed(c, engine, smollm2, HEAD + REFUSED[0] + "\n")
    assert c.refused == {REFUSED[0].encode()} and c.taken_back() > 0
    ids = smollm2(REFUSED[0] + "\n", add_special_tokens=False)["input_ids"]
    _feed(c, engine, smollm2, smollm2.decode(ids[:-1]))      # the refused line's text, not yet ended
    last = ids[-1]
    bits = allocate_bitmask(1, engine.vocab_size)
    c.fill_mask(bits, 0)
    mask = unpack_bitmask(bits, engine.vocab_size)[0]
    assert not mask[last] and not c.allows(last)
    assert c.refused_completions() and all(not mask[t] for t in c.refused_completions())
    for t in mask.nonzero().flatten().tolist():               # every token the mask keeps, allows keeps
        assert c.allows(t), smollm2.decode([t])
    space = smollm2(" ", add_special_tokens=False)["input_ids"]
    assert len(space) == 1 and c.allows(space[0])              # a blank: the line may go on ...
    c.advance(space[0])
    assert not any(c.allows(t) for t, b in engine.newline_tokens() if b.strip() == b"")   # ... not end there
    # another line at this start is allowed to its end and applies
    d = ScriptConstraint(engine, matmul)
    d.line_retries = 3
    _feed(d, engine, smollm2, HEAD + REFUSED[0] + "\n")
    d.taken_back()
    _feed(d, engine, smollm2, "tile l1 = 8 8\n")
    assert not d.dead and d.refused == set() and d.text == HEAD + "tile l1 = 8 8\n"


def _last_tile_run(lines: list[str]) -> tuple[int, int]:
    tiles = [k for k, ln in enumerate(lines) if ln.startswith("tile")]
    end = tiles[-1] + 1
    start = tiles[-1]
    while start > 0 and lines[start - 1].startswith("tile"):
        start -= 1
    return start, end


def test_a_script_the_end_check_refuses_goes_back_to_its_last_tiling(engine, smollm2):
    """A real measured CUDA record whose last tiling's inner tile factors are all set to 1 (a tiling the mask allows)
    is refused by the end check at `post *`.  With a retry left the attempt goes back to that tiling's first `tile`
    line (not dead, the prefix before it, that line's start again; the engine drops every token since), and the
    record's own lines from there end it alive; without retries it ends at `post *` as before."""
    import re

    from dragon_testkit import CODEC_DATA, model_script_lines, real_records

    from little_dragon.generation.constrained import ScriptConstraint, Workload

    name, mod, target, tj = next(real_records(CODEC_DATA / "real_cuda_valid_db"))
    lines = model_script_lines(tj)
    a, b = _last_tile_run(lines)
    ones = [re.sub(r"^(tile l\d+(?: m=\d+)? = \d+)(.*)$", lambda m: m.group(1) + " 1" * len(m.group(2).split()), ln)
            for ln in lines[a:b]]
    assert ones != lines[a:b]
    bad = lines[:a] + ones + lines[b:]
    wl = Workload(mod, target)
    head = "".join(x + "\n" for x in lines[:a])
    plain = ScriptConstraint(engine, wl)
    _feed(plain, engine, smollm2, "".join(x + "\n" for x in bad))
    assert plain.dead and plain.error.startswith("post:"), plain.error
    c = ScriptConstraint(engine, wl)
    c.line_retries = 1
    n_head = _feed(c, engine, smollm2, head)
    n_all = n_head + _feed(c, engine, smollm2, "".join(x + "\n" for x in bad[a:]))
    assert not c.dead and c.taken_back() == n_all - n_head and c.n_tokens == n_head, c.error
    assert (c.text, c.line, c.finished, c.retried) == (head, b"", False, 1) and c.at_line_start()
    assert c.stats.line_retries == 1 and c.stats.rejected_end == 0
    assert all(r.startswith("post:") for r in c.stats.retry_reasons), c.stats.retry_reasons
    _feed(c, engine, smollm2, "".join(x + "\n" for x in lines[a:]))
    c.advance(smollm2.eos_token_id)
    assert c.done and not c.dead and c.text == "".join(x + "\n" for x in lines), c.error
    assert c.stats.end_checked == 2


def test_a_compute_at_index_is_an_integer(engine, smollm2):
    """`at b l i=[...]` decodes, and TVM's ComputeAt ended the constraint's worker (SIGSEGV) on such a list (line
    retries wrote more lines and met it): only an integer follows `i=`."""
    from dragon_testkit import two_block_tensors

    from little_dragon import codec
    from little_dragon.generation.constrained import Workload

    wl = Workload(prim_module(two_block_tensors()), json.dumps({"kind": "llvm", "num-cores": 2}))
    head = "blk B\nblk C\nloops b1 2\n"  # B computed at C's outer loop: a place TVM's scope check takes
    bad = head + "at b0 l0 i=[_true_true_1 2 3]\n"
    codec.decode(bad, codec.SyntaxOnlyContext())      # the codec reads it
    refused, _ = feed_constraint(engine, wl, smollm2, bad)
    assert refused is not None and "[" in refused, refused      # refused at the list
    refused, c = feed_constraint(engine, wl, smollm2, head + "at b0 l0 i=-1\n")
    assert refused is None and not c.dead, (refused, c.error)   # allowed, and TVM applies it


# lines the line grammar allows and the codec's decoder refuses: an index map naming what it does not define (the two
# the tiny model wrote in session 31's CPU A/B, where each ended its attempt), a span reference before any span
UNDECODABLE = ("layout b0 r0 {i0,i1->i0,v_k}", "layout b0 r0 {i0@0,i1->i0,i1}")


def test_a_line_the_decoder_refuses_is_drawn_again(engine, smollm2, matmul):
    from little_dragon.generation.constrained import ScriptConstraint

    for line in UNDECODABLE:  # the mask allows every token of it; its end is the decoder's to refuse
        refused, c = feed_constraint(engine, matmul, smollm2, HEAD + line + "\n")
        assert refused is None and c.dead and c.error.startswith("decode:"), (line, refused, c.error)
        assert "index map" in c.error or "span reference" in c.error, c.error
        assert c.script("") == HEAD   # its checked lines (lookups only: no kernel to finish), never the refused line
    refused, fresh = feed_constraint(engine, matmul, smollm2, HEAD)
    c = ScriptConstraint(engine, matmul)
    c.line_retries = 2
    _feed(c, engine, smollm2, HEAD)
    for i, line in enumerate(UNDECODABLE):
        n = _feed(c, engine, smollm2, line + "\n")
        assert not c.dead and c.taken_back() == n, c.error            # its tokens taken back, the attempt goes on
        assert (c.text, c.line, c.retried) == (HEAD, b"", i + 1)
        assert c.at_line_start() and mask_of(c, engine) == mask_of(fresh, engine)
    st = c.stats
    assert (st.line_retries, st.rejected_decode) == (2, 0)
    assert all(r.startswith("decode: ") for r in st.retry_reasons), st.retry_reasons
    # retries spent: the attempt ends at the refused line as before, counted as a decode rejection
    _feed(c, engine, smollm2, UNDECODABLE[0] + "\n")
    assert c.dead and c.error.startswith("decode:") and st.rejected_decode == 1


def test_an_end_check_read_steps_later_acts_as_one_read_at_once(engine, smollm2):
    """[end wait] With retries left and ``end_wait`` 2, `post *`'s end check runs beside decoding: the attempt holds two
    steps (any token but the end, counted) and then acts on the verdict exactly as the check at once does (the test
    above): refused, it is back at its tiling's first `tile` line, every token since taken back, the held ones
    included, with the mask a check at once leaves; accepted, the held tokens are taken back and it may end there.  Cut
    while holding, ``settle`` reads the verdict (no retry)."""
    import re

    from dragon_testkit import CODEC_DATA, model_script_lines, real_records

    from little_dragon.generation.constrained import ScriptConstraint, Workload

    name, mod, target, tj = next(real_records(CODEC_DATA / "real_cuda_valid_db"))
    lines = model_script_lines(tj)
    a, b = _last_tile_run(lines)
    ones = [re.sub(r"^(tile l\d+(?: m=\d+)? = \d+)(.*)$", lambda m: m.group(1) + " 1" * len(m.group(2).split()), ln)
            for ln in lines[a:b]]
    bad = lines[:a] + ones + lines[b:]
    wl = Workload(mod, target)
    head = "".join(x + "\n" for x in lines[:a])
    eos = smollm2.eos_token_id
    held = smollm2("blk x", add_special_tokens=False)["input_ids"][:2]
    assert len(held) == 2 and eos not in held

    def constraint(wait: int) -> ScriptConstraint:
        c = ScriptConstraint(engine, wl)
        c.line_retries, c.defer_end, c.end_wait = 2, True, wait
        return c

    at_once = constraint(0)
    _feed(at_once, engine, smollm2, "".join(x + "\n" for x in bad))
    c = constraint(2)
    n_head = _feed(c, engine, smollm2, head)
    n_all = n_head + _feed(c, engine, smollm2, "".join(x + "\n" for x in bad[a:]))
    assert c.finished and not c.dead and c.taken_back() == 0 and c.at_line_start()   # its next logits are kept
    for i, t in enumerate(held):
        assert not c.allows(eos) and c.allows(t)
        assert mask_of(c, engine) == engine.hold_mask(len(mask_of(c, engine))).tolist()
        c.advance(t)
        assert (c.taken_back() == 0) == (i == 0), i
    # the verdict, after the second held step: back to the tiling as at once, the held tokens taken back too
    assert c.stats.held_tokens == 2 and at_once.stats.line_retries == c.stats.line_retries == 1
    assert (c.text, c.n_tokens, c.finished, c.retried) == (head, n_head, False, 1) and c.at_line_start()
    assert mask_of(c, engine) == mask_of(at_once, engine)
    # `c.taken_back()` was read in the loop: every token since the tiling's start plus the two held
    assert at_once.taken_back() == n_all - n_head
    n_again = _feed(c, engine, smollm2, "".join(x + "\n" for x in lines[a:]))
    assert c.finished and c.at_line_start() and c.n_tokens == n_head + n_again
    for t in held:
        c.advance(t)
    assert c.taken_back() == 2 and c.n_tokens == n_head + n_again and not c.dead   # accepted: only the held ones
    assert c.allows(eos) and not c.at_line_start()
    c.advance(eos)
    assert c.done and not c.dead and c.text == "".join(x + "\n" for x in lines), c.error
    assert c.stats.end_checked == 2 and c.stats.held_tokens == 4
    # cut at the token budget while holding: the verdict is read when the call settles, and refuses as at once
    cut = constraint(5)
    _feed(cut, engine, smollm2, "".join(x + "\n" for x in bad))
    cut.advance(held[0])
    assert not cut.dead
    cut.settle()
    plain = ScriptConstraint(engine, wl)   # no retries: the verdict at once, the attempt dead at `post *`
    _feed(plain, engine, smollm2, "".join(x + "\n" for x in bad))
    assert plain.dead and cut.dead and cut.error == plain.error and cut.script("") == plain.script(""), cut.error


def test_the_end_wait_by_device(monkeypatch):
    """[end wait] ``END_WAIT_STEPS`` None: 4 steps on a CPU, 3 on an accelerator (session 35's H100: the processes waited
    6.7 s for verdicts with 1 step, 2.5 s with 3); a setting wins over the device."""
    import torch

    from little_dragon.generation import constrained

    assert constrained.END_WAIT_STEPS is None
    assert constrained._end_wait(torch.device("cpu")) == 4 and constrained._end_wait(torch.device("cuda", 0)) == 3
    monkeypatch.setattr(constrained, "END_WAIT_STEPS", 0)
    assert constrained._end_wait(torch.device("cuda", 0)) == 0
