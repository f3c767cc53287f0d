"""``post *``: the post-processing section re-derived from workload + target, on real harvested records.

The short form must be exact (decode gives the record's JSON, re-encoding is byte-identical), used only
when re-derivation reproduces the record, refused without a context, and a script that does not fit the
workload fails with an ApplyError naming its line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dragon.codec import ApplyError, DecodeError, PostprocContext, apply, decode, encode
from little_dragon.codec.canonical import dumps
from little_dragon.codec.roundtrip import read_database

HERE = Path(__file__).parent
REAL_CUDA_DB = HERE / "data" / "real_cuda_db"
REAL_LLVM_DB = HERE / "data" / "real_llvm_db" / "w1ee5555dfd58d620"  # conv2d_nhwc: RewriteLayout in post


def _records(db: Path, limit: int = 3):
    out = []
    for _name, mod, records in read_database(db):
        out += [(mod, trace, target) for _n, trace, target in records[:limit]]
    return out


@pytest.mark.parametrize("db", [REAL_LLVM_DB, REAL_CUDA_DB], ids=["llvm", "cuda"])
def test_real_records_use_post_star_exactly(db):
    for mod, trace, target in _records(db):
        context = PostprocContext(mod, target)
        text = encode(trace, context)
        explicit = encode(trace)
        assert text.endswith("post *\n") and "\npost\n" in explicit
        assert len(text) < len(explicit)
        fresh = PostprocContext(mod, target)  # nothing cached from encoding
        back = decode(text, fresh)
        assert dumps(back) == dumps(trace)
        assert encode(back, fresh) == text
        # the explicit form needs no context and stays exact
        assert dumps(decode(explicit)) == dumps(trace)


def test_post_star_applies_like_tvms_own_trace():
    import tvm
    from tvm.s_tir import Schedule, Trace

    mod, trace, target = _records(REAL_LLVM_DB, 1)[0]
    context = PostprocContext(mod, target)
    text = encode(trace, context)
    ref = Schedule(mod, debug_mask=0)
    Trace.apply_json_to_schedule(trace, ref)
    new = apply(text, Schedule(mod, debug_mask=0), context)
    tvm.ir.assert_structural_equal(ref.mod, new.mod)


def test_a_post_section_the_postprocessors_do_not_reproduce_is_written_out():
    mod, trace, target = _records(REAL_LLVM_DB, 1)[0]
    tampered = json.loads(dumps(trace))
    last = len(tampered[0]) - 1
    assert tampered[0][last][0] != "EnterPostproc"
    del tampered[0][last]  # drop the post-processors' last instruction
    tampered[1] = [d for d in tampered[1] if d[0] < last]
    text = encode(tampered, PostprocContext(mod, target))
    assert "post *" not in text and "\npost\n" in text
    assert dumps(decode(text)) == dumps(tampered)


def test_post_star_needs_its_context():
    mod, trace, target = _records(REAL_LLVM_DB, 1)[0]
    text = encode(trace, PostprocContext(mod, target))
    with pytest.raises(DecodeError) as info:
        decode(text)
    assert info.value.line == len(text.splitlines()) and "workload and target" in str(info.value)


def test_post_star_on_the_wrong_workload_names_the_failing_line():
    """The script before `post *` does not fit the workload: ApplyError at the first failing instruction."""
    mod, trace, target = _records(REAL_LLVM_DB, 1)[0]
    text = encode(trace, PostprocContext(mod, target))
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("blk "))
    lines[i] = "blk no_such_block"
    with pytest.raises(ApplyError) as info:
        decode("\n".join(lines) + "\n", PostprocContext(mod, target))
    assert info.value.line == i + 1 and "no_such_block" in info.value.reason
