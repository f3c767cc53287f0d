import json
import sys
import time

from _replay import TOKENIZER, cuda_rows
from little_dragon.generation import constrained as C

def main():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    rows = cuda_rows()
    a = json.load(open(sys.argv[1]))["ab"]["arms"]["constrained+shared_prefix+retries4+back24+process4"]
    eng = C.engine_for(tok)
    w = C.tvm_worker("lines")
    for p, ss in enumerate(a["final_scripts"]):
        for i, s in enumerate(ss):
            if s.rstrip().endswith("post *"):
                continue
            wl = C.workload_of_prompt(rows[p]["prompt"])
            c = C.ScriptConstraint(eng, wl, C.ConstraintStats()); c.finish_back = 24
            lines = s.splitlines(keepends=True)
            t0 = time.perf_counter()
            for n in range(len(lines), max(len(lines) - 25, 1), -1):
                t1 = time.perf_counter()
                why = c._finish_check_cached("".join(lines[:n]) + "post *\n")
                print(f"  p{p} a{i} {n}: {time.perf_counter()-t1:.2f} s crashed {w.crashed} timeouts {w.timed_out} {why[:110]!r}", flush=True)
                if not why: break
            print(f"p{p} a{i} {len(lines)} lines: {time.perf_counter()-t0:.1f} s", flush=True)

if __name__ == "__main__":
    main()
