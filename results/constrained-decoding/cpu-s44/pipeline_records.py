"""Session 44: which H200 harvest records write a software pipeline (an `ann l.. stage` line in the form the model
writes), so that [pipeline body] (36a28ea) is checked token by token on them: the rule changes the mask of a loop's
pipeline keys only, and a harvested script writes no other loop key (RewriteParallelVectorizeUnroll's loop pragmas are
post-processing, `post *`).  Writes `not_pipelined.jsonl`, the other records in the form of a ``--progress`` file, for
``constrained_bench.py --harvest ... --skip-done`` (they are left out, not checked), and prints the counts.  From the
repository root with data/ pulled:
    .venv/bin/python results/constrained-decoding/cpu-s44/pipeline_records.py
    .venv/bin/python benchmarks/constrained_bench.py --harvest data/harvest/cuda-sm_90-6e5dd8 --tokenizer gguf \\
        --skip-done results/constrained-decoding/cpu-s44/not_pipelined.jsonl --shard 0/2 --progress h44_0.jsonl
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
from constrained_bench import _db_dirs  # noqa: E402  the bench's own record order and database folders

from little_dragon.codec import encode  # noqa: E402
from little_dragon.codec.roundtrip import read_database  # noqa: E402

OUT = Path(__file__).with_name("not_pipelined.jsonl")
piped = other = 0
with OUT.open("w") as f:
    for db in _db_dirs(["data/harvest/cuda-sm_90-6e5dd8"]):
        for name, _mod, recs in read_database(db):
            for idx, trace_json, _target in recs:
                lines = encode(trace_json).splitlines()
                if any(ln.startswith("ann l") and ln.split()[2] == "stage" for ln in lines):
                    piped += 1
                else:
                    other += 1
                    f.write(json.dumps({"db": str(db), "workload": name, "record": idx, "ok": None,
                                        "why": "not checked: no software pipeline"}) + "\n")
print(f"{piped} records write a software pipeline, {other} do not ({OUT})")
