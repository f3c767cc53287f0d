"""[outermost loop] On a GPU target a data-parallel loop with no loop above it is bound to blockIdx only (issue 16,
session 39; ``ScheduleState.loop_top``, ``grammar_line._parallel_rules``, ``constrained.OUTERMOST_BLOCK_IDX``).  Bound to
threadIdx or a virtual thread there, with no blockIdx loop over its block, `post *`'s RewriteUnboundBlock has no loop to
fuse for blockIdx.x and raises "Check failed: ... 'fuse' requires at least 1 loop(s)": the main line retry of session
38's and 39's H100 A/Bs (34 of 111, 28 of 110).  MetaSchedule binds such a loop to blockIdx (every bind of the H200
harvest and the committed CUDA databases).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), TVM, the codec, llguidance over SmolLM2's
tokenizer.
"""
from __future__ import annotations

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, end_check, lines_through, model_script_lines, prefix_state, real_records
from dragon_testkit import tvm_accepts

HEAD = "blk out\nblk root\nloops b0 3\n"  # the matmul's block `out` and its loops i (l0), j (l1), k (l2), untiled


@pytest.fixture(scope="module")
def record():
    from little_dragon.generation.constrained import Workload

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_simt_db")))
    return mod, target, Workload(mod, target), model_script_lines(tj)


def test_a_thread_axis_on_the_outermost_loop_fails_at_post(record):
    """Why the rule: TVM binds the outermost loop to threadIdx.x (the line applies), and the script's `post *` fails in
    RewriteUnboundBlock; the same loop bound to an inner loop's axis later is what MetaSchedule's schedules do."""
    mod, target, _, _ = record
    assert tvm_accepts(mod, HEAD + "bind l0 tx\n")
    verdict = end_check(mod, HEAD + "bind l0 tx\npost *\n", target)
    assert "RewriteUnboundBlock" in verdict and "fuse" in verdict, verdict


def test_the_state_knows_the_outermost_loops(record):
    """``loop_top``: the loops right under the root block, and the fused loop of the real tiling's outer loops; the
    inner ones are not."""
    mod, _, _, lines = record
    assert prefix_state(mod, HEAD).loop_top == frozenset({0})
    state = prefix_state(mod, lines_through(lines, "fuse l3 l8"))
    assert 16 in state.loop_top and not {4, 5, 8, 9, 10} & state.loop_top, state.loop_top


def test_the_mask_binds_the_outermost_loop_to_blockidx_only(engine, smollm2, record, monkeypatch):
    """Under the rule `bind l0 tx` and `bind l0 vx` are refused and `bind l0 bx` allowed, an inner loop keeps every
    axis, and the real record's binds (`bind l16 bx` of its outer fused loop, then vx and tx inside) all pass; without
    the rule the thread axes on l0 are allowed again."""
    from little_dragon.generation import constrained

    _, _, wl, lines = record
    for bad in ("bind l0 tx\n", "bind l0 vx\n", "bind l0 threadIdx.y\n"):
        assert not allowed_by_mask(engine, wl, smollm2, HEAD + bad), bad
    for good in ("bind l0 bx\n", "bind l0 blockIdx.y\n", "bind l1 tx\n", "bind l1 vx\n"):
        assert allowed_by_mask(engine, wl, smollm2, HEAD + good), good
    assert allowed_by_mask(engine, wl, smollm2, lines_through(lines, "bind l18 tx"))
    monkeypatch.setattr(constrained, "OUTERMOST_BLOCK_IDX", False)
    assert allowed_by_mask(engine, wl, smollm2, HEAD + "bind l0 tx\n")


def test_the_rule_in_the_line_grammar():
    """The grammar: an outermost data-parallel loop gets its own rule of blockIdx axes (minus the nested ones'), an
    outermost reduction loop keeps threadIdx (a cross-thread reduction: the post-processor puts a unit loop above it),
    inner loops stay in the shared rule; on a CPU target (no blockIdx) nothing changes."""
    from little_dragon.generation.grammar_line import _parallel_rules

    class State:
        loops = {0: 64, 1: 32, 2: 16}
        loop_iters = {0: "S", 1: "S", 2: "R"}
        loop_mixed: frozenset = frozenset()
        loop_unpipelined: frozenset = frozenset()
        loop_nested_axes: dict = {}
        loop_bound: frozenset = frozenset()
        loop_top = frozenset({0, 2})
        cpu = False

    rules = _parallel_rules(State())
    bn0 = next(r for r in rules if r.startswith("bn0:"))
    assert '"bx"' in bn0 and '"blockIdx.y"' in bn0 and "tx" not in bn0 and "vthread" not in bn0, bn0
    assert 'BPAR: "l1"' in rules and 'BRED: "l2"' in rules
    State.loop_nested_axes = {0: frozenset({"blockIdx.x"})}
    bn0 = next(r for r in _parallel_rules(State()) if r.startswith("bn0:"))
    assert '"bx"' not in bn0 and '"by"' in bn0, bn0
    State.cpu, State.loop_nested_axes = True, {}
    assert 'BPAR: "l0" | "l1"' in _parallel_rules(State())
