"""The codec decoder's own checks (beyond its grammar) hold under the constraint (issue 16): a line the constraint
allows token by token is a line ``codec.decode`` reads.  Each check is tested on a real workload and a real record's
prefix: the decoder rejects the line (so the check is the decoder's), the constraint forbids a token of it, and the
nearest line the decoder reads is still allowed.  Then random walks under the constraint from real record prefixes
(every token a uniformly drawn allowed one, the tiny model's kind of tokenizer) end no attempt on a decode rejection.

Real parts only: the committed MetaSchedule llvm database (tests/codec/data), the real codec, TVM, llguidance.
"""
from __future__ import annotations

import random

import pytest

from dragon_testkit import CODEC_DATA, real_records
from dragon_testkit import feed_constraint as _walk
from dragon_testkit import model_script_lines as _script

LLVM_DB = CODEC_DATA / "real_llvm_db"


def _records():
    return real_records(LLVM_DB)


@pytest.fixture(scope="module")
def conv():
    """The real conv2d record (llvm): its workload and its script's lines (`ann b1 tiling`, 7 tile lines,
    `reorder *`, ...)."""
    from little_dragon.generation.constrained import Workload

    for name, mod, target, tj in _records():
        lines = _script(tj)
        if "reorder *" in lines and 'ann b1 tiling "SSRSRS"' in lines:
            return Workload(mod, target), lines
    pytest.skip("no real record with `reorder *`")


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE over the real scripts (the tiny model's kind: multi-field tokens such as ' = 1 1\\n')."""
    from little_dragon.tokenizer import train_bpe_tokenizer

    texts = ["".join(line + "\n" for line in _script(tj)) for *_, tj in _records()]
    return train_bpe_tokenizer(texts * 4, vocab_size=600, split="phrases")


@pytest.fixture(scope="module")
def engine(bpe):
    from little_dragon.generation.constrained import TokenEngine

    return TokenEngine(bpe)


def _decodes(text: str) -> bool:
    from little_dragon import codec

    try:
        codec.decode(text, codec.SyntaxOnlyContext())
        return True
    except Exception:  # noqa: BLE001 - DecodeError, and what the decoder lets through (json.loads of a string)
        return False


def test_reorder_star_only_after_the_tile_lines_it_derives_from(conv, engine, bpe):
    """`reorder *` right after the tile lines of the tiling is allowed (the real record); with a line between
    them (the decoder then finds no tile run to derive from: "`reorder *` follows the `tile` lines ...
    expected a `tiling` annotation") it is forbidden, and an explicit `reorder` of loops stays allowed."""
    wl, lines = conv
    at = lines.index("reorder *")
    head = "".join(line + "\n" for line in lines[:at])
    why, c = _walk(engine, wl, bpe, head + "reorder *\n")
    assert why is None and not c.dead, (why, c.error)
    # a line that applies and defines nothing the tiling uses, between the tile lines and `reorder *`
    broken = head + lines[1] + "\n"  # blk conv2d_nhwc
    assert _decodes(broken) and not _decodes(broken + "reorder *\n")
    why, c = _walk(engine, wl, bpe, broken)
    assert why is None and not c.dead, (why, c.error)
    why, c = _walk(engine, wl, bpe, broken + "reorder *\n")
    assert why is not None and "*" in why, why
    loops = [f"l{k}" for k in sorted(c.state.loops)][-2:]
    why, c = _walk(engine, wl, bpe, broken + "reorder " + " ".join(loops))
    assert why is None, why
    # no tiling annotation at all: the first line of a script
    why, _ = _walk(engine, wl, bpe, "reorder *\n")
    assert why is not None


def test_inside_a_tiling_a_loop_takes_the_level_count_of_its_iter_kind(conv, engine, bpe):
    """After the conv record's `ann b1 tiling "SSRSRS"` and `loops b1 7`: MetaSchedule's MultiLevelTiling splits a
    loop of data-parallel iters into the 4 S levels and one carrying a reduction iter into the 2 R levels; the
    other count is forbidden (a reduction loop tiled with the S count numbered every later loop off on the H200),
    and the record's own tile lines are allowed (every real record is, test_constrained)."""
    wl, lines = conv
    head = "".join(line + "\n" for line in lines[:6])
    why, c = _walk(engine, wl, bpe, head)
    assert why is None and not c.dead, (why, c.error)
    st = c.state
    kinds = {st.loop_iters[k] for k in st.loops}
    assert kinds == {"S", "R"}, st.loop_iters
    for k, extent in sorted(st.loops.items()):
        own, other = (4, 2) if st.loop_iters[k] == "S" else (2, 4)
        line = f"tile l{k} = " + " ".join([str(extent)] + ["1"] * (own - 1))
        why, _ = _walk(engine, wl, bpe, head + line)
        assert why is None, (line, why)
        line = f"tile l{k} = " + " ".join([str(extent)] + ["1"] * (other - 1))
        why, _ = _walk(engine, wl, bpe, head + line + "\n")
        assert why is not None, line


# (line the decoder rejects, the nearest line it reads), both after the conv record's first 6 lines
# (blk pad_temp / blk conv2d_nhwc / blk root / inline b0 / ann b1 tiling / loops b1 7: b1..b2 and l0..l6 live)
DECODER_CHECKS = {
    "identifiers run together: a block name and an option": ('blk conv2d_nhwcfn="main"', 'blk conv2d_nhwc fn="main"'),
    "identifiers run together: a variable and a value": ("pad b10", "pad b1 0"),
    "identifiers run together: list elements": ("ann b1 producer [b10]", "ann b1 producer [b1 0]"),
    "an attribute value is a literal": ("split l0 _ 1 pui=b1", "split l0 _ 1 pui=0"),
    "an attribute value is a literal (pad)": ("pad b1 b2", "pad b1 [1]"),
    "one integer decision": ("at b1 = 1 2", "at b1 = 1"),
    "one probability per candidate": ("cat 1 2 ~ 0.5 = 1", "cat 1 2 ~ 0.5 0.5 = 1"),
    "a known candidate list": ("cat unrol", "cat unroll"),
    "positive tile sizes": ("ptile l0 = 0 2", "ptile l0 = 1 2"),
    "ptile: as many sizes as n=": ("ptile l0 n=3 = 1 2", "ptile l0 n=2"),
    "a count within the output limit": ("kids l0 5000", "kids l0 1"),
    "a known tensor intrinsic": ("tensorize b1 $syn", "tensorize b1 $sync"),
    "a JSON string": ('ann b1 producer "a\\q"', 'ann b1 producer "a\\n"'),
}


@pytest.mark.parametrize("check", sorted(DECODER_CHECKS))
def test_lines_the_decoder_rejects_are_forbidden(conv, engine, bpe, check):
    wl, lines = conv
    head = "".join(line + "\n" for line in lines[:6])
    bad, good = DECODER_CHECKS[check]
    assert not _decodes(head + bad + "\n"), bad
    assert _decodes(head + good + "\n"), good
    why, c = _walk(engine, wl, bpe, head + bad + "\n")
    assert why is not None, (bad, c.error)
    why, c = _walk(engine, wl, bpe, head + good)  # the line without its end: TVM's verdict is not at stake
    assert why is None, (good, why)


def test_a_tile_limit_is_an_integer(conv, engine, bpe):
    """`tile l m=_ = ...` decodes, and TVM's SamplePerfectTile then crashes the process (SIGSEGV) on its None
    max innermost factor: the constraint lets only an integer follow `m=`."""
    wl, lines = conv
    head = "".join(line + "\n" for line in lines[:6])
    assert _decodes(head + "tile l6 m=_ = 1 16\n")
    why, _ = _walk(engine, wl, bpe, head + "tile l6 m=_ = 1 16\n")
    assert why is not None and "_" in why, why
    why, c = _walk(engine, wl, bpe, head + "tile l6 m=16 = 1 16\n")
    assert why is None and not c.dead, (why, c.error)


def test_post_star_written_without_its_space_is_the_derived_post(conv, engine, bpe):
    """`post*` is what the codec reads as `post *`: the constraint finishes there, it does not decode it as a
    line (the codec's line-by-line step refuses a derived `post *`)."""
    wl, lines = conv
    at = lines.index("post *")
    head = "".join(line + "\n" for line in lines[:at])
    assert _decodes(head + "post*\n")
    why, c = _walk(engine, wl, bpe, head + "post*\n")
    assert why is None and not c.dead and c.finished, (why, c.error)


# the decoder checks made when the line ends (their messages; results/constrained-decoding.md, "What the decoder
# checks"): the index maps' scoping, and an intrinsic inside a list (any `$name` there)
LINE_END_CHECKS = ("span reference", "in index map", "shared sub-expression", "unknown tensor intrinsic")


def test_random_walks_from_real_prefixes_end_on_no_decode_rejection(engine, bpe):
    """Uniform random walks over the allowed tokens (the least model-like sampler: it tries what a model
    rarely would), from every prefix length of the real llvm records, two lines each: no line the constraint
    allowed is refused by the codec's decoder, but for the checks made at the line end (the index maps' scoping,
    an intrinsic inside a list); apply errors — TVM's verdict at the line end — may happen too."""
    import torch

    from little_dragon.generation.constrained import (ConstraintStats, ScriptConstraint, Workload,
                                                      allocate_bitmask, unpack_bitmask)

    rng = random.Random(16)
    stats = ConstraintStats()
    recs = list(_records())
    walks = 0
    for name, mod, target, tj in recs:
        lines = _script(tj)
        for cut in range(0, len(lines), 3):
            c = ScriptConstraint(engine, Workload(mod, target), stats)
            for t in bpe("".join(line + "\n" for line in lines[:cut]), add_special_tokens=False)["input_ids"]:
                c.advance(t)
            assert not c.dead, (name, cut, c.error)
            bits = allocate_bitmask(1, engine.vocab_size)
            walks += 1
            for _ in range(80):
                c.fill_mask(bits, 0)
                if c.dead or c.done or c.n_insts >= cut + 2:
                    break
                allowed = unpack_bitmask(bits, engine.vocab_size)[0]
                allowed[engine.eos_id] = False
                ids = torch.nonzero(allowed).flatten().tolist()
                c.advance(rng.choice(ids) if ids else engine.eos_id)
    assert walks >= 20 and stats.lines >= walks, (walks, stats)
    decode = {r: n for r, n in stats.reasons.items() if r.startswith("decode")}
    # a walk may reach the checks left to the line end; every other decoder check is in the line grammar
    other = {r: n for r, n in decode.items() if not any(w in r for w in LINE_END_CHECKS)}
    assert not other, decode
