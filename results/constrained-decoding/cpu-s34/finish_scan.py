"""The sealed run's verify errors (session 34, H100): how many lines back the longest prefix of each script lies that the
target's post-processors finish (the end check of `post *`), on this CPU.

    tar -xzf results/constrained-decoding/h100-s34/sealed-constrained/eval_sealed_cuda.tar.gz -C /tmp/sc
    python results/constrained-decoding/cpu-s34/finish_scan.py /tmp/sc/eval/attempts.parquet .devcarry/cudads/sealed
"""
import json, sys
import pandas as pd
from little_dragon.generation import constrained, schedule_worker
a = pd.read_parquet(sys.argv[1])
rows = [json.loads(l) for f in ('test.jsonl', 'heldout_families.jsonl') for l in open(f'{sys.argv[2]}/{f}')]
by = {}
for r in rows:
    by.setdefault(r['workload_id'], r)
for _, r in a[a.category == 'verify_error'].iterrows():
    row = by.get(r.workload_id)
    if row is None: print('no row', r.workload_id); continue
    w = constrained.workload_of_prompt(row['prompt'])
    lines = r.script.splitlines(keepends=True)
    found = None
    for n in range(len(lines), 0, -1):
        why = schedule_worker.finish_check(w.mod, w.post_context, ''.join(lines[:n]) + 'post *\n', w.key)
        if not why:
            found = n; break
    print(r.workload_id, r.task, 'lines', len(lines), 'longest finished prefix', found, 'back', len(lines) - (found or 0))
