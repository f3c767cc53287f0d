"""Time the end check (schedule_worker.finish_check, in process) of every attempt a device A/B arm wrote, on this CPU:
how many take longer than the steps an attempt holds for its verdict (END_WAIT_STEPS x a step)."""
import json, sys, time, random
from pathlib import Path
sys.path.insert(0, "src")  # run from the repository root
from little_dragon.generation.constrained import workload_of_prompt
from little_dragon.generation.schedule_worker import finish_check

ab, rows_path, arm, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
d = json.loads(Path(ab).read_text())["ab"]
rows = [json.loads(l) for l in Path(rows_path).read_text().splitlines() if l.strip()]
random.Random(d.get("seed", 0) if "seed" in d else 0).shuffle(rows)
rows = rows[:d["prompts"]]
scripts = d["arms"][arm]["first_scripts"]
out = []
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
for r, ss in zip(rows, scripts):
    wl = workload_of_prompt(r["prompt"])
    for s in ss[:n]:
        if not s.rstrip().endswith("post *"):
            continue
        t = time.perf_counter()
        why = finish_check(wl.mod, wl.post_context, s.rstrip() + "\n", None)
        dt = time.perf_counter() - t
        out.append({"name": r.get("name"), "lines": s.count("\n") + 1, "s": dt, "ok": not why, "why": why[:120]})
        print(f"{r.get('name')}\t{s.count(chr(10))+1}\t{dt*1e3:.0f} ms\t{'ok' if not why else why[:80]}", flush=True)
Path(sys.argv[5]).write_text(json.dumps(out, indent=1))
