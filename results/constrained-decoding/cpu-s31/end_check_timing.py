"""Time finish_check over dumped end-check texts (in-process), with cProfile."""
import sys, time, cProfile, pstats, json, hashlib
from little_dragon.codec import PostprocContext
from little_dragon.generation import schedule_worker
from little_dragon.workloads.store import module_from_script
rows = [json.loads(l) for l in open(sys.argv[1])]
mods, ctx = {}, {}
for r in rows:
    if r["mod"] not in mods:
        mods[r["mod"]] = module_from_script(r["mod"], None, where="x")
        ctx[r["mod"]] = PostprocContext(mods[r["mod"]], r["target"])
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
for r in rows[:3]:
    schedule_worker.finish_check(mods[r["mod"]], PostprocContext(mods[r["mod"]], r["target"]), r["text"])
pr = cProfile.Profile()
verdicts = []
t = time.perf_counter()
pr.enable()
for _ in range(reps):
    for r in rows:   # a fresh context: no cached derivation, as a fresh end check of a new text
        verdicts.append(schedule_worker.finish_check(mods[r["mod"]], PostprocContext(mods[r["mod"]], r["target"]), r["text"]))
pr.disable()
dt = time.perf_counter() - t
n = reps * len(rows)
print(f"{n} checks {dt:.2f}s {1000*dt/n:.1f} ms each; refused {sum(bool(v) for v in verdicts)}")
print("verdicts hash", hashlib.md5("\n".join(verdicts).encode()).hexdigest())
if len(sys.argv) > 3:
    pstats.Stats(pr).sort_stats(sys.argv[3]).print_stats(50)
