"""finish_check verdicts of every distinct model attempt of the CPU sealed runs (and the llvm harvest's records)."""
import sys, json, time, glob
sys.path.insert(0, '/work/main/benchmarks')
import little_dragon, pandas as pd
from end_check_lowering import attempt_kernels, harvest_kernels
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker
print(little_dragon.__file__, file=sys.stderr)
files = sorted(glob.glob('/work/main/results/constrained-decoding/sealed-cpu-s2*/*/*/attempts.parquet'))
kernels = list(attempt_kernels(files, '/tmp/pipe/artifacts/sealed/workloads.parquet', '{"kind": "llvm", "num-cores": 2}', 100000))
kernels += list(harvest_kernels(['/tmp/pipe/artifacts/harvest/llvm-2c-148a25/db']))
seen, ctx = set(), {}
t = time.perf_counter(); n = 0
with open(sys.argv[1], 'w') as out:
    for where, mod, target, text, what in kernels:
        key = (where.split()[0], text)
        if key in seen:
            continue
        seen.add(key)
        c = ctx.setdefault((id(mod), target), PostprocContext(mod, target))
        t1 = time.perf_counter()
        v = schedule_worker.finish_check(mod, c, text)
        out.write(json.dumps({"where": where, "what": what, "verdict": v, "s": time.perf_counter() - t1}) + "\n")
        n += 1
print(n, "kernels", time.perf_counter() - t, "s", file=sys.stderr)
