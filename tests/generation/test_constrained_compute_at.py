"""`at b l` / `rat b l` under the constraint (issue 16): TVM's ComputeAt and ReverseComputeAt take a loop only in the
block's own scope and not above the block (``ScheduleState.compute_at``, ``grammar_line._compute_at_rules``).  Session
19's CPU sealed run left 9 of its 25 failures there, each an attempt's retries spent on such lines.  ComputeAt also needs
every consumer of the block under the loop, ReverseComputeAt every producer (``ScheduleState.reverse_compute_at``):
session 23's `rat` lines without them were half of the validation A/B's line retries and 2 of its sealed apply errors.

Real parts only: the committed MetaSchedule databases (llvm conv2d, a CUDA tensor-core record), the codec, TVM's
verdicts on a fresh schedule, llguidance.
"""
from __future__ import annotations

import re

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, prefix_state, real_prefixes

SCOPE_ERROR = "under the same block scope, and loop not to be the ancestor of block"


def _tvm_error(mod, text: str) -> str:
    """TVM's error applying ``text`` whole to a fresh schedule of ``mod`` ("" when it applies)."""
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    try:
        replay(mod, codec.decode(text, codec.SyntaxOnlyContext()))
        return ""
    except Exception as e:  # noqa: BLE001 - TVM's verdict
        return str(e)


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_db"])
def test_masked_compute_at_lines_are_ones_tvm_refuses_for_their_scope(engine, smollm2, db):
    """Right before a real record's `rat`/`at b l` line: the real line is allowed; for every live block and loop, a
    line the mask forbids is one TVM refuses (for the scope check, the loop outside the block's scope or above it, or for
    a check it makes first); and the rule forbids some that TVM's scope check refuses (else the test is vacuous)."""
    forbidden = checked = scope_refusals = 0
    for name, mod, wl, head, real in real_prefixes(DATA / db, ("rat b", "at b"), limit=1):
        m = re.match(r"(r?at) b(\d+) l\d+", real)
        assert m, real
        assert allowed_by_mask(engine, wl, smollm2, head + real + "\n"), (name, real)
        st = prefix_state(mod, head)
        table = st.compute_at if m.group(1) == "at" else st.reverse_compute_at
        assert table is not None and int(m.group(2)) in table, name
        for k in sorted(table):
            for loop in sorted(st.loops):
                line = f"{m.group(1)} b{k} l{loop}\n"
                checked += 1
                if loop in table[k]:
                    continue  # TVM's other checks decide at the line's end
                forbidden += 1
                assert not allowed_by_mask(engine, wl, smollm2, head + line), (name, line)
                why = _tvm_error(mod, head + line)
                assert why, (name, line)  # TVM refuses it (its scope check, or one it makes first)
                scope_refusals += SCOPE_ERROR in why
    assert checked and forbidden and scope_refusals, (checked, forbidden, scope_refusals)


def test_a_loop_above_the_block_is_masked(engine, smollm2):
    """A block cannot be computed at a loop that encloses it: on the llvm record's prefix (its conv2d block under the
    tiled loops), every loop above the block is masked for `at` and `rat` and TVM refuses it for the scope check; the
    root block is never named."""
    from tvm.s_tir.schedule import LoopRV, SBlockRV, _ffi_api

    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    name, mod, wl, head, real = next(real_prefixes(DATA / "real_llvm_db", ("rat b",), limit=1))
    sch = replay(mod, codec.decode(head, codec.SyntaxOnlyContext())).sch
    st = prefix_state(mod, head)
    rvs = [rv for inst in sch.trace.insts for rv in inst.outputs]
    blocks = [rv for rv in rvs if isinstance(rv, SBlockRV)]
    loops = [rv for rv in rvs if isinstance(rv, LoopRV)]

    def above(k: int) -> list[int]:
        stmts, p = [], _ffi_api.ScheduleGetSRef(sch, blocks[k]).parent
        while p is not None and p.parent is not None:
            stmts.append(p.stmt)
            p = p.parent
        return [j for j in sorted(st.loops) if any(_ffi_api.ScheduleGetSRef(sch, loops[j]).stmt.same_as(a)
                                                    for a in stmts)]

    k, ancestors = next((k, above(k)) for k in sorted(st.compute_at) if above(k))
    for j in ancestors:
        assert j not in st.compute_at[k]
        for mnemonic in ("at", "rat"):
            assert not allowed_by_mask(engine, wl, smollm2, head + f"{mnemonic} b{k} l{j}\n"), (name, k, j)
        assert SCOPE_ERROR in _tvm_error(mod, head + f"rat b{k} l{j}\n"), (name, k, j)
    root = next(b for b in st.blocks if b in st.root_blocks)
    assert root not in st.compute_at
    assert not allowed_by_mask(engine, wl, smollm2, head + f"at b{root} l{sorted(st.loops)[0]}\n")


def test_a_loop_without_the_blocks_producers_or_consumers_is_masked(engine, smollm2):
    """B = 2A, C = B + 1, E = row sums of C, D = C / E.  `rat` of C under B's row loop (its producer B is there) and `at`
    of B under C's row loop (its consumer C is there) are allowed and apply; `rat` of D under B's loop (its producers C
    and E are not there) and `at` of B under E's loop (its consumer C is not there) are masked, and TVM refuses them
    for exactly that."""
    import json

    from tvm import te

    from dragon_testkit import prim_module
    from little_dragon.generation.constrained import Workload

    a = te.placeholder((64, 256), name="A")
    b = te.compute((64, 256), lambda i, j: a[i, j] * 2.0, name="B")
    c = te.compute((64, 256), lambda i, j: b[i, j] + 1.0, name="C")
    k = te.reduce_axis((0, 256), name="k")
    e = te.compute((64,), lambda i: te.sum(c[i, k], axis=k), name="E")
    mod = prim_module([a, te.compute((64, 256), lambda i, j: c[i, j] / e[i], name="D")])
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    # b0 B, b1 C, b2 E, b3 D; l0 l1 B's loops, l2 l3 C's, l4 l5 E's
    head = "blk B\nblk C\nblk E\nblk D\nloops b0 2\nloops b1 2\nloops b2 2\n"
    st = prefix_state(mod, head)
    assert 0 in st.reverse_compute_at[1] and 0 not in st.reverse_compute_at[3], st.reverse_compute_at
    assert 2 in st.compute_at[0] and 4 not in st.compute_at[0], st.compute_at
    for line in ("rat b1 l0", "at b0 l2"):
        assert allowed_by_mask(engine, wl, smollm2, head + line + "\n"), line
        assert _tvm_error(mod, head + line + "\n") == "", line
    for line, who in (("rat b3 l0", "producer"), ("at b0 l4", "consumer")):
        assert not allowed_by_mask(engine, wl, smollm2, head + line + "\n"), line
        assert f"requires all the {who}(s) of the given block to be present under the target loop" in \
            _tvm_error(mod, head + line + "\n"), line
