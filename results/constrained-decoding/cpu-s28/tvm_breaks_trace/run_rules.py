"""run_rules.py FILES...: the four prototype rules on every attempt (category given) of the attempts parquets."""
import os, sys, json, time, collections, glob, pandas as pd
sys.path.insert(0, '/tmp/trace28'); os.chdir('/work/main')
import tvm
from rules import vector_scatter_collisions, repeated_update_without_init, block_regions_out_of_bounds, init_not_updated
from little_dragon.evaluator.script import decode_script_lines
from little_dragon.evaluator.replay import replay, ReplayFailure
from little_dragon.tvmx.postprocs import target_postprocs
from little_dragon.tvmx.build import lower_for_target
from little_dragon.tvmx.schedule import fresh_schedule
from little_dragon.codec.apply import apply_json
from little_dragon.tvmx.postprocs import split_postproc
from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES
from little_dragon.workloads.store import module_from_script
SRC = pd.read_parquet('/tmp/pipe/artifacts/sealed/workloads.parquet').set_index('workload_id')['tvmscript']
files = sys.argv[1:]
cnt = collections.Counter(); mods = {}; procs = {}; t0 = time.time()
for f in files:
    tgt = json.load(open(os.path.join(os.path.dirname(f), 'summary.json')))['target']
    T = tvm.target.Target(json.loads(tgt) if isinstance(tgt, str) else tgt)
    a = pd.read_parquet(f)
    a = a[(a.method == 'model') & a.category.isin(['correct', 'wrong_result'])]
    for r in a.itertuples():
        if r.workload_id not in SRC.index: continue
        if r.workload_id not in mods:
            mods[r.workload_id] = module_from_script(SRC[r.workload_id]); procs[r.workload_id] = target_postprocs(mods[r.workload_id], T)
        mod = mods[r.workload_id]
        try:
            trace, lines = decode_script_lines(r.script)
            pre, _ = split_postproc(trace)
            b = fresh_schedule(mod, debug_mask=0); apply_json(pre, b)
            done = replay(mod, trace, procs[r.workload_id], lines=lines, text=r.script)
            host, devs = lower_for_target(done.sch.mod, T, skip=END_CHECK_SKIPPED_PASSES)
        except Exception as e:
            cnt[r.category, 'EXC'] += 1; continue
        hits = {'R1': vector_scatter_collisions([host, *devs]), 'R2': repeated_update_without_init(b.mod),
                'R3': block_regions_out_of_bounds(done.sch.mod), 'R4': init_not_updated(b.mod)}
        fired = [k for k, v in hits.items() if v]
        cnt[r.category, '+'.join(fired) or '-'] += 1
        if fired:
            print(f.split('/')[-2], r.prompt_id, r.attempt, r.category, {k: hits[k][:3] for k in fired}, flush=True)
for k, v in sorted(cnt.items()): print(k, v)
print('wall', round(time.time() - t0))
