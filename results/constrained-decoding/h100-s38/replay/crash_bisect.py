import json, random, sys, time
sys.path.insert(0, "src")
from little_dragon.generation import constrained as C

def main():
    rows = [json.loads(l) for l in open(".devcarry/cudads/datasets/validation.jsonl") if l.strip()]
    rows = [r for r in rows if (json.loads(r["target"]) if isinstance(r["target"], str) else r["target"]).get("kind") == "cuda"]
    random.Random(0).shuffle(rows)
    wl = C.workload_of_prompt(rows[15]["prompt"])
    lines = open("/tmp/s38/p15a4.txt").read().splitlines(keepends=True)
    w = C.tvm_worker("lines")
    def crashes(n):
        before = w.crashed
        why = w.finish_check(wl.key, wl.mod, wl.target, "".join(lines[:n]) + "post *\n") if True else ""
        return w.crashed > before, why
    def check(n):
        try:
            why = w.finish_check(wl.key, wl.mod, wl.target, "".join(lines[:n]) + "post *\n")
            return False, why
        except Exception as e:
            return "ended the constraint" in str(e), str(e)[:200]
    lo, hi = 4, 91   # lo: not crashing (assumed), hi crashing
    print(hi, check(hi)[0], flush=True)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        c, why = check(mid)
        print(mid, c, why[:150], flush=True)
        if c: hi = mid
        else: lo = mid
    print("first crashing prefix", hi, repr(lines[hi - 1]))
    print("".join(lines[:hi]))

if __name__ == "__main__":
    main()
