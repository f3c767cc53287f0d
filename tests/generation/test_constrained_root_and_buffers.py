"""The root block and buffer indices under the constraint (issue 16, session 16): TVM refuses GetProducers,
GetConsumers, ComputeAt, ReverseComputeAt, ReverseComputeInline, SampleComputeLocation and DecomposeReduction on the
function's root block, and a buffer index at or past a block's reads (writes) in ReIndex, SetScope, UnsafeSetDType
and StorageAlign. The constraint knows both from the live schedule (``ScheduleState.root_blocks``, ``n_reads``,
``n_writes``). In the CPU sealed runs of session 16, 31 of 76 first-pass rejections were `cons`/`prods`/`at`/`rat`/
`rinline` of the root, and 4-6 a `reindex`/`scope` index past the block's buffers.

Real parts only: the committed MetaSchedule databases (tests/codec/data), the codec, TVM's verdicts, llguidance.
"""
from __future__ import annotations

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import feed_constraint, prefix_state
from dragon_testkit import model_script_lines as _script
from dragon_testkit import real_records as _records
from dragon_testkit import tvm_accepts


def _prefixes(db: str, limit: int = 3):
    """(module, Workload, head, state) right after each of the first ``limit`` records' first `loops` line of a
    non-root block: the root and a loop are live there."""
    from little_dragon.generation.constrained import Workload

    n = 0
    for _, mod, target, tj in _records(DATA / db):
        lines = _script(tj)
        for i, line in enumerate(lines):
            if not line.startswith("loops "):
                continue
            head = "".join(x + "\n" for x in lines[:i + 1])
            st = prefix_state(mod, head)
            if st.root_blocks and st.loops and set(st.blocks) - st.root_blocks:
                yield mod, Workload(mod, target), head, st
                n += 1
            break
        if n >= limit:
            return


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_db"])
def test_the_root_block_is_masked_where_tvm_refuses_it(engine, smollm2, db):
    """At a real prefix: every instruction TVM refuses on the root is masked with the root as its block, and TVM
    does refuse it there; with another block the same instruction is allowed; `loops`/`kids` of the root (which
    TVM answers) stay allowed."""
    seen = 0
    for mod, wl, head, st in _prefixes(db):
        seen += 1
        loop = min(st.loops)
        other = min(set(st.blocks) - st.root_blocks)
        for r in sorted(st.root_blocks):
            for line in (f"prods b{r} 1", f"cons b{r} 1", f"at b{r} l{loop}", f"rat b{r} l{loop}",
                         f"rinline b{r}", f"decomp b{r} l{loop}", f"loc b{r} = 0", f"at b{r} = 0"):
                assert feed_constraint(engine, wl, smollm2, head + line + "\n")[0] is not None, (head, line)
                assert not tvm_accepts(mod, head + line + "\n"), line
            assert feed_constraint(engine, wl, smollm2, head + f"loops b{r} {st.n_loops_above[r]}\n")[0] is None
            assert feed_constraint(engine, wl, smollm2, head + f"kids b{r} {st.n_children[r]}\n")[0] is None
        # `at`/`rat` of a block at a loop its rules take (test_constrained_compute_at.py: `at` needs the block's
        # consumers under the loop, `rat` its producers), where it has one
        at = [f"at b{k} l{m[0]}" for k, m in sorted(st.compute_at.items()) if m][:1]
        at += [f"rat b{k} l{m[0]}" for k, m in sorted(st.reverse_compute_at.items()) if m][:1]
        for prefix in (f"rinline b{other}", *at, f"loc b{other} =",
                       f"decomp b{other} l{loop}", f"prods b{other}", f"cons b{other}"):
            assert feed_constraint(engine, wl, smollm2, head + prefix)[0] is None, (head, prefix)
    assert seen, db


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_db"])
def test_a_buffer_index_past_the_blocks_buffers_is_masked(engine, smollm2, db):
    """`reindex`/`scope`/`setdtype`/`align` of index i: allowed below the block's reads (writes), masked at the
    count, where TVM refuses it; the root (no buffers) is never named."""
    seen = 0
    for mod, wl, head, st in _prefixes(db):
        for k in sorted(set(st.blocks) - st.root_blocks):
            r, w = st.n_reads[k], st.n_writes[k]
            if not w:
                continue
            seen += 1
            for line in (f"reindex b{k} w{w}", f"reindex b{k} r{r}", f"scope b{k} {w} shared",
                         f"setdtype b{k} {w} float16", f"align b{k} {w} 0 16 0"):
                assert feed_constraint(engine, wl, smollm2, head + line + "\n")[0] is not None, (head, line)
                assert not tvm_accepts(mod, head + line + "\n"), line
            for prefix in (f"reindex b{k} w{w - 1}", f"scope b{k} {w - 1}", f"setdtype b{k} {w - 1}",
                           f"align b{k} {w - 1}") + ((f"reindex b{k} r{r - 1}",) if r else ()):
                assert feed_constraint(engine, wl, smollm2, head + prefix)[0] is None, (head, prefix)
        for root in sorted(st.root_blocks):
            assert feed_constraint(engine, wl, smollm2, head + f"reindex b{root} w0\n")[0] is not None
            assert not tvm_accepts(mod, head + f"reindex b{root} w0\n")
    assert seen, db


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_db"])
def test_unannotate_names_a_key_its_block_or_loop_carries(engine, smollm2, db):
    """Right after real records' first `ann` line: `unann` of a key the block (loop) carries is allowed in every form
    the decoder reads as that key, and TVM applies it; the same key on a block that lacks it is masked, and TVM
    refuses it."""
    from little_dragon.generation.constrained import Workload
    from little_dragon.generation.grammar_line import key_forms

    seen = masked = 0
    for _, mod, target, tj in _records(DATA / db):
        lines = _script(tj)
        at = next((i for i, line in enumerate(lines) if line.startswith("ann ")), None)
        if at is None or seen >= 3:
            continue
        head = "".join(x + "\n" for x in lines[:at + 1])
        st, wl = prefix_state(mod, head), Workload(mod, target)
        ref, keys = next(iter(sorted(st.annotations.items())))
        key = sorted(keys)[0]
        seen += 1
        for form in key_forms(key):
            line = f"unann {ref} {form}\n"
            assert feed_constraint(engine, wl, smollm2, head + line)[0] is None, (head, line)
        assert tvm_accepts(mod, head + f"unann {ref} {key_forms(key)[-1]}\n")
        for k in sorted(st.blocks):
            if key in st.annotations.get(f"b{k}", ()):
                continue
            line = f"unann b{k} {key_forms(key)[0]}\n"
            assert feed_constraint(engine, wl, smollm2, head + line)[0] is not None, (head, line)
            assert not tvm_accepts(mod, head + line), line
            masked += 1
    assert seen and masked, (seen, masked)



