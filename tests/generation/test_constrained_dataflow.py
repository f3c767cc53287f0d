"""A line that moves a block may not leave a block reading a buffer before the block that writes it runs.

TVM's compute-at primitives check one side of the moved block: `rat b l` (reverse_compute_at) that its producers are
under the loop, not that its consumers still run after it.  Session 21's CPU sealed evaluation scored two wrong
results made so (``rat`` of a softmax's `qk` producer, of rms_norm's `T_cast`, each under a later reduction's loop
while a consumer ran before that loop): TVM applied the line, the post-processors and the build passed the kernel,
and it read memory nobody had written.  The constraint now refuses such a line at its end, as if TVM had
(``schedule_worker.prefix_facts``, ``constrain_state.read_before_written``), so it is drawn again or the attempt ends
before it.

Real parts: TVM (the schedule, its build for llvm and the kernel's numbers against numpy), the codec, llguidance over
SmolLM2's tokenizer, the committed real MetaSchedule databases.
"""
from __future__ import annotations

import json

import numpy as np
from dragon_testkit import CODEC_DATA, feed_constraint, prim_module, real_records, tvm_accepts

# B = 2A, C = B + 1, E = row sums of C, D = C / E.  `rat b0 l0` moves B under E's row loop: B's producers (none) are
# under it, so TVM applies it; C, which reads B, runs before that loop.  `rat` of B under C's row loop is fine.
PAST_ITS_CONSUMER = "blk B\nblk E\nloops b1 2\nrat b0 l0\n"
UNDER_ITS_CONSUMER = "blk B\nblk C\nloops b1 2\nrat b0 l0\n"


def _tensors():
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    b = te.compute((64, 256), lambda i, j: a[i, j] * 2.0, name="B")
    c = te.compute((64, 256), lambda i, j: b[i, j] + 1.0, name="C")
    k = te.reduce_axis((0, 256), name="k")
    e = te.compute((64,), lambda i: te.sum(c[i, k], axis=k), name="E")
    return [a, te.compute((64, 256), lambda i, j: c[i, j] / e[i], name="D")]


def _schedule(mod, text):
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    return replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch


def _computes_right(sch) -> bool:
    import tvm

    a = np.random.default_rng(0).random((64, 256), dtype=np.float32)
    d = tvm.runtime.tensor(np.zeros((64, 256), np.float32))
    tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), d)
    c = a * 2 + 1
    return bool(np.allclose(d.numpy(), c / c.sum(1, keepdims=True), rtol=1e-4))


def test_a_block_moved_past_its_consumer_is_refused(engine, smollm2):
    """TVM applies `rat` of B under E's loop and the kernel computes wrong numbers; the constraint allows every token
    of the line (the rule needs the applied schedule) and refuses it at its end, naming reader, buffer and writer.
    B moved under its consumer C's loop reads and computes right, and the constraint lets it be."""
    from little_dragon.generation.constrain_state import read_before_written
    from little_dragon.generation.constrained import Workload, clear_caches

    clear_caches()
    mod = prim_module(_tensors())
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))

    assert tvm_accepts(mod, PAST_ITS_CONSUMER)
    sch = _schedule(mod, PAST_ITS_CONSUMER)
    assert read_before_written(sch) == ["C", "B", "B"]
    assert not _computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, PAST_ITS_CONSUMER)
    assert where is None and c.dead and c.error.startswith("apply: block C would read B before block B writes it"), \
        (where, c.error)
    assert c.stats.rejected_apply == 1

    sch = _schedule(mod, UNDER_ITS_CONSUMER)
    assert read_before_written(sch) == [] and _computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, UNDER_ITS_CONSUMER)
    assert where is None and not c.dead, (where, c.error)


def _rms_tensors():
    """E = row sums of A, S = 1 / E, D = A * S: rms_norm's shape (session 23's CPU sealed `reindex` wrong results)."""
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    e = te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="E")
    s = te.compute((64,), lambda i: 1.0 / e[i], name="S")
    return [a, te.compute((64, 256), lambda i, j: a[i, j] * s[i], name="D")]


# E computed at S's loop, then S's read of E given a copy stage: TVM's ReIndex puts the copy block before S's whole
# loop nest, so it reads E before E (now inside that nest) is written.
REINDEX_PAST_ITS_PRODUCER = "blk E\nblk S\nloops b1 1\nat b0 l0\nreindex b1 r0\n"


