"""Lossless and canonical on real traces: every sampled design-space trace, llvm, CUDA and tensor cores."""
from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_dragon.codec import canonical_json, decode, encode
from little_dragon.codec.canonical import dumps
from little_dragon.codec.corpus import target_dict
from little_dragon.codec.roundtrip import check_record

TENSOR_CORE_KINDS = {"ReIndex", "TransformLayout", "TransformBlockLayout", "Tensorize", "Blockize"}


def test_every_sampled_trace_round_trips_both_ways_and_applies(sampled):
    kinds = collections.Counter()
    for s in sampled:
        trace_json = canonical_json(s.trace.as_json())
        kinds.update(i[0] for i in trace_json[0])
        r = check_record(trace_json, s.mod, s.workload, s.seed, target=target_dict(s.target))
        assert r.ok, f"{s.workload}/{s.target} space {s.space} seed {s.seed}: {r.error}"
        if s.postproc_ok:  # what the post-processors did is re-derived: `post *` is the last line
            assert r.text_post.endswith("post *\n"), f"{s.workload}/{s.target} space {s.space} seed {s.seed}"
        assert dumps(decode(r.text)) == dumps(trace_json)
    # the corpus really covers the kinds the issue names
    for kind in TENSOR_CORE_KINDS | {"CacheRead", "CacheWrite", "ComputeAt", "Bind", "Annotate",
                                     "DecomposeReduction", "SamplePerfectTile", "SampleCategorical",
                                     "SampleComputeLocation", "EnterPostproc", "RFactor"}:
        assert kinds[kind] > 0, f"no {kind} in the sampled corpus"


def test_tensor_core_script_is_compact_and_readable(sampled):
    s = next(x for x in sampled if x.workload == "matmul_fp16_tc_128")
    trace_json = canonical_json(s.trace.as_json())
    text = encode(trace_json)
    assert "tensorize" in text and "layout" in text and "{" in text
    assert len(text) * 4 < len(dumps(trace_json))  # index maps as lambdas, not JSON graphs
    lines = text.splitlines()
    folded = sum(ln.startswith("tile ") or (ln.startswith("at ") and "=" in ln) or " cat " in ln for ln in lines)
    assert folded and len(lines) == len(trace_json[0]) - folded  # one instruction (or folded pair) per line


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_fresh_samples_round_trip(design_spaces, data):
    """Hypothesis picks a design space and a seed; the sampled, post-processed trace must round-trip."""
    key = data.draw(st.sampled_from(sorted(design_spaces)))
    spaces = design_spaces[key]
    space = data.draw(st.integers(0, len(spaces.spaces) - 1))
    seed = data.draw(st.integers(0, 2**20))
    s = spaces.sample(space, seed)
    r = check_record(canonical_json(s.trace.as_json()), s.mod, s.workload, seed, target=target_dict(key[1]))
    assert r.ok, f"{key} space {space} seed {seed}: {r.error}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_arbitrary_decisions_and_annotation_values_round_trip(sampled, data):
    """Decisions and annotation values the search never produced still encode losslessly."""
    s = data.draw(st.sampled_from(sampled))
    insts, decisions = canonical_json(s.trace.as_json())
    new_decisions = []
    for idx, dec in decisions:
        if isinstance(dec, list):
            dec = data.draw(st.lists(st.integers(1, 4096), min_size=len(dec), max_size=len(dec)))
        elif insts[idx][0] == "SampleCategorical":
            dec = data.draw(st.integers(0, len(insts[idx][2][0]) - 1))
        else:
            dec = data.draw(st.integers(-2, 64))
        new_decisions.append([idx, dec])
    scalar = st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                       st.text(max_size=12).map(lambda t: f'"{t}"'))
    ann_value = st.one_of(scalar, st.lists(st.integers(-5, 5), max_size=4))
    insts = [list(i) for i in insts]
    for i, inst in enumerate(insts):
        if inst[0] == "Annotate" and data.draw(st.booleans()):
            insts[i] = [inst[0], [inst[1][0], data.draw(ann_value)], [data.draw(st.sampled_from(
                ["meta_schedule.x", "pragma_unroll", "weird key!", "meta_schedule.a.b"]))], inst[3]]
    trace_json = [insts, new_decisions]
    text = encode(trace_json)
    back = decode(text)
    assert dumps(back) == dumps(trace_json)
    assert encode(back) == text


def test_categorical_with_non_uniform_probabilities_round_trips():
    trace_json = [[["SampleCategorical", [], [[1, 2, 3], [0.2, 0.3, 0.5]], ["v0"]],
                   ["GetSBlock", [], ["root", "main"], ["b1"]],
                   ["Annotate", ["b1", "v0"], ["meta_schedule.unroll_explicit"], []]], [[0, 2]]]
    text = encode(trace_json)
    assert text.splitlines()[0] == "cat 1 2 3 ~ 0.2 0.3 0.5 = 2"
    assert dumps(decode(text)) == dumps(trace_json)


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_json_database_round_trip(json_database, target):
    from little_dragon.codec.roundtrip import roundtrip_database
    from little_dragon.codec.validate import database_dirs

    dirs = database_dirs(json_database / target)
    assert dirs
    results = [r for d in dirs for r in roundtrip_database(d)]
    assert results and all(r.ok for r in results), [r.error for r in results if not r.ok][:3]


def test_folds_and_derived_lines_only_when_exact():
    """A pair that is not exactly MetaSchedule's stays two lines, a reorder that is not the tiling order is
    written out, a key spelled like a table word is quoted, and all of it round-trips."""
    import json
    from pathlib import Path

    golden = Path(__file__).parent / "golden"
    base = json.loads((golden / "llvm_matmul_tuned_record.json").read_text())
    text = encode(base)
    assert "tile l0 = 4 16 1 1" in text and "reorder *" in text and "ann b1 unroll cat unroll = 0" in text

    insts = json.loads(dumps(base))
    split = next(i for i in insts[0] if i[0] == "Split")
    split[2] = [0, 0]  # preserve_unit_iters off: not the pair tiling writes
    reorder = next(i for i in insts[0] if i[0] == "Reorder")
    reorder[1][0], reorder[1][1] = reorder[1][1], reorder[1][0]
    ann = next(i for i in insts[0] if i[0] == "Annotate" and i[1][1] == "v25")
    ann[2] = ["unroll"]  # a key that is literally a table word
    text = encode(insts)
    lines = text.splitlines()
    assert "ptile l0 = 4 16 1 1" in lines and "split l0 v0 v1 v2 v3 pui=0" in lines
    assert "reorder *" not in text and any(ln.startswith("reorder l") for ln in lines)
    assert 'ann b1 "unroll" cat unroll = 0' in lines
    assert dumps(decode(text)) == dumps(insts) and encode(decode(text)) == text
