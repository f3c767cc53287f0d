import sys, json, glob, collections, time, os
import pandas as pd
os.chdir('/work/main')
from little_dragon.workloads.store import module_from_script
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker as sw
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
SM90 = '{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, "thread_warp_size": 32}'
w = pd.read_parquet('/work/main/.devcarry/cudads/sealed/workloads.parquet').set_index('workload_id')
files = sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'h200' in f)
DIAG, LAUNCH = sw.diagonal_thread_bindings, sw.launch_over_limits
res = collections.Counter(); flagged = []; missing = collections.Counter()
mods = {}; ctxs = {}; t0 = time.time(); seen = set()
for f in files:
    s = os.path.join(os.path.dirname(f), 'summary.json')
    target = json.load(open(s)).get('target') if os.path.exists(s) else None
    target = target or SM90
    if not isinstance(target, str): target = json.dumps(target)
    a = pd.read_parquet(f)
    for r in a.itertuples():
        if not isinstance(r.script, str) or not r.script.strip():
            continue
        if r.workload_id not in w.index:
            missing[f] += 1; continue
        key = (r.workload_id, target)
        if key not in ctxs:
            mods[key] = module_from_script(w.loc[r.workload_id, 'tvmscript'])
            ctxs[key] = PostprocContext(mods[key], target)
        lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
        if 'post' in kws: lines = lines[:kws.index('post')] + ['post *']
        text = '\n'.join(lines) + '\n'
        try:
            v = sw.finish_check(mods[key], ctxs[key], text)
        except Exception as e:
            v = 'EXC ' + repr(e)[:100]
        new = v.startswith('two thread loops') or v.startswith("launch over CUDA")
        old = v
        if new:
            sw.diagonal_thread_bindings = lambda sch: []; sw.launch_over_limits = lambda d: []
            try: old = sw.finish_check(mods[key], ctxs[key], text)
            finally: sw.diagonal_thread_bindings, sw.launch_over_limits = DIAG, LAUNCH
        kind = ('diagonal' if v.startswith('two') else 'launch') if new else ('refused' if v else 'accepted')
        res[f, r.method, r.category, kind] += 1
        if new: flagged.append((f, r.method, r.prompt_id, r.attempt, r.category, 'old=' + (old[:60] or 'ACCEPTED'), v[:230], (getattr(r, 'message', '') or '')[-120:]))
    print('done', f, round(time.time() - t0), flush=True)
for k, v in sorted(res.items()): print(k, v)
print('MISSING', dict(missing))
for x in flagged: print('FLAG', x)
