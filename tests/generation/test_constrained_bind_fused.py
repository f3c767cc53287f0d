"""[bind the fused loop] Right after a `fuse`, a `bind` binds the loop that `fuse` made (``grammar_line._parallel_rules``,
``constrained.BIND_FUSED``): MetaSchedule's GPU tilings and AutoBind fuse loops, then bind the fused one (every such pair
in the CUDA split's scripts).  Session 34-35's H100 attempts that bound another loop there (`bind l21 bx` after
`fuse l4 l9 l14 l19` made `l24`) ran 2 threads a thread block, which the bounds line refused, and went back to their
tiling.

Real parts only: a CUDA MetaSchedule database measured on the H200 (tests/codec/data/real_cuda_simt_db), TVM, the codec,
llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import feed_constraint, model_script_lines, real_records, tvm_accepts
from dragon_testkit import lines_through as _through


@pytest.fixture(scope="module")
def record():
    from little_dragon.generation.constrained import Workload

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_simt_db")))
    return mod, Workload(mod, target), model_script_lines(tj)


def test_a_bind_after_a_fuse_binds_the_fused_loop(engine, smollm2, record, monkeypatch):
    """The record's `fuse l3 l8` makes l16 and its `bind l16 bx` goes through; `bind l7 bx` there (a free data-parallel
    loop, which TVM binds) is refused at its loop, and allowed again without the rule; after a line that is not a
    `fuse` any free loop may be bound."""
    from little_dragon.generation import constrained

    mod, wl, lines = record
    assert lines[8:10] == ["fuse l3 l8", "bind l16 bx"]
    fused = _through(lines, "fuse l3 l8")
    assert feed_constraint(engine, wl, smollm2, _through(lines, "bind l16 bx"))[0] is None
    other = fused + "bind l7 bx\n"
    assert tvm_accepts(mod, other)
    refused, c = feed_constraint(engine, wl, smollm2, other)
    assert refused is not None and not c.dead and "bind l" in refused.split(" after ", 1)[1], refused
    monkeypatch.setattr(constrained, "BIND_FUSED", False)
    assert feed_constraint(engine, wl, smollm2, other)[0] is None
    monkeypatch.setattr(constrained, "BIND_FUSED", True)
    # after `reorder *` (no fuse right before) a bind of l7 is a line the rule leaves alone
    assert feed_constraint(engine, wl, smollm2, _through(lines, "reorder *") + "bind l7 bx\n")[0] is None


def test_the_rule_in_the_line_grammar():
    """``bind_loop`` narrows `bind` to that loop; a fused loop no axis may take on the target (a reduction loop on a
    CPU, where there is no threadIdx) leaves no `bind` line at all rather than a keyword with nothing after it."""
    from little_dragon.generation.grammar_line import _parallel_rules

    class State:
        loops = {0: 64, 1: 32, 2: 16}
        loop_iters = {0: "S", 1: "S", 2: "R"}
        loop_mixed: frozenset = frozenset()
        loop_unpipelined: frozenset = frozenset()
        loop_nested_axes: dict = {}
        loop_bound: set = set()
        loop_top: frozenset = frozenset()
        cpu = False

    rules = "\n".join(_parallel_rules(State(), bind_loop=1))
    assert 'BPAR: "l1"' in rules and 'BRED: ' in rules and '"l0"' not in rules.split("BPAR:")[1].split("\n")[0]
    assert 'BPAR: "l0" | "l1"' in "\n".join(_parallel_rules(State()))
    State.cpu = True
    rules = "\n".join(_parallel_rules(State(), bind_loop=2))
    assert "k_bind: NEVERK_BIND" in rules and "TIDX:" in rules and "AXIS:" in rules
