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
    ``post *``, and it applies with the target's post-processing (llvm; CUDA tensor cores after 58 lines)."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    for (name, mod, target, lines), k in zip(_prefixes(), (None, 58)):
        wl = Workload(mod, target)
        keep, script, c = _cut(engine, wl, lines, k or max(2, len(lines) // 2), smollm2)
        assert script == keep + "post *\n", (name, script[-200:])
        assert check_module_script(script, mod, wl.post_context).valid, name
        assert c.stats.truncated == 1


def test_lines_the_post_processors_refuse_stay_as_they_are(smollm2):
    """The CUDA record cut after 44 lines (inside its tensorization: TVM's RewriteUnboundBlock refuses it):
    the checked lines alone, no ``post *`` that would not apply."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    name, mod, target, lines = list(_prefixes())[1]
    wl = Workload(mod, target)
    keep, script, _ = _cut(engine, wl, lines, 44, smollm2)
    assert not check_module_script(keep + "post *\n", mod, wl.post_context).valid
    assert script == keep


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
