"""Session 44: what [pipeline body] (36a28ea) costs the constraint on the CPU, side by side in one run: the same H200
harvest records fed token by token (``constrained_bench.first_forbidden``, SmolLM2's GGUF tokenizer) with the rule on
and off (``constrained.PIPELINE_BODY_RULE``), in A B B A order, each pass cold (a fresh engine: no compiled grammar;
the prefixes' facts forgotten).  The rule changes the `ann` alternatives of nearly every GPU line (a loop whose body is
one statement is on almost every line), so the records are every 10th of the harvest's, pipelined or not.  Prints a
markdown table (wall s, line grammars compiled, compile s, mask s, state s) and the verdicts' agreement.  From the
repository root with data/ pulled:
    .venv/bin/python results/constrained-decoding/cpu-s44/pipeline_body_cost.py > pipeline_body_cost.txt
"""
import sys
import time

sys.path.insert(0, "benchmarks")
from constrained_bench import _db_dirs, first_forbidden, load_tokenizer  # noqa: E402

from little_dragon.codec import encode  # noqa: E402
from little_dragon.codec.roundtrip import read_database  # noqa: E402
from little_dragon.generation import constrained  # noqa: E402
from little_dragon.generation.constrained import (ConstraintStats, ScriptConstraint, TokenEngine,  # noqa: E402
                                                  Workload, allocate_bitmask)

STRIDE = 10


def records() -> list[tuple[str, object, str]]:
    out, n = [], 0
    for db in _db_dirs(["data/harvest/cuda-sm_90-6e5dd8"]):
        for name, mod, recs in read_database(db):
            for idx, trace_json, target in recs:
                n += 1
                if n % STRIDE:
                    continue
                lines = encode(trace_json).splitlines()
                text = "\n".join(lines[:lines.index("post")] + ["post *"] if "post" in lines else lines) + "\n"
                out.append((f"{name}#{idx}", Workload(mod, target), text))
    return out


def one_pass(tok, work, rule: bool) -> tuple[dict, list[bool]]:
    constrained.PIPELINE_BODY_RULE = rule
    constrained.clear_caches()
    engine = TokenEngine(tok)  # its own grammar cache: every line grammar compiled again
    stats = ConstraintStats()
    bits = allocate_bitmask(1, engine.vocab_size)
    verdicts = []
    t0 = time.perf_counter()
    for _, wl, text in work:
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        c = ScriptConstraint(engine, wl, stats)
        verdicts.append(not first_forbidden(c, ids, bits, tok) and not c.dead)
    return {"rule": rule, "wall_s": time.perf_counter() - t0, "compiled": stats.compiled, "compile_s": stats.compile_s,
            "mask_s": stats.mask_s, "state_s": stats.state_s}, verdicts


def main() -> None:
    tok = load_tokenizer("gguf")
    work = records()
    print(f"{len(work)} records (every {STRIDE}th of the H200 harvest), {sum('stage' in t for _, _, t in work)} "
          "of them pipelined")
    rows, seen = [], {}
    for rule in (True, False, False, True):
        row, verdicts = one_pass(tok, work, rule)
        rows.append(row)
        seen.setdefault(rule, verdicts)
        print(row, flush=True)
    print("\n| pass | rule | wall s | line grammars compiled | compile s | mask s | state s |\n|---|---|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows):
        print(f"| {i + 1} | {'on' if r['rule'] else 'off'} | {r['wall_s']:.1f} | {r['compiled']} | {r['compile_s']:.1f} "
              f"| {r['mask_s']:.1f} | {r['state_s']:.1f} |")
    on = [r for r in rows if r["rule"]]
    off = [r for r in rows if not r["rule"]]
    for k in ("wall_s", "compile_s"):
        print(f"{k}: on / off = {sum(r[k] for r in on) / sum(r[k] for r in off):.3f}")
    same = sum(a == b for a, b in zip(seen[True], seen[False]))
    print(f"verdicts: {same}/{len(work)} the same; accepted {sum(seen[True])} with the rule, {sum(seen[False])} without")


if __name__ == "__main__":
    main()
