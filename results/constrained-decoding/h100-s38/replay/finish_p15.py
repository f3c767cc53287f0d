import time

from _replay import P15A4, TOKENIZER, cuda_rows
from little_dragon.generation import constrained as C

def main():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    rows = cuda_rows()
    wl = C.workload_of_prompt(rows[15]["prompt"])
    st = C.ConstraintStats()
    c = C.ScriptConstraint(C.engine_for(tok), wl, st); c.finish_back = 24
    C.tvm_worker("lines").warm()
    t0 = time.perf_counter()
    out = c._finish_earlier(open(P15A4).read())
    print(f"p15 a4 finishing: {time.perf_counter()-t0:.1f} s, result {out is not None}, checks {st.finish_checks}, lost {st.tvm_lost}, finish_s {st.finish_s:.1f}")

if __name__ == "__main__":
    main()
