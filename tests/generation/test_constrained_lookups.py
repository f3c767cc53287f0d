"""No endless `blk` lines (issue 16, session 20). The H200 sealed run of session 20 had 5 attempts (one `rms_norm`
prompt) that wrote `blk` lines until the token budget cut them: 96-121 lines that look blocks up and change nothing,
the evaluator's no_op. A real trace's runs of `blk` lines name each block at most once (7,135 runs of the H200 and CPU
harvests); the constraint allows a run of twice the schedule's block names, then masks `blk`.

Real parts only: a TE kernel made into TensorIR, the codec, TVM's schedule, llguidance, SmolLM2's tokenizer.
"""
from __future__ import annotations

from dragon_testkit import feed_constraint, prefix_state, prim_module


def _bias_relu():
    from tvm import te

    a = te.placeholder((64, 64), "float32", name="A")
    b = te.placeholder((64,), "float32", name="B")
    t = te.compute((64, 64), lambda i, j: a[i, j] + b[j], name="add")
    return [a, b, te.compute((64, 64), lambda i, j: te.max(t[i, j], 0.0), name="relu")]


def test_a_run_of_blk_lines_stops_at_the_block_names(engine, smollm2):
    """3 block names (add, relu, root): 3 `blk` lines in a row are allowed, a 4th is masked (each name once in a run:
    ``test_a_lookup_is_not_written_twice_in_one_run_of_lookups``); any other instruction after them is not, and after
    one, `blk` is allowed again.  The run cap (twice the names) stays behind it for the `fn=` form: when capped the
    line grammar has no `blk` line at all."""
    import dataclasses

    from little_dragon.generation.constrained import Workload
    from little_dragon.generation.grammar_line import line_grammar

    mod = prim_module(_bias_relu())
    wl = Workload(mod, '{"kind": "llvm", "num-cores": 2}')
    three = "blk add\nblk relu\nblk root\n"
    state = prefix_state(mod, "")
    assert len(state.block_names) == 3
    assert feed_constraint(engine, wl, smollm2, three)[0] is None
    refused, _ = feed_constraint(engine, wl, smollm2, three + "blk add\n")
    assert refused is not None and "blk" in refused, refused
    assert feed_constraint(engine, wl, smollm2, three + "loops b0 2\nvec l1\nblk add\n")[0] is None
    assert '"blk"' in line_grammar(state) and '"blk"' not in line_grammar(dataclasses.replace(state, lookups_capped=True))


def test_the_cap_is_never_below_a_real_run():
    """``trailing_lookups`` counts the run that ends a prefix; a run as long as the blocks (MetaSchedule's longest)
    is below the cap on every committed real record's workload."""
    from dragon_testkit import CODEC_DATA, real_records

    from little_dragon.codec import encode
    from little_dragon.generation.constrain_state import LOOKUP_RUN_FACTOR
    from little_dragon.generation.schedule_worker import trailing_lookups

    assert trailing_lookups("blk a\nloops b0 1\nblk a\nblk b\n") == 2 and trailing_lookups("") == 0
    n = 0
    for db in ("real_cuda_valid_db", "real_llvm_db"):
        for _, mod, _target, tj in real_records(CODEC_DATA / db):
            lines = encode(tj).splitlines()
            blocks = len(prefix_state(mod, "").block_names)
            for k in range(1, len(lines) + 1):
                assert trailing_lookups("\n".join(lines[:k]) + "\n") < LOOKUP_RUN_FACTOR * blocks
            n += 1
    assert n >= 5


def test_a_lookup_is_not_written_twice_in_one_run_of_lookups(engine, smollm2):
    """[repeated lookup] Within a run of lookup lines the schedule does not change, so a lookup written again answers
    the same: `blk add` (either name form), `loops b0 2`, `kids b0 0`, `cons b0 1` are masked the second time in a
    run, and allowed again once a line that changes the schedule comes between. No real record repeats one
    (``test_no_real_record_repeats_a_lookup_in_a_run``)."""
    from little_dragon.generation.constrained import Workload

    mod = prim_module(_bias_relu())
    wl = Workload(mod, '{"kind": "llvm", "num-cores": 2}')
    for head, again in (("blk add\n", "blk add\n"), ("blk add\n", 'blk "add"\n'),
                        ("blk add\nloops b0 2\nblk relu\n", "loops b0 2\n"),
                        ("blk add\nkids b0 0\n", "kids b0 0\n"), ("blk add\ncons b0 1\n", "cons b0 1\n")):
        assert feed_constraint(engine, wl, smollm2, head)[0] is None, head
        refused, _ = feed_constraint(engine, wl, smollm2, head + again)
        assert refused is not None, (head, again)
    assert feed_constraint(engine, wl, smollm2, "blk add\nblk relu\nblk root\n")[0] is None
    # a line that changes the schedule ends the run: the same lookups are allowed again after it
    assert feed_constraint(engine, wl, smollm2, "blk add\nloops b0 2\nvec l1\nblk add\nloops b1 2\n")[0] is None


def test_no_real_record_repeats_a_lookup_in_a_run():
    """The rule's premise on every committed real record: no lookup line repeats inside its run of lookups."""
    from dragon_testkit import CODEC_DATA, real_records

    from little_dragon.codec import encode
    from little_dragon.generation.schedule_worker import lookup_run

    n = 0
    for db in ("real_cuda_db", "real_cuda_valid_db", "real_llvm_db"):
        for _, _mod, _target, tj in real_records(CODEC_DATA / db):
            lines = encode(tj).splitlines()
            for k in range(1, len(lines)):
                run = lookup_run("\n".join(lines[:k]) + "\n")
                assert lines[k].strip() not in run, (k, lines[k])
            n += 1
    assert n >= 5
