"""Session 39: the verdicts of a token-by-token harvest check (``constrained_bench.py --harvest --progress``) against
session 38's (9922964), record by record.  From the repository root:
    .venv/bin/python results/constrained-decoding/cpu-s39/harvest_compare.py \
        "results/constrained-decoding/cpu-s39/harvest_tokens_ea3ffbf/h39_*.jsonl"
"""
import json, glob, collections, sys
base = {}
for f in glob.glob("results/constrained-decoding/cpu-s38/harvest_tokens_9922964/*.jsonl"):
    for l in open(f):
        if l.strip():
            r = json.loads(l); base[(r["db"].split("/db/")[-1], r["record"])] = r
new = [json.loads(l) for f in glob.glob(sys.argv[1]) for l in open(f) if l.strip()]
c = collections.Counter(); diffs = []
for r in new:
    b = base.get((r["db"].split("/db/")[-1], r["record"]))
    if b is None: c["no base"] += 1; continue
    c["same" if b["ok"] == r["ok"] else "DIFF"] += 1
    if b["ok"] != r["ok"]: diffs.append((r, b["why"]))
print(len(new), dict(c), sum(r["ok"] for r in new), "accepted")
for r, w in diffs[:5]: print(r, "| base:", w)
