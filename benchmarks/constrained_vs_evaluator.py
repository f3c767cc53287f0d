"""Does the constraint allow every script the evaluator applied?  (issue 16: the constraint must never forbid
what TVM accepts, or say why.)

Reads evaluation attempts (``attempts.parquet`` of a sealed evaluation: method, workload_id, category, script),
takes the model's attempts that decoded and applied (categories correct, build_error, verify_error,
wrong_result, runtime_error), and feeds each script token by token through ``ScriptConstraint`` (SmolLM2's
tokenizer, the workload of the harvest database ``DB_ROOT/<workload_id>``, semantics on), then EOS.  Prints one
line per script (``ok`` or ``FORBIDDEN`` with the token and the text before it) and writes the list as JSON.

    python benchmarks/constrained_vs_evaluator.py results/eval-sealed-h200/session7/attempts.parquet \
        --db-root data/harvest/cuda-sm_90-6e5dd8/db --out results/constrained-decoding/vs_evaluator_s8.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

APPLIED = ("correct", "build_error", "verify_error", "wrong_result", "runtime_error")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("attempts", nargs="+", help="attempts.parquet files of evaluations")
    ap.add_argument("--db-root", default="data/harvest/cuda-sm_90-6e5dd8/db",
                    help="folder of the harvest's per-workload MetaSchedule databases")
    ap.add_argument("--tokenizer", default="gguf", help="gguf (SmolLM2's) or a HF folder")
    ap.add_argument("--out", help="JSON list of the verdicts")
    args = ap.parse_args(argv)

    import pandas as pd

    sys.path.insert(0, str(Path(__file__).parent))
    from constrained_bench import first_forbidden, load_tokenizer

    from little_dragon.codec.roundtrip import read_database
    from little_dragon.generation.constrained import (ConstraintStats, ScriptConstraint, TokenEngine, Workload,
                                                      allocate_bitmask)

    tok = load_tokenizer(args.tokenizer)
    engine = TokenEngine(tok)
    stats = ConstraintStats()
    bits = allocate_bitmask(1, engine.vocab_size)
    rows = []
    for p in args.attempts:
        d = pd.read_parquet(p)
        d = d[(d.method == "model") & d.category.isin(APPLIED)]
        rows += [(p, r) for r in d.itertuples()]
    workloads: dict[str, Workload] = {}
    out = []
    for n, (p, r) in enumerate(rows):
        if r.workload_id not in workloads:
            _, mod, recs = next(read_database(Path(args.db_root) / r.workload_id))
            workloads[r.workload_id] = Workload(mod, recs[0][2])
        text = r.script if r.script.endswith("\n") else r.script + "\n"
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        c = ScriptConstraint(engine, workloads[r.workload_id], stats)
        why = first_forbidden(c, ids, bits, tok)
        bad = bool(why) or c.dead
        out.append({"file": p, "prompt_id": r.prompt_id, "attempt": int(r.attempt), "workload_id": r.workload_id,
                    "category": r.category, "ok": not bad, "why": why or c.error})
        print(n, r.workload_id, r.category, "ok" if not bad else "FORBIDDEN " + (why or c.error)[:400], flush=True)
    summary = {"checked": len(out), "accepted": sum(o["ok"] for o in out)}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({**summary, "scripts": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
