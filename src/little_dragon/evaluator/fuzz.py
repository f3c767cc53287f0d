"""Mutated scripts for robustness testing: what a half-trained model writes, and worse.

Token deletions and swaps, random decisions (integer tokens replaced), truncation and junk insertion,
applied to real scripts.  Used by the fuzz test (small) and the benchmark (large)."""
from __future__ import annotations

import random
import re

_TOKEN = re.compile(r"\s+|[A-Za-z_][A-Za-z_0-9.]*|-?\d+|\"(?:[^\"\\]|\\.)*\"|.", re.S)
_INT = re.compile(r"^-?\d+$")
JUNK = ["", "\x00", "]]]]", "{", "\"", "NaN", "-1", "99999999999999999999", "GetSBlock", "Split", "\ud7ff",
        "💥", "\n" * 3, "null", "[", "b0", "l999", "true"]
KINDS = ("delete", "swap", "decision", "truncate", "junk")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def mutate(script: str, rng: random.Random, kind: str | None = None) -> tuple[str, str]:
    """One mutation of ``script``: (kind, mutated text)."""
    kind = kind or rng.choice(KINDS)
    toks = tokens(script)
    if not toks:
        return kind, rng.choice(JUNK)
    if kind == "delete":
        for _ in range(rng.randint(1, 3)):
            if toks:
                del toks[rng.randrange(len(toks))]
    elif kind == "swap":
        i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == "decision":
        ints = [i for i, t in enumerate(toks) if _INT.match(t)]
        for i in rng.sample(ints, min(len(ints), rng.randint(1, 3))):
            toks[i] = str(rng.choice([0, 1, 2, 3, 4, 7, 8, 16, 64, 1024, -1, rng.randint(0, 1 << 20)]))
    elif kind == "truncate":
        return kind, script[: rng.randrange(len(script))]
    elif kind == "junk":
        toks.insert(rng.randrange(len(toks) + 1), rng.choice(JUNK))
    return kind, "".join(toks)


def mutants(scripts: list[str], n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [mutate(rng.choice(scripts), rng) for _ in range(n)]
