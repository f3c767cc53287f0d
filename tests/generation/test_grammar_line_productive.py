"""``grammar_line._productive_kinds`` is cached by the shape of a state's rules (``_shape``: which names a rule uses
where, its literals folded away): on every line state of real MetaSchedule records (llvm and CUDA) the cached answer
is the productivity pass's over the whole grammar, and states that differ only in literals share one entry.

Real parts: the committed real databases, the codec, TVM schedules, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest

from dragon_testkit import CODEC_DATA, feed_constraint, model_script_lines, real_records


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_valid_db"])
def test_the_cached_productive_kinds_are_the_whole_passes(engine, smollm2, db, monkeypatch):
    from little_dragon.generation import grammar_line as gl
    from little_dragon.generation.constrained import Workload, clear_caches

    clear_caches()
    gl._MEMO.clear()
    gl._PRODUCTIVE.clear()
    cached, seen = gl._productive_kinds, []

    def checked(semantic: str) -> list[str]:
        got = cached(semantic)
        assert got == list(gl._productive_kinds_of({**gl._fixed_graph()[0], **gl.rule_graph(semantic)[0]}))
        seen.append(semantic)
        return got

    monkeypatch.setattr(gl, "_productive_kinds", checked)
    for n, (name, mod, target, tj) in enumerate(real_records(CODEC_DATA / db)):
        if n >= 4:
            break
        refused, c = feed_constraint(engine, Workload(mod, target), smollm2,
                                     "".join(x + "\n" for x in model_script_lines(tj)))
        assert refused is None and not c.dead, (name, refused, c.error)
    assert len(seen) > 20 and len(gl._PRODUCTIVE) < len(set(seen)), (len(seen), len(gl._PRODUCTIVE))


def test_a_shape_keeps_what_decides_productivity():
    from little_dragon.generation.grammar_line import _expr, _shape, _yields

    a, b = _expr('x: "l0" | "l1" | y "z"'), _expr('x: "l7" y? | "l9"')
    assert _shape(a) == _shape(b) == ("lit",)
    never = ("seq", [("never",), ("name", "y")])   # a regex that matches nothing, then y
    assert _shape(never) == ("never",)
    named = _expr('x: "a" y "b" | y "c"')
    assert _shape(named) == ("name", "y")
    for e in (a, b, never, named, _expr('x: (y | "q") z | w'), ("alt", [("never",), ("seq", [("name", "z"), ("opt", ("name", "y"))])])):
        for productive in (set(), {"y"}, {"y", "z"}, {"w"}):
            defined = {"y": 0, "z": 0, "w": 0}
            assert _yields(_shape(e), productive, defined) == _yields(e, productive, defined), (e, productive)
