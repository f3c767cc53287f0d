"""Sweep the H200 harvest through finish_check (the working tree's), saving each call's lowered device modules (JSON,
/tmp/hB/devs/) and its bounds-rule time and findings (/tmp/hB/before_rows.pkl) for bench.py."""
import sys, json, time, collections, pickle
sys.path.insert(0, '/work/main/benchmarks'); sys.path.insert(0, '/tmp/hB')
import tvm
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker as sw
from little_dragon.tvmx.build import import_tensor_intrinsics
from end_check_lowering import harvest_kernels
import_tensor_intrinsics()
from pathlib import Path
folder = '/work/main/data/harvest/cuda-sm_90-6e5dd8/db'
valid = {}
for db in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
    i = 0
    for l in (db / 'database_tuning_record.json').read_text().splitlines():
        if l.strip():
            rs = json.loads(l)[1][1]; valid[f"{db.name} record {i}"] = bool(rs) and max(rs) < 1e9; i += 1
orig = sw.out_of_bounds_accesses
cur = {}
def wrapped(devices):
    t = time.perf_counter(); out = orig(devices); dt = time.perf_counter() - t
    cur['t'] = dt; cur['out'] = out
    cur['json'] = [tvm.ir.save_json(d) for d in devices]
    return out
sw.out_of_bounds_accesses = wrapped
rows = []; ctx = {}; t0 = time.time()
for n, (where, mod, target, text, what) in enumerate(harvest_kernels([folder]), 1):
    key = (id(mod), target)
    if key not in ctx: ctx[key] = PostprocContext(mod, target)
    cur.clear()
    v = sw.finish_check(mod, ctx[key], text)
    r = dict(where=where, valid=valid[where], verdict=v, oob_s=cur.get('t'), oob=cur.get('out'))
    if 'json' in cur:
        r['dev'] = f"/tmp/hB/devs/{len(rows)}.pkl"
        pickle.dump(cur['json'], open(r['dev'], 'wb'))
    rows.append(r)
    if n % 200 == 0: print('progress', n, round(time.time() - t0), flush=True)
pickle.dump(rows, open('/tmp/hB/before_rows.pkl', 'wb'))
c = collections.Counter((r['valid'], bool(r['verdict'])) for r in rows)
print('(valid, refused)', dict(c))
print('oob calls', sum(r['oob_s'] is not None for r in rows), 'wall', round(time.time() - t0))
