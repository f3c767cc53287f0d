"""The launch-scope rule on every H200 sealed attempt (every method) and every H200 harvest record: decode, apply and
post-process each script as the end check does, then ``reads_outside_launch_scope`` on the scheduled kernel.
Run from the repository root: python results/constrained-decoding/cpu-s27/launch_scopes/sweep.py"""
import collections, glob, json, os, sys, time
from pathlib import Path
import pandas as pd
sys.path.insert(0, 'benchmarks')
from end_check_lowering import harvest_kernels
from little_dragon.codec import PostprocContext
from little_dragon.codec.validity import check_module_script
from little_dragon.generation.launch_scopes import reads_outside_launch_scope
from little_dragon.tvmx.build import import_tensor_intrinsics
from little_dragon.tvmx.schedule import fresh_schedule
from little_dragon.workloads.store import module_from_script
import_tensor_intrinsics()
SM90 = '{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, "thread_warp_size": 32}'
res = collections.Counter(); t0 = time.time(); ctxs = {}; times = []


def rule(mod, ctx, text):
    sch = fresh_schedule(mod)
    if not check_module_script(text, mod, ctx, schedule=sch).valid:
        return None  # refused before this rule
    t = time.perf_counter()
    found = reads_outside_launch_scope(sch)
    times.append(time.perf_counter() - t)
    return found


w = pd.read_parquet('.devcarry/cudads/sealed/workloads.parquet').set_index('workload_id')
mods = {}
for f in sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'h200' in f):
    s = os.path.join(os.path.dirname(f), 'summary.json')
    target = (json.load(open(s)).get('target') if os.path.exists(s) else None) or SM90
    target = target if isinstance(target, str) else json.dumps(target)
    for r in pd.read_parquet(f).itertuples():
        if not isinstance(r.script, str) or not r.script.strip() or r.workload_id not in w.index:
            continue
        key = (r.workload_id, target)
        if key not in ctxs:
            mods[key] = module_from_script(w.loc[r.workload_id, 'tvmscript']); ctxs[key] = PostprocContext(mods[key], target)
        lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
        if 'post' in kws:
            lines = lines[:kws.index('post')] + ['post *']
        found = rule(mods[key], ctxs[key], '\n'.join(lines) + '\n')
        verdict = 'earlier refusal' if found is None else ('REFUSED' if found else 'accepted')
        res['attempts', r.method, r.category, verdict] += 1
        if found:
            print('FLAG', f, r.method, r.prompt_id, r.attempt, r.category, found, flush=True)
print('attempts done', round(time.time() - t0), flush=True)
valid = {}
for db in sorted(p for p in Path('data/harvest/cuda-sm_90-6e5dd8/db').iterdir() if p.is_dir()):
    for i, l in enumerate(x for x in (db / 'database_tuning_record.json').read_text().splitlines() if x.strip()):
        rs = json.loads(l)[1][1]; valid[f'{db.name} record {i}'] = bool(rs) and max(rs) < 1e9
for where, mod, target, text, _ in harvest_kernels(['data/harvest/cuda-sm_90-6e5dd8/db']):
    key = (id(mod), target)
    if key not in ctxs:
        ctxs[key] = PostprocContext(mod, target)
    found = rule(mod, ctxs[key], text)
    verdict = 'earlier refusal' if found is None else ('REFUSED' if found else 'accepted')
    res['harvest', 'measured' if valid.get(where) else 'failed', verdict] += 1
    if found:
        print('FLAG harvest', where, valid.get(where), found, flush=True)
for k, n in sorted(res.items()):
    print(k, n)
times.sort()
print('rule runs', len(times), 'mean ms', round(1e3 * sum(times) / len(times), 2), 'max ms', round(1e3 * times[-1], 1),
      'wall', round(time.time() - t0))