def test_an_extension_that_writes_into_its_prefix_does_not_leak_into_the_next():
    """The constraint extends a prefix's live schedule on a copy (``constrain_state.extend``); TVM may write into the
    prefix's schedule through that copy (tests/tvmx/test_schedule.py: the root annotated, then a loop split, here in
    one extension). Building on that prefix again must either refuse (the caller then replays the whole prefix) or
    give the facts of a fresh replay, never the kernel the other extension left."""
    import dataclasses

    from dragon_testkit import prim_module, two_block_tensors

    from little_dragon.generation import constrained
    from little_dragon.generation.constrain_state import extend, live_state, replay
    from little_dragon.tvmx.schedule import fingerprint

    mod = prim_module(two_block_tensors())

    def tail(prefix: str, more: str) -> tuple[list, list]:
        n = len(constrained._decode(prefix)[0])
        insts, decisions = constrained._decode(prefix + more)
        return insts[n:], [[i - n, d] for i, d in decisions if i >= n]

    prefix = "blk root\nblk B\n"
    parent = replay(mod, constrained._decode(prefix))
    split = extend(parent, *tail(prefix, "ann b0 producer 1\nloops b1 2\ntile l1 = 8 32\n"))
    assert live_state(split).n_loops_above[1] == 3
    assert fingerprint(parent.sch.mod) != parent.fingerprint      # TVM wrote into the prefix's schedule
    text = prefix + "blk C\n"
    fresh = live_state(replay(mod, constrained._decode(text)))
    assert fresh.n_loops_above[1] == 2
    try:
        again = extend(parent, *tail(prefix, "blk C\n"))
    except RuntimeError:
        return                                                       # refused: the caller replays (as ``fresh``)
    assert dataclasses.asdict(live_state(again)) == dataclasses.asdict(fresh)
