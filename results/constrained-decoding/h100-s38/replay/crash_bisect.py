
from _replay import P15A4, cuda_rows
from little_dragon.generation import constrained as C

def main():
    rows = cuda_rows()
    wl = C.workload_of_prompt(rows[15]["prompt"])
    lines = open(P15A4).read().splitlines(keepends=True)
    w = C.tvm_worker("lines")
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
