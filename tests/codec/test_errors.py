"""Corrupted scripts and unsupported traces give clear errors: line, column, expected, found."""
from __future__ import annotations

from pathlib import Path

import pytest

from little_dragon.codec import ApplyError, CodecError, DecodeError, EncodeError, apply, canonical_json, decode, encode

GOLDEN = Path(__file__).parent / "golden"
SCRIPT = (GOLDEN / "llvm_matmul_tuned_record.script").read_text()
LINES = SCRIPT.splitlines()


def _decode_error(text: str) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(text)
    e = info.value
    assert isinstance(e, CodecError) and e.line >= 1 and e.column >= 1 and e.expected and e.found
    return e


def _with_line(i: int, new: str) -> str:
    return "\n".join(LINES[:i] + [new] + LINES[i + 1:]) + "\n"


def test_truncated_line():
    i = LINES.index("fuse l13 l14 l15")
    e = _decode_error(_with_line(i, "fuse"))
    assert e.line == i + 1 and "end of line" in e.found and "l<N>" in e.expected
    j = LINES.index("tile l0 = 4 16 1 1")
    e = _decode_error(_with_line(j, "tile l0"))  # a folded tile always has its decision
    assert e.line == j + 1 and "end of line" in e.found


def test_truncated_script_mid_index_map():
    e = _decode_error("blk C\nlayout b0 r0 {i,j->i//16")
    assert e.line == 2 and ("}" in e.expected or "end" in e.found)


def test_wrong_arity():
    i = LINES.index("decomp b4 l27")
    e = _decode_error(_with_line(i, "decomp b4"))
    assert e.line == i + 1 and "loop variable" in e.expected
    e = _decode_error(_with_line(i, "decomp b4 l27 l3"))
    assert e.line == i + 1 and e.found == "'l3'"


def test_undefined_variable():
    i = LINES.index("decomp b4 l27")
    e = _decode_error(_with_line(i, "decomp b9 l27"))
    assert e.line == i + 1 and e.column == len("decomp ") + 1 and e.found == "b9" and "b0..b4" in e.expected


def test_wrong_variable_type():
    e = _decode_error("blk C\nloops b0 3\nvec b0\n")
    assert e.line == 3 and "loop variable" in e.expected and "b0" in e.found


def test_bad_decisions():
    i = LINES.index("ann b1 unroll cat unroll = 0")
    e = _decode_error(_with_line(i, "ann b1 unroll cat unroll = 7"))
    assert e.line == i + 1 and "0..3" in e.expected and e.found == "7"
    e = _decode_error(_with_line(i, "ann b1 unroll cat 0 16 64 512 = 4"))
    assert e.line == i + 1 and "0..3" in e.expected and e.found == "4"
    e = _decode_error(_with_line(i, "ann b1 unroll cat unrol = 0"))
    assert e.line == i + 1 and "unroll" in e.expected and e.found == "unrol"
    e = _decode_error(_with_line(i, "ann b1 unroll cat unroll"))  # a folded cat always has its decision
    assert e.line == i + 1 and "end of line" in e.found
    j = LINES.index("tile l0 = 4 16 1 1")
    e = _decode_error(_with_line(j, "ptile l0 n=4 = 4 16 1"))
    assert e.line == j + 1 and "4 positive tile sizes" in e.expected
    e = _decode_error(_with_line(j, "tile l0 = 4 0 16 1"))
    assert "positive" in e.expected


def test_reorder_star_needs_a_tiling_right_before():
    i = LINES.index("reorder *")
    e = _decode_error(_with_line(i - 1, "split l2 _ 1"))  # the last tile line is no tile line any more
    assert e.line == i + 1 and "tile" in e.expected and e.found == "reorder *"
    e = _decode_error("blk C\nloops b0 2\nreorder *\n")
    assert e.line == 3 and "tiling" in e.expected


def test_unknown_intrinsic():
    e = _decode_error("blk C\ntensorize b0 $frobnicate\n")
    assert e.line == 2 and e.found == "$frobnicate" and "$sync" in e.expected


def test_derived_post_needs_a_context_and_ends_the_script():
    i = LINES.index("post")
    derived = "\n".join(LINES[:i] + ["post *"]) + "\n"
    e = _decode_error(derived)
    assert e.line == i + 1 and "workload and target" in str(e)
    e = _decode_error(derived + "blk C\n")
    assert e.line == i + 2 and "end of script" in e.expected


def test_unknown_mnemonic():
    e = _decode_error("blk C\nfrobnicate b0\n")
    assert e.line == 2 and e.column == 1 and "mnemonic" in e.expected and "frobnicate" in e.found


def test_decoder_never_evaluates_python():
    e = _decode_error('blk C\n__import__("os").system("true")\n')
    assert e.line == 2


def test_encode_rejects_unknown_kind_and_attribute():
    with pytest.raises(EncodeError, match="unknown instruction kind 'Frobnicate'"):
        encode([[["Frobnicate", [], [], []]], []])
    with pytest.raises(EncodeError, match="unknown attribute"):
        encode([[["GetSBlock", [], ["C", "main", "extra"], ["b0"]]], []])
    with pytest.raises(EncodeError, match="canonical name"):
        encode([[["GetSBlock", [], ["C", "main"], ["b7"]]], []])
    with pytest.raises(EncodeError, match="not a variable defined earlier"):
        encode([[["GetLoops", ["b3"], [], ["l0"]]], []])


def test_apply_error_names_instruction_line_and_reason(sampled):
    """A script that decodes but does not fit the workload: a block name that does not exist, mid-script."""
    from tvm.s_tir import Schedule

    s = next(x for x in sampled if x.workload == "matmul_64" and x.target == "llvm")
    lines = encode(canonical_json(s.trace.as_json())).splitlines()
    i = len(lines) - 1 - lines[::-1].index("blk C")
    lines[i] = "blk no_such_block"
    with pytest.raises(ApplyError) as info:
        apply("\n".join(lines) + "\n", Schedule(s.mod))
    e = info.value
    assert e.line == i + 1 and e.instruction == "blk no_such_block" and "no_such_block" in e.reason
    assert f"line {i + 1}" in str(e)


def test_apply_to_the_wrong_workload(sampled):
    from tvm.s_tir import Schedule

    s = next(x for x in sampled if x.workload == "softmax_64x128")
    other = next(x for x in sampled if x.workload == "matmul_64")
    text = encode(canonical_json(s.trace.as_json()))
    with pytest.raises(ApplyError) as info:
        apply(text, Schedule(other.mod))
    assert info.value.line == 1 and "blk" in info.value.instruction


def test_absurd_output_count_is_a_decode_error_not_an_allocation():
    # a fuzz mutant once made the decoder build a 4e20-element output list (21 GB before it was killed)
    i = next(k for k, line in enumerate(LINES) if line.startswith("loops "))
    e = _decode_error(_with_line(i, LINES[i].split()[0] + " " + LINES[i].split()[1] + " 399999999999999999999"))
    assert e.line == i + 1 and "outputs" in str(e)
