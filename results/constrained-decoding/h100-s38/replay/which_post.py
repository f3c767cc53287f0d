import os

from _replay import P15A4, cuda_rows
from little_dragon.generation import constrained as C

def run_child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            fn(); os._exit(0)
        except Exception as e:
            print("   raised:", str(e).strip().splitlines()[-1][:150], flush=True); os._exit(3)
    _, st = os.waitpid(pid, 0)
    return st

def main():
    rows = cuda_rows()
    wl = C.workload_of_prompt(rows[15]["prompt"])
    lines = open(P15A4).read().splitlines(keepends=True)
    from little_dragon.codec import apply, SyntaxOnlyContext
    from little_dragon.generation.schedule_worker import fresh_schedule
    ctx = wl.post_context
    posts = ctx.postprocs()
    variants = {"orig": lines[:78],
                "lanes1": lines[:77] + ["ann b3 fetch cat lanes = 1\n"],
                "no78": lines[:77]}
    for name, ls in variants.items():
        text = "".join(ls)
        print(name, flush=True)
        for i, p in enumerate(posts):
            def f(i=i):
                sch = fresh_schedule(wl.mod)
                apply(text, sch, SyntaxOnlyContext())
                for q in posts[:i]:
                    if not q.apply(sch):
                        raise RuntimeError(f"{q} refused")
                ok = posts[i].apply(sch)
                print(f"   {i} {type(posts[i]).__name__} {str(posts[i])[:40]} -> {ok}", flush=True)
            st = run_child(f)
            if st not in (0, 3 << 8):
                print(f"   {i} {str(posts[i])[:60]} CRASHED status {st}", flush=True); break
            if st == 3 << 8: break

if __name__ == "__main__":
    main()
