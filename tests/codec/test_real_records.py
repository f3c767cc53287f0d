"""Regressions from the real CUDA harvest (H200, sm_90): workloads parsed from TVMScript keep source spans on
the block iteration variables, and MetaSchedule's tensor-core layout maps (TransformLayout,
TransformBlockLayout) reuse those variables, so the serialized IndexMaps hold ``ir.Span`` nodes.  The codec
failed on every such record ("IndexMap cannot be reproduced exactly"); these tests keep them lossless."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dragon.codec import DecodeError, EncodeError, decode, encode
from little_dragon.codec.canonical import dumps

HERE = Path(__file__).parent
REAL_DB = HERE / "data" / "real_cuda_db"  # one tuned record each of a fp16 tensor-core matmul and conv2d


def _map_json(index_map) -> str:
    """An IndexMap as a database stores it in a trace (TVM's JSON graph, indented)."""
    import tvm

    return json.dumps(json.loads(tvm.ir.save_json(index_map)), indent=2)


def _layout_trace(map_text: str) -> list:
    return [[["GetSBlock", [], ["C", "main"], ["b0"]],
             ["TransformLayout", ["b0", map_text], [0, 0, None, True], []]], []]


def _span(line=17, col=21, end_line=17, end_col=56, source="<str>"):
    import tvm

    return tvm.ir.Span(tvm.ir.SourceName(source), line, end_line, col, end_col)


def _roundtrip(trace: list) -> str:
    text = encode(trace)
    back = decode(text)
    assert dumps(back) == dumps(trace)
    assert encode(back) == text
    return text


def test_real_cuda_records_round_trip_structurally():
    """Both real records: exact JSON both ways, byte-identical re-encoding, and the decoded script applied to
    the workload gives the same IRModule as TVM's own trace (tensor cores: Tensorize included)."""
    from little_dragon.codec.roundtrip import roundtrip_database

    results = roundtrip_database(REAL_DB, structural=True)
    assert len(results) == 2
    assert [r.error for r in results if not r.ok] == []
    for r in results:
        kinds = {inst[0] for inst in r.trace_json[0]}
        assert {"TransformLayout", "TransformBlockLayout", "Tensorize"} <= kinds
        assert r.trace_str  # the structural check ran
        # the spans of the tensor-core layout maps are in the script, not dropped
        assert "@" in r.text and any("layout" in line and "@0" in line for line in r.text.splitlines())


def test_real_record_spans_are_what_tvm_stored():
    """The notation carries the exact span of the database record (line, columns, shared object)."""
    trace = json.loads((HERE / "golden" / "cuda_real_tc_matmul.json").read_text())
    text = _roundtrip(trace)
    line = next(ln for ln in text.splitlines() if ln.startswith("blayout") and "@0" in ln)
    inst = next(i for i in trace[0] if i[0] == "TransformBlockLayout")
    graph = json.loads(next(a for a in inst[1] + inst[2] if isinstance(a, str) and "tirx.IndexMap" in a))
    span = next(n["data"] for n in graph["nodes"] if n["type"] == "ir.Span")
    assert f"@{span['line']}:{span['column']}-{span['end_column']}" in line


def test_shared_span_and_index_without_span():
    from tvm import tirx

    s = _span()
    i, j, k = tirx.Var("v_i", "int32", span=s), tirx.Var("v_j", "int32", span=s), tirx.Var("v_k", "int32")
    text = _roundtrip(_layout_trace(_map_json(tirx.IndexMap([i, j, k], [i * 16 + j, k], None))))
    assert "{v_i@17:21-56,v_j@0,v_k->v_i*16+v_j,v_k}" in text


def test_equal_spans_that_are_distinct_objects_stay_distinct():
    """Two Span objects with equal content are two graph nodes: the script writes the span twice."""
    from tvm import tirx

    i, j = tirx.Var("v_i", "int32", span=_span()), tirx.Var("v_j", "int32", span=_span())
    text = _roundtrip(_layout_trace(_map_json(tirx.IndexMap([i, j], [j, i], None))))
    assert "{v_i@17:21-56,v_j@17:21-56->v_j,v_i}" in text


def test_multi_line_span_source_name_and_interleaved_spans():
    from tvm import tirx

    a, b = _span(3, 4, 5, 6, "model.py"), _span(9, 1, 9, 30)
    i, j, k = (tirx.Var("i", "int64", span=a), tirx.Var("j", "int64", span=b), tirx.Var("k", "int64", span=a))
    text = _roundtrip(_layout_trace(_map_json(tirx.IndexMap([i, j, k], [i // 16, j, k % 16], None))))
    assert '{i@3:4-5:6"model.py",j@9:1-30,k@0->i//16,j,k%16}i64' in text


def test_span_on_an_expression_is_refused_not_dropped():
    from tvm import tirx

    i = tirx.Var("i", "int32")
    body = tirx.Add(i, tirx.IntImm("int32", 1), _span())
    with pytest.raises(EncodeError) as info:
        encode(_layout_trace(_map_json(tirx.IndexMap([i], [body], None))))
    assert info.value.inst_index == 1 and "span" in str(info.value)


def test_undefined_span_reference_is_a_decode_error():
    with pytest.raises(DecodeError) as info:
        decode("blk C\nlayout b0 r0 {v_i@17:21-56,v_j@1->v_i,v_j}\n")
    e = info.value
    assert e.line == 2 and e.found == "@1" and "@0" in e.expected
    with pytest.raises(DecodeError) as info:
        decode("blk C\nlayout b0 r0 {v_i@0->v_i}\n")
    assert info.value.line == 2 and "span" in info.value.expected
