import sys, json, collections, time
from pathlib import Path
from little_dragon.codec import PostprocContext, encode
from little_dragon.codec.roundtrip import read_database
from little_dragon.generation import schedule_worker as sw
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
folder = Path(sys.argv[1])
DIAG, LAUNCH = sw.diagonal_thread_bindings, sw.launch_over_limits
res = collections.Counter(); changed = []; t0 = time.time(); n = 0
for db in sorted(p for p in folder.iterdir() if p.is_dir()):
    secs = []
    for l in (db / 'database_tuning_record.json').read_text().splitlines():
        if l.strip():
            rs = json.loads(l)[1][1]; secs.append(bool(rs) and max(rs) < 1e9)
    for name, mod, recs in read_database(db):
        ctx = {}
        for i, trace_json, target in recs:
            lines = encode(trace_json).splitlines()
            text = "\n".join(lines[:lines.index("post")] + ["post *"] if "post" in lines else lines) + "\n"
            if target not in ctx: ctx[target] = PostprocContext(mod, target)
            sw.diagonal_thread_bindings, sw.launch_over_limits = DIAG, LAUNCH
            new = sw.finish_check(mod, ctx[target], text)
            sw.diagonal_thread_bindings = lambda s: []; sw.launch_over_limits = lambda d: []
            old = sw.finish_check(mod, ctx[target], text)
            sw.diagonal_thread_bindings, sw.launch_over_limits = DIAG, LAUNCH
            valid = 'valid' if secs[i] else 'failed'
            kn = 'newrule' if new.startswith(('two thread loops', 'launch over CUDA')) else ('refused' if new else 'accepted')
            ko = 'refused' if old else 'accepted'
            res[valid, ko, kn] += 1
            if new != old: changed.append((db.name, i, valid, old[:120], new[:160]))
            n += 1
            if n % 200 == 0: print('progress', n, round(time.time() - t0), flush=True)
for k, v in sorted(res.items()): print('(valid, old, new)', k, v)
for c in changed: print('CHANGED', c)
print('n', n, 'wall', round(time.time() - t0, 1))
