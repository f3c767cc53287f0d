"""Regressions from the real llvm harvest (2 cores): MetaSchedule's RewriteLayout post-processor on conv2d_nhwc
workloads adds a ``TransformLayout`` whose IndexMap carries its ``inverse_index_map`` (the map TVM uses to undo
the weight layout).  The codec refused every such record ("IndexMap with an inverse map is not supported":
32 records of two workloads); the inverse is now written after ``|`` and these tests keep it lossless."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dragon.codec import DecodeError, EncodeError, decode, encode
from little_dragon.codec.canonical import dumps

HERE = Path(__file__).parent
REAL_LLVM_DB = HERE / "data" / "real_llvm_db"  # two conv2d_nhwc workloads, 16 tuned records each
WORKLOADS = sorted(p.name for p in REAL_LLVM_DB.iterdir() if p.is_dir())


def _map_json(index_map) -> str:
    import tvm

    return json.dumps(json.loads(tvm.ir.save_json(index_map)), indent=2)


def _layout_trace(map_text: str) -> list:
    return [[["GetSBlock", [], ["C", "main"], ["b0"]],
             ["TransformLayout", ["b0", map_text], [0, 0, None, True], []]], []]


def _roundtrip(trace: list) -> str:
    text = encode(trace)
    back = decode(text)
    assert dumps(back) == dumps(trace)
    assert encode(back) == text
    return text


def _inverse_layouts(trace: list) -> list[str]:
    return [a for inst in trace[0] if inst[0] == "TransformLayout" for a in inst[1]
            if isinstance(a, str) and '"tirx.IndexMap"' in a and a.count('"tirx.IndexMap"') == 2]


def test_real_llvm_db_fixture_is_the_failing_case():
    assert WORKLOADS == ["w1ee5555dfd58d620", "wf642e378845d78a8"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_real_llvm_records_round_trip_structurally(workload):
    """All 16 records of a workload: exact JSON both ways, byte-identical re-encoding, and the decoded script
    applied to the conv2d_nhwc workload gives the same IRModule as TVM's own trace."""
    from little_dragon.codec.roundtrip import roundtrip_database

    results = roundtrip_database(REAL_LLVM_DB / workload, structural=True)
    assert len(results) == 16
    assert [r.error for r in results if not r.ok] == []
    for r in results:
        assert _inverse_layouts(r.trace_json), "the fixture lost its RewriteLayout maps"
        assert r.trace_str  # the structural check ran
        assert any(ln.startswith("layout") and "|" in ln for ln in r.text.splitlines())


def test_golden_rewrite_layout_map_is_forward_then_inverse():
    """The real map: weight (kh, kw, ci, co) -> (kh, kw, ci//4, ci%4, co) and back."""
    trace = json.loads((HERE / "golden" / "llvm_real_rewrite_layout_conv2d.json").read_text())
    assert _inverse_layouts(trace)
    text = _roundtrip(trace)
    assert "layout b9 r2 {i0,i1,i2,i3->i2//4,i2%4,i3|i0,i1,i2->0,0,i0*4+i1,i2} inj=false" in text.splitlines()


def test_inverse_built_by_tvm_round_trips():
    """An inverse computed by TVM itself (IndexMap.inverse), int64, with a shared sub-expression."""
    import tvm
    from tvm import tirx

    i, j = tirx.Var("i", "int64"), tirx.Var("j", "int64")
    q = i * 4 + j  # one object used twice: bound once as $0
    fwd = tirx.IndexMap([i, j], [q // 16, q % 16], None)
    inv = fwd.inverse([tvm.tirx.IntImm("int64", 8), tvm.tirx.IntImm("int64", 4)])
    text = _roundtrip(_layout_trace(_map_json(tirx.IndexMap([i, j], [q // 16, q % 16], inv))))
    line = text.splitlines()[1]
    assert line.startswith("layout b0 r0 {i,j;$0=i*4+j->$0//16,$0%16|") and line.endswith("}i64")


def test_inverse_with_its_own_shared_subexpression_and_free_variable():
    """The inverse is its own scope: its ``$0`` binding and indices are not the forward map's; a trace
    variable (free name) is one object in both parts."""
    from tvm import tirx

    i, k, t = tirx.Var("i", "int32"), tirx.Var("i", "int32"), tirx.Var("v2", "int32")
    kk = k * 2
    inv = tirx.IndexMap([k], [kk + kk, t], None)
    fwd = tirx.IndexMap([i], [i // t], inv)
    trace = [[["GetSBlock", [], ["C", "main"], ["b0"]],
              ["GetLoops", ["b0"], [], ["l1"]],
              ["SamplePerfectTile", ["l1"], [2, 16], ["v2", "v3"]],
              ["TransformLayout", ["b0", _map_json(fwd)], [0, 0, None, True], []]],
             [[2, [4, 4]]]]
    text = encode(trace)
    assert "{i->i//v0|i;$0=i*2->$0+$0,v0}" in text
    assert dumps(decode(text)) == dumps(trace) and encode(decode(text)) == text


def test_inverse_of_an_inverse_is_refused_not_dropped():
    from tvm import tirx

    i = tirx.Var("i", "int32")
    inner = tirx.IndexMap([tirx.Var("i", "int32")], [tirx.Var("i", "int32")], None)
    inv = tirx.IndexMap([tirx.Var("j", "int32")], [tirx.IntImm("int32", 0)], inner)
    with pytest.raises(EncodeError) as info:
        encode(_layout_trace(_map_json(tirx.IndexMap([i], [i], inv))))
    assert info.value.inst_index == 1 and "inverse" in str(info.value)


def test_inverse_uses_its_own_indices_only():
    """A name of the forward map's indices is undefined in the inverse: a DecodeError at the name."""
    with pytest.raises(DecodeError) as info:
        decode("blk C\nlayout b0 r0 {i,j->j,i|k->k,j}\n")
    e = info.value
    assert e.line == 2 and e.found == "j"
    with pytest.raises(DecodeError) as info:
        decode("blk C\nlayout b0 r0 {i->i|k->k|m->m}\n")
    assert info.value.line == 2
