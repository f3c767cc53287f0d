"""Session 44: the line grammars' compile cost with [pipeline body] on and off, the grammars alone (no TVM).  The same
H200 harvest records as ``pipeline_body_cost.py`` (every 10th, the first ``N`` of them) are fed token by token once with
the rule on and once off; each pass's compiled grammar texts are kept (the engine's cache, keyed by text), then each set
is compiled again, one grammar at a time on one thread (``TokenEngine._compile``), in A B A B B A order.  Prints each
set's size and total grammar characters and each round's compile seconds.  From the repository root with data/
pulled:
    .venv/bin/python results/constrained-decoding/cpu-s44/pipeline_body_compile.py > pipeline_body_compile.txt
"""
import sys
import time

sys.path.insert(0, "results/constrained-decoding/cpu-s44")
sys.path.insert(0, "benchmarks")
from constrained_bench import first_forbidden, load_tokenizer  # noqa: E402
from pipeline_body_cost import records  # noqa: E402

from little_dragon.generation import constrained  # noqa: E402
from little_dragon.generation.constrained import ScriptConstraint, TokenEngine, allocate_bitmask  # noqa: E402

N = 40


def grammars(tok, work, rule: bool) -> list[str]:
    constrained.PIPELINE_BODY_RULE = rule
    constrained.clear_caches()
    engine = TokenEngine(tok)
    engine.cache_entries = 10 ** 6  # keep every grammar this pass compiled
    bits = allocate_bitmask(1, engine.vocab_size)
    for _, wl, text in work:
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        first_forbidden(ScriptConstraint(engine, wl), ids, bits, tok)
    return list(engine._cache)


def main() -> None:
    tok = load_tokenizer("gguf")
    work = records()[:N]
    sets = {"on": grammars(tok, work, True), "off": grammars(tok, work, False)}
    for name, gs in sets.items():
        print(f"rule {name}: {len(gs)} grammars, {sum(map(len, gs))} characters", flush=True)
    engine = TokenEngine(tok)
    totals = {"on": 0.0, "off": 0.0}
    for name in ("on", "off", "on", "off", "off", "on"):
        t0 = time.perf_counter()
        for g in sets[name]:
            engine._compile(g)
        s = time.perf_counter() - t0
        totals[name] += s
        print(f"compile, rule {name}: {s:.1f} s ({1e3 * s / len(sets[name]):.2f} ms a grammar)", flush=True)
    print(f"on / off, a grammar: {(totals['on'] / len(sets['on'])) / (totals['off'] / len(sets['off'])):.3f}")


if __name__ == "__main__":
    main()
