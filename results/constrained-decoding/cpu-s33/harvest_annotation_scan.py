"""Session 33: every Annotate, ComputeAt and ReverseComputeAt of MetaSchedule harvests (records.parquet files): where
each key goes (the root block, another block, a loop) on which target, which keys carry a sampled value (`ann .. cat`),
whether a block is annotated again with a key it carries, and how often one block is moved.

    .venv/bin/python results/constrained-decoding/cpu-s33/harvest_annotation_scan.py \\
        data/harvest/cuda-sm_90-6e5dd8/records.parquet data/harvest-t64/cuda-sm_90-6e5dd8/records.parquet \\
        <the pipeline's llvm harvest>/records.parquet
"""
import collections
import json
import sys

import pandas as pd

where = collections.defaultdict(collections.Counter)
sampled_keys, again, most_moves, n = collections.Counter(), collections.Counter(), 0, 0
for path in sys.argv[1:]:
    for _, row in pd.read_parquet(path).iterrows():
        insts = json.loads(row["trace_json"])[0]
        n += 1
        target = "gpu" if "cuda" in str(row["target"]) else "cpu"
        root, sampled, carried, moves = set(), set(), collections.defaultdict(set), collections.Counter()
        for kind, ins, attrs, outs in insts:
            if kind == "GetSBlock" and attrs and attrs[0] == "root":
                root.update(outs)
            elif kind == "SampleCategorical":
                sampled.update(outs)
            elif kind in ("ComputeAt", "ReverseComputeAt"):
                moves[ins[0]] += 1
            elif kind == "Annotate":
                obj, key = ins[0], attrs[0]
                place = "loop" if obj.startswith("l") else ("root" if obj in root else "block")
                where[key][(place, target)] += 1
                if len(ins) > 1 and isinstance(ins[1], str) and ins[1] in sampled:
                    sampled_keys[key] += 1
                if place != "loop" and key in carried[obj]:
                    again[key] += 1
                carried[obj].add(key)
        most_moves = max([most_moves, *moves.values()])
print(n, "traces")
for key, places in sorted(where.items()):
    print(key, dict(places))
print("sampled (ann .. cat):", dict(sampled_keys))
print("a block annotated again with a key it carries:", dict(again) or 0)
print("most moves of one block:", most_moves)
