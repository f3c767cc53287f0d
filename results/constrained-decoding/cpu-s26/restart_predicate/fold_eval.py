import sys, json, glob, collections, time
import pandas as pd
sys.path.insert(0, 'benchmarks')
from end_check_lowering import harvest_kernels
from little_dragon.workloads.store import module_from_script
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker as sw
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
which = sys.argv[1]
res = collections.Counter(); flagged = []; verdicts = []
ctxs = {}
t0 = time.time()
if which == 'sealed':
    sr = set()
    import os
    srfile = 'results/constrained-decoding/sealed-cpu-s24/wrong_results.md'
    for line in (open(srfile) if 'sealed-cpu-s24' in sys.argv[2] and os.path.exists(srfile) else ()):
        c = [x.strip() for x in line.split('|')]
        if len(c) > 6 and c[6] == 'SR': sr.add((c[1], int(c[2]), c[3], int(c[4])))
    w = pd.read_parquet('/tmp/pipe/artifacts/sealed/workloads.parquet').set_index('workload_id')
    target = json.dumps({'kind': 'llvm', 'num-cores': 2})
    mods = {}
    files = sorted(glob.glob(sys.argv[2]))
    for f in files:
        arm = f.split('/')[-3].split('-')[-1]; seed = int(f.split('seed')[1].split('/')[0])
        df = pd.read_parquet(f); df = df[df.method == 'model']
        for r in df.itertuples():
            if r.category not in ('correct', 'wrong_result'): continue
            if r.workload_id not in mods:
                mods[r.workload_id] = module_from_script(w.loc[r.workload_id, 'tvmscript'])
                ctxs[r.workload_id] = PostprocContext(mods[r.workload_id], target)
            lines = r.script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
            if 'post' in kws: lines = lines[:kws.index('post')] + ['post *']
            v = sw.finish_check(mods[r.workload_id], ctxs[r.workload_id], '\n'.join(lines) + '\n')
            label = 'SR' if (arm, seed, r.prompt_id, r.attempt) in sr else r.category
            kind = 'fold' if v.startswith('in-place fold') else ('other_refusal' if v else 'accepted')
            res[kind, label] += 1
            if kind == 'fold': flagged.append((arm, seed, r.prompt_id, r.attempt, label, v[:200]))
            if kind == 'other_refusal': print('OTHER', label, arm, seed, r.prompt_id, r.attempt, v[:150], flush=True)
            verdicts.append((arm, seed, r.prompt_id, int(r.attempt), label, v[:200]))
else:
    for where, mod, target, text, what in harvest_kernels(sys.argv[2:]):
        key = (id(mod), target)
        if key not in ctxs: ctxs[key] = PostprocContext(mod, target)
        v = sw.finish_check(mod, ctxs[key], text)
        kind = 'fold' if v.startswith('in-place fold') else ('other_refusal' if v else 'accepted')
        res[kind] += 1
        if kind == 'fold': flagged.append((where, v[:200]))
for k, v in sorted(res.items()): print(k, v)
for f in flagged: print('FLAG', f)
print('wall', round(time.time() - t0, 1))
if len(sys.argv) > 3: json.dump(verdicts, open(sys.argv[3], 'w'))
