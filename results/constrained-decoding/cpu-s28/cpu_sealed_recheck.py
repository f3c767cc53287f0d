import sys, json, glob, collections, time, os
import pandas as pd
os.chdir('/work/main')
from little_dragon.workloads.store import module_from_script
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker as sw
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
SM90 = '{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, "thread_warp_size": 32}'
w = pd.read_parquet('/tmp/pipe/artifacts/sealed/workloads.parquet').set_index('workload_id')
files = sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'sealed-cpu-s2' in f and 'free-' not in f)
res = collections.Counter(); t0 = time.time(); ctxs = {}; mods = {}; times = []
for f in files:
    s = os.path.join(os.path.dirname(f), 'summary.json')
    target = (json.load(open(s)).get('target') if os.path.exists(s) else None) or SM90
    if not isinstance(target, str): target = json.dumps(target)
    a = pd.read_parquet(f)
    for r in a.itertuples():
        if not isinstance(r.script, str) or not r.script.strip() or r.workload_id not in w.index: continue
        key = (r.workload_id, target)
        if key not in ctxs:
            mods[key] = module_from_script(w.loc[r.workload_id, 'tvmscript']); ctxs[key] = PostprocContext(mods[key], target)
        lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
        if 'post' in kws: lines = lines[:kws.index('post')] + ['post *']
        t = time.perf_counter()
        try: v = sw.finish_check(mods[key], ctxs[key], '\n'.join(lines) + '\n')
        except Exception as e: v = 'EXC ' + repr(e)[:100]
        times.append(time.perf_counter() - t)
        res[r.method, r.category, 'refused' if v else 'accepted'] += 1
        if v and (r.category == 'correct' or v.startswith(('on-chip', 'two thread', 'launch over', 'device kernel allocates', 'reduction without', 'update repeated', 'access outside', 'vector stored'))):
            print('FLAG', f, r.method, r.prompt_id, r.attempt, r.category, v[:220].replace('\n', ' '), flush=True)
for k, n in sorted(res.items()): print(k, n)
import statistics
print('end checks', len(times), 'mean ms', round(1000 * statistics.mean(times), 1), 'median ms', round(1000 * statistics.median(times), 1), 'max ms', round(1000 * max(times)), 'wall', round(time.time() - t0))
