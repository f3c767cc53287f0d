import json, glob, collections
base = {}
for f in glob.glob("results/constrained-decoding/cpu-s37/harvest_tokens_d6ddb22/*.jsonl"):
    for l in open(f):
        r = json.loads(l); base[(r["db"], r["record"])] = r
new = [json.loads(l) for f in glob.glob("results/constrained-decoding/cpu-s38/harvest_tokens_9922964/h38_*.jsonl") for l in open(f) if l.strip()]
c = collections.Counter(); diffs = []
for r in new:
    b = base.get((r["db"], r["record"]))
    if b is None: c["no base"] += 1; continue
    c["same" if b["ok"] == r["ok"] else "DIFF"] += 1
    if b["ok"] != r["ok"]: diffs.append((r, b["why"]))
print(len(new), dict(c), sum(r["ok"] for r in new), "accepted")
for r, w in diffs[:5]: print(r, "| base:", w)
