"""A software pipeline only on a loop whose body is a sequence (issue 16, session 44; ``ScheduleState.loop_unsequenced``,
``grammar_line._annotate_loop_rules``, ``constrained.PIPELINE_BODY_RULE``).  TVM's InjectSoftwarePipeline lowers the
stages of a pipelined loop's body, a ``SeqStmt`` (MetaSchedule pipelines the loop it cached both inputs at: the two
copies and the compute); on a loop whose body is one loop nest it raises "The body of the software pipeline should be
SeqStmt", which VerifyGPUCode's lowering reports at `post *` (session 44's H100 A/B: 10 of its 18 VerifyGPUCode refusals
there, each a retry back to the tiling).  The line grammar offers the pipeline's keys on the other loops only.

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), TVM (its schedule, its lowering through
the end check), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, end_check, model_script_lines, prefix_state, real_records, tvm_accepts

# record 0 of real_cuda_simt_db (measured by MetaSchedule): a matmul whose caches of A and B are computed at l13, the
# reduction's outer loop, `fuse l13` naming it l33, then pipelined in three stages; l14, the next reduction loop, holds
# the compute's loop nest alone
PIPELINE = ("ann l33 stage [0 0 2]", "ann l33 order [0 1 2]", "ann l33 async [0]")


@pytest.fixture(scope="module")
def record():
    from little_dragon.generation.constrained import Workload

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_simt_db")))
    lines = model_script_lines(tj)
    assert all(p in lines for p in PIPELINE), lines
    return mod, target, Workload(mod, target), lines


def _text(lines: list[str]) -> str:
    return "".join(x + "\n" for x in lines)


def test_the_pipelined_loop_is_a_sequence_and_the_compute_loop_is_not(record):
    """At the record's `stage` line l33 (the two copies and the compute) is a sequence, l14 (the compute's nest under
    it) is not; the pipeline on l14 applies in TVM and is refused by its lowering at `post *`, the record's passes."""
    mod, target, wl, lines = record
    head = lines[:lines.index(PIPELINE[0])]
    st = prefix_state(mod, _text(head))
    assert 33 not in st.loop_unsequenced and 14 in st.loop_unsequenced, sorted(st.loop_unsequenced)
    assert set(st.loops) - st.loop_unsequenced == {18, 21, 28, 33}  # the thread loop, two copies' outer loops, l33
    moved = [ln.replace("ann l33 ", "ann l14 ") for ln in lines]
    assert tvm_accepts(mod, _text(moved[:-1]))
    refusal = end_check(mod, _text(moved), target)
    assert "VerifyGPUCode" in refusal and "software pipeline should be SeqStmt" in refusal, refusal
    assert not end_check(mod, _text(lines), target)


def test_the_mask_offers_the_pipeline_keys_on_sequences_only(engine, smollm2, record, monkeypatch):
    """Token by token: `ann l14 stage ..` is refused where `ann l33 stage ..` is allowed; the other loop keys stay on
    every loop; with ``PIPELINE_BODY_RULE`` off (the bench's +nopipebody) the stage goes on l14 as before session 44.
    Once l33 carries its stage, its `order` is allowed, and l14 still takes no pipeline key."""
    from little_dragon.generation import constrained

    mod, target, wl, lines = record
    head = _text(lines[:lines.index(PIPELINE[0])])
    assert allowed_by_mask(engine, wl, smollm2, head + PIPELINE[0] + "\n")
    assert not allowed_by_mask(engine, wl, smollm2, head + "ann l14 stage [0 0 2]\n")
    assert allowed_by_mask(engine, wl, smollm2, head + "ann l14 max_step 16\n")
    staged = head + PIPELINE[0] + "\n"
    assert allowed_by_mask(engine, wl, smollm2, staged + PIPELINE[1] + "\n")
    assert not allowed_by_mask(engine, wl, smollm2, staged + "ann l14 order [0 1 2]\n")
    monkeypatch.setattr(constrained, "PIPELINE_BODY_RULE", False)
    constrained.clear_caches()
    try:
        assert allowed_by_mask(engine, wl, smollm2, head + "ann l14 stage [0 0 2]\n")
    finally:
        monkeypatch.setattr(constrained, "PIPELINE_BODY_RULE", True)
        constrained.clear_caches()


def test_the_rule_in_the_line_grammar():
    """While no loop carries a key, `LREF` takes the keys other than the pipeline's and the sequences a list of their
    own with the pipeline's; without an unsequenced loop (or on a CPU, whose loops take no pipeline key) the grammar is
    the one before the rule; once a loop carries a key, an unsequenced loop's group has no pipeline key."""
    from little_dragon.generation.grammar_line import _annotate_loop_rules

    class State:
        loops = {0: 64, 1: 32, 2: 16}
        loop_unpipelined: frozenset = frozenset()
        loop_unsequenced = frozenset({0, 2})
        annotations: dict = {}
        cpu = False

    alts, rules = _annotate_loop_rules(State())
    text = "\n".join(rules)
    assert alts == ["LREF ANNKEYL", "ANNLSEQ ANNKEYLP"], alts
    assert 'ANNLSEQ: "l1"' in text and " stage " in text.split("ANNKEYLP:")[1] and " stage " not in \
        text.split("ANNKEYL:")[1].split("\n")[0], text
    State.loop_unsequenced = frozenset()
    assert _annotate_loop_rules(State())[0] == ["LREF ANNKEYL"]
    State.loop_unsequenced = frozenset({0, 2})
    State.annotations = {"l1": frozenset({"software_pipeline_stage"})}
    alts, rules = _annotate_loop_rules(State())
    groups = {r.split(":")[0]: r for r in rules}
    l0 = next(k for k, r in groups.items() if k.startswith("ANNLREF") and '"l0"' in r)
    l1 = next(k for k, r in groups.items() if k.startswith("ANNLREF") and '"l1"' in r)
    assert " stage " not in groups[l0.replace("ANNLREF", "ANNKEYL")]
    assert " order " in groups[l1.replace("ANNLREF", "ANNKEYL")] and " stage " not in groups[l1.replace("ANNLREF",
                                                                                                         "ANNKEYL")]
    State.cpu = True
    State.annotations = {}
    assert _annotate_loop_rules(State())[0] == ["LREF ANNKEYL"]
