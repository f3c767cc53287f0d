import json, random, sys, time
sys.path.insert(0, "src")
from little_dragon.generation import constrained as C

def main():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained("/tmp/pipe/artifacts/sft/model")
    rows = [json.loads(l) for l in open(".devcarry/cudads/datasets/validation.jsonl") if l.strip()]
    rows = [r for r in rows if (json.loads(r["target"]) if isinstance(r["target"], str) else r["target"]).get("kind") == "cuda"]
    random.Random(0).shuffle(rows)
    wl = C.workload_of_prompt(rows[15]["prompt"])
    st = C.ConstraintStats()
    c = C.ScriptConstraint(C.engine_for(tok), wl, st); c.finish_back = 24
    C.tvm_worker("lines").warm()
    t0 = time.perf_counter()
    out = c._finish_earlier(open("/tmp/s38/p15a4.txt").read())
    print(f"p15 a4 finishing: {time.perf_counter()-t0:.1f} s, result {out is not None}, checks {st.finish_checks}, lost {st.tvm_lost}, finish_s {st.finish_s:.1f}")

if __name__ == "__main__":
    main()
