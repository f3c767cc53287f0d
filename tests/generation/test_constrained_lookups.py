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


def test_a_run_of_blk_lines_stops_at_twice_the_block_names(engine, smollm2):
    """3 block names (add, relu, root): 6 `blk` lines in a row are allowed, the 7th is masked; any other instruction
    after them is not, and after one, `blk` is allowed again."""
    from little_dragon.generation.constrained import Workload

    mod = prim_module(_bias_relu())
    wl = Workload(mod, '{"kind": "llvm", "num-cores": 2}')
    names = ("add", "relu", "root")
    six = "".join(f"blk {names[k % 3]}\n" for k in range(6))
    assert len(prefix_state(mod, "").block_names) == 3
    assert feed_constraint(engine, wl, smollm2, six)[0] is None
    refused, _ = feed_constraint(engine, wl, smollm2, six + "blk add\n")
    assert refused is not None and "blk" in refused, refused
    assert feed_constraint(engine, wl, smollm2, six + "loops b0 2\nblk add\n")[0] is None


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
