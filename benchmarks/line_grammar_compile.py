"""What a line grammar rule costs each line: llguidance's compile time of the line grammars of real schedule states,
with the annotation-key and move-once rules (session 33, ``grammar_line._annotate_rules``) and without them
(``ScheduleState.any_annotation``, the constraint before), side by side in one run, the arms alternating.

The states are every ``--every``-th line prefix of the first ``--records`` records of each committed real database
(tests/codec/data: CUDA tensor-core, CUDA SIMT, llvm), replayed on a fresh schedule; the tokenizer is SmolLM2's (the
one generation uses).  Prints a table (mean and median ms a compile, the ratio); the rules' cost is that ratio (every
line compiles one grammar, cached by state).

    python benchmarks/line_grammar_compile.py --records 2 --every 3 --repeat 3
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "codec" / "data"


def states(records: int, every: int) -> list:
    """``ScheduleState``s of real records' line prefixes (the CUDA ones as a GPU sees them: ``cpu`` from the target)."""
    import json

    from little_dragon import codec
    from little_dragon.codec.roundtrip import read_database
    from little_dragon.generation.constrain_state import live_state, replay

    out = []
    for name in ("real_cuda_db", "real_cuda_simt_db", "real_llvm_db"):
        db = DATA / name
        dbs = [db] if (db / "database_workload.json").exists() else sorted(p for p in db.iterdir() if p.is_dir())
        seen = 0
        for d in dbs:
            for _, mod, recs in read_database(d):
                for _, trace_json, target in recs:
                    if seen >= records:
                        break
                    seen += 1
                    lines = codec.encode(trace_json).splitlines()
                    lines = lines[:lines.index("post")] if "post" in lines else lines
                    cpu = json.loads(target).get("kind") == "llvm"
                    for i in range(0, len(lines), every):
                        head = "".join(x + "\n" for x in lines[:i])
                        try:
                            st = live_state(replay(mod, codec.decode(head, codec.SyntaxOnlyContext())))
                        except Exception:  # noqa: BLE001 - a prefix TVM refuses alone (its record needs the rest)
                            continue
                        st.cpu = cpu
                        out.append(st)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2, help="records of each committed database")
    ap.add_argument("--every", type=int, default=3, help="every N-th line prefix of a record")
    ap.add_argument("--repeat", type=int, default=3, help="rounds over the states (the arms alternate their order)")
    args = ap.parse_args(argv)

    from little_dragon.datasets.config import TokenizerSpec
    from little_dragon.datasets.tokens import load_counter
    from little_dragon.generation import grammar_line
    from little_dragon.generation.constrained import TokenEngine
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=load_counter(TokenizerSpec()).tokenizer, eos_token="<|endoftext|>",
                                  clean_up_tokenization_spaces=False)
    engine = TokenEngine(tok)
    found = states(args.records, args.every)
    arms = {"rules": [], "without": []}
    for r in range(args.repeat):
        for st in found:
            for arm in ("rules", "without") if r % 2 == 0 else ("without", "rules"):
                s = st if arm == "rules" else dataclasses.replace(st, any_annotation=True)
                grammar = grammar_line.line_grammar(s)
                t0 = time.perf_counter()
                engine._compile(grammar)  # noqa: SLF001 - the compile itself, uncached
                arms[arm].append(time.perf_counter() - t0)
    base = statistics.mean(arms["without"])
    print(f"{len(found)} states x {args.repeat} rounds")
    print("| arm | compiles | mean ms | median ms | vs without |")
    print("|---|---:|---:|---:|---:|")
    for arm, v in arms.items():
        print(f"| {arm} | {len(v)} | {1000 * statistics.mean(v):.2f} | {1000 * statistics.median(v):.2f} | "
              f"{statistics.mean(v) / base:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
