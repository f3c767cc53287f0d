"""Session 44: the verdicts of the H200 harvest records that write a software pipeline, token by token with 36a28ea's
rules ([pipeline body] on; `harvest_tokens_36a28ea/`, the bench run with `--skip-done not_pipelined.jsonl`, two
shards), against a14e334's run over all 1,219 records (session 41).  Output: `harvest_tokens_36a28ea/summary.txt`."""
import collections
import glob
import json

base = {}
for f in glob.glob("results/constrained-decoding/cpu-s41/harvest_tokens_a14e334/*.jsonl"):
    for line in open(f):
        if line.strip():
            r = json.loads(line)
            base[(r["db"], r["record"])] = r
new = [json.loads(line) for f in sorted(glob.glob("results/constrained-decoding/cpu-s44/harvest_tokens_36a28ea/h44_*.jsonl"))
       for line in open(f) if line.strip()]
c = collections.Counter()
diffs = []
for r in new:
    b = base.get((r["db"], r["record"]))
    if b is None:
        c["no base"] += 1
        continue
    c["same" if b["ok"] == r["ok"] else "DIFF"] += 1
    if b["ok"] != r["ok"]:
        diffs.append((r, b["why"]))
print(len(new), dict(c), sum(r["ok"] for r in new), "accepted,", round(sum(r["s"] for r in new)), "record-seconds")
for r, w in diffs:
    print(r, "| base:", w)
