"""Session 26's final_recheck (every H200 attempt file's end check, CUDA sealed workloads) with the bounds rule timed:
each call of ``out_of_bounds_accesses`` in the end check also runs session 26's version (``device_bounds_s26.py``,
152b8a6's file, beside this script) on the same lowered device modules; their findings are compared and both timed.
Prints session 26's FLAG lines and verdict table (to diff against ``cpu-s26/h200_attempts_recheck/final_recheck.log``)
and the two versions' per-call times."""
import collections, glob, json, os, statistics, sys, time

import pandas as pd

os.chdir('/work/main')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_bounds_s26 as old  # noqa: E402
from little_dragon.codec import PostprocContext  # noqa: E402
from little_dragon.generation import schedule_worker as sw  # noqa: E402
from little_dragon.tvmx.build import import_tensor_intrinsics  # noqa: E402
from little_dragon.workloads.store import module_from_script  # noqa: E402

import_tensor_intrinsics()
SM90 = ('{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, '
        '"thread_warp_size": 32}')
new_oob, calls = sw.out_of_bounds_accesses, []


def both(devices):
    """The current rule's findings (returned) and session 26's, each timed, alternating which runs first."""
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
w = pd.read_parquet('/work/main/.devcarry/cudads/sealed/workloads.parquet').set_index('workload_id')
files = sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'h200' in f)
res = collections.Counter(); t0 = time.time(); ctxs = {}; mods = {}
for f in files:
    s = os.path.join(os.path.dirname(f), 'summary.json')
    target = (json.load(open(s)).get('target') if os.path.exists(s) else None) or SM90
    if not isinstance(target, str):
        target = json.dumps(target)
    for r in pd.read_parquet(f).itertuples():
        if not isinstance(r.script, str) or not r.script.strip() or r.workload_id not in w.index:
            continue
        key = (r.workload_id, target)
        if key not in ctxs:
            mods[key] = module_from_script(w.loc[r.workload_id, 'tvmscript']); ctxs[key] = PostprocContext(mods[key], target)
        lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
        if 'post' in kws:
            lines = lines[:kws.index('post')] + ['post *']
        try:
            v = sw.finish_check(mods[key], ctxs[key], '\n'.join(lines) + '\n')
        except Exception as e:  # noqa: BLE001
            v = 'EXC ' + repr(e)[:100]
        res[r.method, r.category, 'refused' if v else 'accepted'] += 1
        if v and (r.category == 'correct' or v.startswith(('on-chip', 'two thread', 'launch over', 'device kernel allocates'))):
            print('FLAG', f, r.method, r.prompt_id, r.attempt, r.category, v[:220].replace('\n', ' '), flush=True)
for k, n in sorted(res.items()):
    print(k, n)
print('bounds calls', len(calls), 'findings differ', sum(c['old'][0] != c['new'][0] for c in calls),
      'refused old', sum(bool(c['old'][0]) for c in calls), 'new', sum(bool(c['new'][0]) for c in calls))
for name in ('old', 'new'):
    t = sorted(c[name][1] for c in calls); n = len(t)
    print(name, f"mean {1e3 * statistics.mean(t):.1f} median {1e3 * statistics.median(t):.1f} "
                f"p99 {1e3 * t[int(0.99 * (n - 1))]:.0f} max {1e3 * t[-1]:.0f} ms")
print('wall', round(time.time() - t0))
