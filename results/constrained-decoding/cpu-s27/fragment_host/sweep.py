"""The untensorized-fragment rule before (any fragment touched element by element) and after (only where a kernel
allocates the fragment) on every H200 attempt whose post-processed kernel ``fragment_elements`` names: the full end
check's verdict now, by the judge's category.  Run from the repository root."""
import collections, glob, json, os
import pandas as pd
from little_dragon.codec import PostprocContext
from little_dragon.codec.validity import check_module_script
from little_dragon.generation import schedule_worker as sw
from little_dragon.generation.constrain_state import fragment_elements
from little_dragon.tvmx.build import import_tensor_intrinsics
from little_dragon.tvmx.schedule import fresh_schedule
from little_dragon.workloads.store import module_from_script
import_tensor_intrinsics()
SM90 = '{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, "thread_warp_size": 32}'
w = pd.read_parquet('.devcarry/cudads/sealed/workloads.parquet').set_index('workload_id')
ctxs, mods, res, seen = {}, {}, collections.Counter(), {}
for f in sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'h200' in f):
    s = os.path.join(os.path.dirname(f), 'summary.json')
    target = (json.load(open(s)).get('target') if os.path.exists(s) else None) or SM90
    target = target if isinstance(target, str) else json.dumps(target)
    for r in pd.read_parquet(f).itertuples():
        if not isinstance(r.script, str) or 'wmma' not in r.script or r.workload_id not in w.index:
            continue
        key = (r.workload_id, target)
        if key not in ctxs:
            mods[key] = module_from_script(w.loc[r.workload_id, 'tvmscript']); ctxs[key] = PostprocContext(mods[key], target)
        lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
        if 'post' in kws:
            lines = lines[:kws.index('post')] + ['post *']
        text = '\n'.join(lines) + '\n'
        if (key, text) not in seen:
            sch = fresh_schedule(mods[key])
            named = check_module_script(text, mods[key], ctxs[key], schedule=sch).valid and bool(fragment_elements(sch))
            seen[key, text] = (named, sw.finish_check(mods[key], ctxs[key], text) if named else None)
        named, now = seen[key, text]
        if named:
            verdict = 'still refused (fragment)' if now.startswith('untensorized') else ('refused: ' + now.split(':')[0] if now else 'ACCEPTED')
            res[r.method, r.category, verdict] += 1
            if not now.startswith('untensorized'):
                print(f, r.method, r.prompt_id, r.attempt, r.category, repr(now[:160]), flush=True)
for k, n in sorted(res.items()):
    print(k, n)
print('distinct scripts named', sum(1 for v in seen.values() if v[0]))
