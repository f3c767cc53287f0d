"""The H200 harvest (data/harvest/cuda-sm_90-6e5dd8, 1,219 records) through the end check, the bounds rule timed: each
call of ``out_of_bounds_accesses`` also runs session 26's version (``device_bounds_s26.py``) on the same lowered device
modules, alternating which runs first; findings compared.  Verdicts by the record's measurement (valid: a run time
below 1e9)."""
import collections, json, os, statistics, sys, time
from pathlib import Path

os.chdir('/work/main')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, '/work/main/benchmarks')
import device_bounds_s26 as old  # noqa: E402
from end_check_lowering import harvest_kernels  # noqa: E402
from little_dragon.codec import PostprocContext  # noqa: E402
from little_dragon.generation import device_bounds, schedule_worker as sw  # noqa: E402
from little_dragon.tvmx.build import import_tensor_intrinsics  # noqa: E402

import_tensor_intrinsics()
FOLDER = '/work/main/data/harvest/cuda-sm_90-6e5dd8/db'
new_oob, calls = sw.out_of_bounds_accesses, []


def both(devices):
    order = [('old', old.out_of_bounds_accesses), ('new', new_oob)]
    if len(calls) % 2:
        order.reverse()
    got = {}
    for name, f in order:
        t = time.perf_counter()
        got[name] = (f(devices), time.perf_counter() - t)
    calls.append(got)
    return got['new'][0]


sw.out_of_bounds_accesses = both
valid = {}
for db in sorted(p for p in Path(FOLDER).iterdir() if p.is_dir()):
    rs = [json.loads(l)[1][1] for l in (db / 'database_tuning_record.json').read_text().splitlines() if l.strip()]
    for i, r in enumerate(rs):
        valid[f"{db.name} record {i}"] = bool(r) and max(r) < 1e9
res = collections.Counter(); ctx = {}; t0 = time.time()
for where, mod, target, text, what in harvest_kernels([FOLDER]):
    key = (id(mod), target)
    if key not in ctx:
        ctx[key] = PostprocContext(mod, target)
    v = sw.finish_check(mod, ctx[key], text)
    res['valid' if valid[where] else 'failed', 'refused' if v else 'accepted'] += 1
    if v and valid[where]:
        print('VALID REFUSED', where, v[:200], flush=True)
for k, n in sorted(res.items()):
    print('(measured, end check)', k, n)
print('bounds calls', len(calls), 'findings differ', sum(c['old'][0] != c['new'][0] for c in calls),
      'refused old', sum(bool(c['old'][0]) for c in calls), 'new', sum(bool(c['new'][0]) for c in calls),
      'over budget', sum(device_bounds.OVER_BUDGET.values()))
for name in ('old', 'new'):
    t = sorted(c[name][1] for c in calls); n = len(t)
    print(name, f"mean {1e3 * statistics.mean(t):.1f} median {1e3 * statistics.median(t):.1f} "
                f"p99 {1e3 * t[int(0.99 * (n - 1))]:.0f} max {1e3 * t[-1]:.0f} ms")
print('wall', round(time.time() - t0))
