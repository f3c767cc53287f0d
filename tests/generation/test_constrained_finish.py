"""A constrained attempt that stops short of ``post *`` (a line check killed it, or the token budget ran out)
keeps its checked lines, finished by ``post *`` when the target's post-processors accept them: MetaSchedule
finishes every candidate so, and on CUDA the bare lines are an unfinished kernel (session 8's H200 A/B).
Real committed MetaSchedule records (tests/codec/data: llvm and CUDA tensor-core), real TVM, SmolLM2's
tokenizer."""
from __future__ import annotations

from pathlib import Path


CODEC_DATA = Path(__file__).resolve().parents[2] / "tests" / "codec" / "data"


def _prefixes():
    """(name, module, target, the record's lines before its post-processing) of one llvm and one CUDA record."""
    from little_dragon.codec import encode
    from little_dragon.codec.roundtrip import read_database

    # the CUDA record MetaSchedule built and ran (a finished cut must also lower: the end check's rule)
    dbs = [sorted((CODEC_DATA / "real_llvm_db").iterdir())[0], CODEC_DATA / "real_cuda_valid_db"]
    for db in dbs:
        name, mod, recs = next(read_database(db))
        lines = encode(recs[0][1]).splitlines()
        yield name, mod, recs[0][2], lines[:lines.index("post")]


def _constraint_after(engine, workload, text, tokenizer):
    from little_dragon.generation.constrained import ScriptConstraint

    c = ScriptConstraint(engine, workload)
    for t in tokenizer(text, add_special_tokens=False)["input_ids"]:
        c.advance(t)
    assert not c.dead, c.error
    return c


def _cut(engine, wl, lines, k, tokenizer):
    """The constraint's script for an attempt cut off after ``k`` complete lines and 3 bytes of the next."""
    keep = "\n".join(lines[:k]) + "\n"
    partial = lines[k][:3] if k < len(lines) else ""
    c = _constraint_after(engine, wl, keep + partial, tokenizer)
    return keep, c.script(keep + partial), c


