"""The two spellings of an IndexMap in trace JSON (database-indented, live-compact): one helper for both."""
from __future__ import annotations

import json

from little_dragon.codec.canonical import index_maps_indented, index_maps_parsed, is_index_map

GRAPH = {"root_index": 1, "nodes": [{"type": "None"}, {"type": "tirx.IndexMap", "data": {}}]}
COMPACT = json.dumps(GRAPH, separators=(",", ":"))
INDENTED = json.dumps(GRAPH, indent=2)


def test_both_spellings_are_index_maps_and_other_strings_are_not():
    assert is_index_map(COMPACT) and is_index_map(INDENTED)
    assert not is_index_map('{"nodes": []}') and not is_index_map("b0") and not is_index_map(3)


def test_parsed_makes_both_spellings_equal_and_leaves_the_rest():
    inst_db = ["TransformLayout", ["b0"], [0, 1, INDENTED, 1], []]
    inst_live = ["TransformLayout", ["b0"], [0, 1, COMPACT, 1], []]
    assert index_maps_parsed(inst_db) == index_maps_parsed(inst_live) == \
        ["TransformLayout", ["b0"], [0, 1, GRAPH, 1], []]
    assert index_maps_parsed('{"root_index": torn') == '{"root_index": torn'  # unreadable: stays text


def test_indented_writes_the_database_spelling():
    assert index_maps_indented([["A", [COMPACT], "x"]]) == [["A", [INDENTED], "x"]]
    assert index_maps_indented([INDENTED]) == [INDENTED]


def test_first_mismatch_and_first_difference():
    from little_dragon.codec.canonical import first_difference, first_mismatch

    assert first_mismatch([1, [2]], [1, [2]]) is None
    assert first_mismatch([1, 2], [1]) == (1, 2, None)
    assert first_mismatch([INDENTED], [COMPACT]) == (0, INDENTED, COMPACT)
    assert first_mismatch([INDENTED], [COMPACT], lambda a, b: index_maps_parsed(a) == index_maps_parsed(b)) is None
    a = [[["Split", [], [], []]], [[0, 1]]]
    assert first_difference(a, a) == ""
    assert first_difference(a, [[["Fuse", [], [], []]], [[0, 1]]]).startswith("instruction 0: expected [\"Split\"")
    assert first_difference(a, [a[0], [[0, 2]]]) == "decision 0: expected [0,1] got [0,2]"
