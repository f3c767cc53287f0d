import sys, json, time, glob
sys.path.insert(0, '/work/main/benchmarks')
from end_check_lowering import harvest_kernels
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker
ctx = {}
t = time.perf_counter(); n = 0
with open(sys.argv[1], 'w') as out:
    for folder in ['/work/main/data/harvest/cuda-sm_90-6e5dd8/db', '/work/main/data/harvest/cuda-sm_90-6e5dd8/failed']:
        try:
            ks = list(harvest_kernels([folder]))
        except Exception as e:
            print(folder, e, file=sys.stderr); continue
        for where, mod, target, text, what in ks:
            c = ctx.setdefault((id(mod), target), PostprocContext(mod, target))
            t1 = time.perf_counter()
            v = schedule_worker.finish_check(mod, c, text)
            out.write(json.dumps({"where": folder[-6:] + where, "verdict": v, "s": time.perf_counter() - t1}) + "\n")
            n += 1
print(n, "kernels", time.perf_counter() - t, "s", file=sys.stderr)