def test_a_cut_off_attempt_is_finished_by_post(smollm2):
    """A real record's lines and a partial line, the budget spent there: the script is the complete lines +
    ``post *``, and it applies with the target's post-processing (llvm; CUDA tensor cores after 81 lines, its last
    input tensorized: cut after 53-80 lines the end check refuses a fragment used element by element, which nvcc
    refuses: ``test_constrained_fragments.py``)."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    for (name, mod, target, lines), k in zip(_prefixes(), (None, 81)):
        wl = Workload(mod, target)
        keep, script, c = _cut(engine, wl, lines, k or max(2, len(lines) // 2), smollm2)
        assert script == keep + "post *\n", (name, script[-200:])
        assert check_module_script(script, mod, wl.post_context).valid, name
        assert c.stats.truncated == 1


def test_lines_the_post_processors_refuse_stay_as_they_are(smollm2):
    """The CUDA record cut after 44 lines (inside its tensorization: TVM's RewriteUnboundBlock refuses it), with no
    earlier line to end at (``finish_back`` 0, or 5: its lines 39-43 are refused too): the checked lines alone, no
    ``post *`` that would not apply."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    name, mod, target, lines = list(_prefixes())[1]
    wl = Workload(mod, target)
    for back in (0, 5):
        keep = "\n".join(lines[:44]) + "\n"
        c = _constraint_after(engine, wl, keep + lines[44][:3], smollm2)
        c.finish_back = back
        assert not check_module_script(keep + "post *\n", mod, wl.post_context).valid
        assert c.script(keep) == keep and c.stats.finished_earlier == 0, back


def test_a_cut_attempt_ends_at_the_last_line_the_post_processors_finish(smollm2):
    """The same cut with ``finish_back`` 6: the record's first 38 lines (before its tensorization's cache writes) and
    `post *`, the longest prefix the target's post-processors finish within 6 lines; the judge's check accepts it;
    counted with the lines it dropped."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    name, mod, target, lines = list(_prefixes())[1]
    wl = Workload(mod, target)
    keep = "\n".join(lines[:44]) + "\n"
    c = _constraint_after(engine, wl, keep + lines[44][:3], smollm2)
    c.finish_back = 6
    script = c.script(keep)
    assert script == "\n".join(lines[:38]) + "\npost *\n", script[-300:]
    assert check_module_script(script, mod, wl.post_context).valid
    assert (c.stats.truncated, c.stats.finished_earlier, c.stats.finished_earlier_lines) == (1, 1, 6)


def test_a_dead_attempt_ends_at_its_last_line_the_post_processors_finish(smollm2):
    """An attempt whose line TVM refused, retries spent (llvm: a loop twice in a reorder; a split whose factor is not
    the extent), ends as the lines before it and `post *` once ``finish_back`` allows a line to be dropped (0: it keeps
    the refused line, so the verdict names it).  One whose end the end check refused (CUDA: 2048 threads a block,
    VerifyGPUCode) ends at the longest prefix of its lines the post-processors finish: here without its two `bind`
    lines, which `post *` then binds within the target's limits; not within 1 line; and with a refused line after
    them, within 3 lines, not 2.  The judge accepts what they end as."""
    from dragon_testkit import feed_constraint, matmul_tensors, prim_module

    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload, clear_caches

    clear_caches()
    engine = TokenEngine(smollm2)
    llvm = Workload(prim_module(matmul_tensors(64)), '{"kind": "llvm", "num-cores": 2}')
    head = "blk C\nloops b0 3\nsplit l2 _ 8\n"
    for refused in ("reorder l1 l1", "split l0 7"):
        where, c = feed_constraint(engine, llvm, smollm2, head + refused + "\n")
        assert where is None and c.dead and c.error.startswith("apply:"), (where, c.error)
        assert c.script("") == head + refused + "\n"
        c.finish_back = 1
        assert c.script("") == head + "post *\n", refused
        assert check_module_script(head + "post *\n", llvm.mod, llvm.post_context).valid
        assert (c.stats.finished_earlier, c.stats.finished_earlier_lines) == (1, 1)

    cuda = Workload(prim_module(matmul_tensors(64)), _cuda_target())
    body = "blk C\nloops b0 3\nfuse l0 l1\nsplit l3 _ 2048\n"
    text = body + "bind l4 bx\nbind l5 tx\npost *\n"
    where, c = feed_constraint(engine, cuda, smollm2, text)
    assert where is None and c.dead and c.error.startswith("post:") and "VerifyGPUCode" in c.error, c.error
    c.finish_back = 1
    assert c.script(text) == text and c.stats.finished_earlier == 0
    c.finish_back = 24
    assert c.script(text) == body + "post *\n"
    assert check_module_script(body + "post *\n", cuda.mod, cuda.post_context).valid
    assert not check_module_script(text, cuda.mod, cuda.post_context).valid
    assert (c.stats.finished_earlier, c.stats.finished_earlier_lines) == (1, 2)
    # the same lines before `post *` and a line TVM refuses: three lines to drop, the refused one included
    where, c = feed_constraint(engine, cuda, smollm2, text.replace("post *", "split l2 7"))
    assert where is None and c.dead and c.error.startswith("apply:"), (where, c.error)
    c.finish_back = 2
    assert c.script("") == text.replace("post *", "split l2 7") and c.stats.finished_earlier == 0
    c.finish_back = 3
    assert c.script("") == body + "post *\n" and c.stats.finished_earlier_lines == 3


def test_an_attempt_that_scheduled_nothing_keeps_its_refused_line(smollm2):
    """Lines that schedule nothing are no kernel to end at (the end check refuses a no-op): an attempt refused right
    after its lookups keeps its refused line, whatever ``finish_back``."""
    from dragon_testkit import feed_constraint, matmul_tensors, prim_module

    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    llvm = Workload(prim_module(matmul_tensors(64)), '{"kind": "llvm", "num-cores": 2}')
    text = "blk C\nloops b0 3\nsplit l0 7\n"
    where, c = feed_constraint(engine, llvm, smollm2, text)
    assert where is None and c.dead, c.error
    c.finish_back = 24
    assert c.script("") == text and c.stats.finished_earlier == 0


def _cuda_target() -> str:
    import json

    from dragon_testkit import real_records

    target = next(iter(real_records(CODEC_DATA / "real_cuda_db")))[2]
    return target if isinstance(target, str) else json.dumps(target)


def test_a_finished_attempt_is_left_as_written(smollm2):
    """An attempt that wrote ``post *`` and ended is the text the model wrote; an empty prefix gets nothing."""
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    name, mod, target, lines = next(_prefixes())
    wl = Workload(mod, target)
    text = "\n".join(lines) + "\npost *\n"
    c = _constraint_after(engine, wl, text, smollm2)
    c.advance(smollm2.eos_token_id)
    assert c.script(text) == text
    empty = _constraint_after(engine, wl, "", smollm2)
    assert empty.script("") == ""


def _allowed(c, token, vocab):
    from little_dragon.generation.constrained import allocate_bitmask

    bits = allocate_bitmask(1, vocab)
    c.fill_mask(bits, 0)
    return bool((int(bits[0, token // 32]) >> (token % 32)) & 1)


def test_no_end_before_the_post_processing(smollm2):
    """EOS is masked after every complete line (and right after a line's last token, where no newline has
    checked it yet) until `post *` is written; after `post *` it is allowed."""
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    eos = smollm2.eos_token_id
    for name, mod, target, lines in _prefixes():
        wl = Workload(mod, target)
        for k in (1, len(lines) // 2, len(lines)):
            c = _constraint_after(engine, wl, "\n".join(lines[:k]) + "\n", smollm2)
            assert not _allowed(c, eos, engine.vocab_size), (name, k)
            c = _constraint_after(engine, wl, "\n".join(lines[:k]), smollm2)  # the line's last token, no newline
            assert not _allowed(c, eos, engine.vocab_size), (name, k, "mid-line")
        c = _constraint_after(engine, wl, "\n".join(lines) + "\npost *\n", smollm2)
        assert _allowed(c, eos, engine.vocab_size), name