def test_a_copy_stage_placed_before_its_producer_is_refused(engine, smollm2):
    """`reindex` places a block too: TVM applies it past a producer computed at the reindexed block's loop, and the
    kernel leaves its output wrong (session 23: two CPU sealed wrong results, NaN outputs).  The constraint refuses
    the line at its end; the same `reindex` without the `at` computes right and passes."""
    from little_dragon.generation.constrain_state import read_before_written
    from little_dragon.generation.constrained import Workload, clear_caches

    def computes_right(sch) -> bool:
        import tvm

        a = np.random.default_rng(0).random((64, 256), dtype=np.float32)
        d = tvm.runtime.tensor(np.full((64, 256), np.nan, np.float32))
        tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), d)
        return bool(np.allclose(d.numpy(), a / a.sum(1, keepdims=True), rtol=1e-4))

    clear_caches()
    mod = prim_module(_rms_tensors())
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    assert tvm_accepts(mod, REINDEX_PAST_ITS_PRODUCER)
    sch = _schedule(mod, REINDEX_PAST_ITS_PRODUCER)
    assert read_before_written(sch) == ["E_reindex_reindex", "E", "E"] and not computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, REINDEX_PAST_ITS_PRODUCER)
    assert where is None and c.dead and c.error.startswith("apply: block E_reindex_reindex would read E before block "
                                                           "E writes it"), (where, c.error)

    alone = "blk E\nblk S\nreindex b1 r0\n"
    sch = _schedule(mod, alone)
    assert read_before_written(sch) == [] and computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, alone)
    assert where is None and not c.dead, (where, c.error)


def test_the_refused_line_is_drawn_again(engine, smollm2):
    """With a line retry left, the refused `rat` line is taken back like any line TVM refuses (its tokens dropped,
    the reason counted), and the attempt goes on from the line's start."""
    from little_dragon.generation.constrained import ScriptConstraint, Workload

    mod = prim_module(_tensors())
    c = ScriptConstraint(engine, Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2})))
    c.line_retries = 1
    for t in smollm2(PAST_ITS_CONSUMER, add_special_tokens=False)["input_ids"]:
        c.advance(t)
    assert not c.dead and c.taken_back() > 0 and c.text == "blk B\nblk E\nloops b1 2\n", c.error
    assert any("would read B before block B writes it" in r for r in c.stats.retry_reasons), c.stats.retry_reasons


def test_real_records_read_nothing_before_it_is_written():
    """Every committed MetaSchedule record (llvm and CUDA tensor cores), after each of its lines that places a block:
    no block reads a buffer before its writer runs, and no reduction sits under a loop it does not use where the
    post-processing would hoist its init; after each line that adds a block, no block name is given twice (the rules
    refuse none of them; the real-records acceptance test feeds them through the constraint too)."""
    from little_dragon.codec import encode
    from little_dragon.generation.constrain_state import read_before_written, reduction_restarted_by_loop
    from little_dragon.generation.schedule_worker import MAKES_BLOCKS, MOVES_BLOCKS, repeated_name
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    dbs = sorted((CODEC_DATA / "real_llvm_db").iterdir()) + [CODEC_DATA / "real_cuda_valid_db",
                                                              CODEC_DATA / "real_cuda_db"]
    moves = 0
    for db in dbs:
        for name, mod, _, trace_json in real_records(db):
            lines = encode(trace_json).splitlines()
            lines = lines[:lines.index("post")] if "post" in lines else [ln for ln in lines if ln != "post *"]
            for k, line in enumerate(lines):
                keyword = line.split(" ", 1)[0]
                if keyword in MOVES_BLOCKS or keyword in MAKES_BLOCKS:
                    sch = _schedule(mod, "\n".join(lines[:k + 1]) + "\n")
                    assert read_before_written(sch) == [] and reduction_restarted_by_loop(sch.mod) == [], (name, line)
                    assert repeated_name(mod, sch.mod) == "", (name, line)
                    moves += 1
    assert moves >= 10, moves


def test_an_accumulation_nothing_initializes_is_refused(engine, smollm2):
    """`reindex` of the update block inside a blockized row sum gives it a fresh scalar to accumulate into, while the
    outer block's init still writes the old buffer: TVM applies it, and the sum starts from garbage (session 24's CPU
    sealed `attention_score` wrong result, a blockized softmax sum).  The constraint refuses the line at its end; the
    blockize alone computes right and passes."""
    import tvm
    from tvm import te

    from little_dragon.generation.constrain_state import read_before_written
    from little_dragon.generation.constrained import Workload, clear_caches

    a = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    mod = prim_module([a, te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="E")])

    def computes_right(sch) -> bool:
        x = np.random.default_rng(0).random((64, 256), dtype=np.float32)
        out = tvm.runtime.tensor(np.full((64,), np.nan, np.float32))
        tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(x), out)
        return bool(np.allclose(out.numpy(), x.sum(1), rtol=1e-4))

    clear_caches()
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    blockized = "blk E\nloops b0 2\nblockize l1\n"
    uninitialized = blockized + "reindex b0 w0\n"
    assert tvm_accepts(mod, uninitialized)
    sch = _schedule(mod, uninitialized)
    assert read_before_written(sch)[:2] == ["E", "E_reindex"] and not computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, uninitialized)
    assert where is None and c.dead and "nothing initializes E_reindex" in c.error, (where, c.error)
    sch = _schedule(mod, blockized)
    assert read_before_written(sch) == [] and computes_right(sch)
    where, c = feed_constraint(engine, wl, smollm2, blockized)
    assert where is None and not c.dead, (where, c.error)
