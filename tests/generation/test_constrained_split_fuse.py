"""`split` and `fuse` under the constraint (issue 16): TVM's Split and Fuse refuse a loop with an annotation or a
thread binding, and Fuse joins a loop only with the loop that is its whole body, outer first (its
``OuterNotInnerParent`` / ``NotOnlyChildError``). The constraint knows both from the live schedule
(``ScheduleState.loop_pinned`` / ``loop_child``). On the H200 (session 10), 21 of 26 first-pass rejections of a
constrained SmolLM2 were a `fuse` of loops in the wrong order (`fuse l23 l22`).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM's verdicts on a fresh
schedule, llguidance.
"""
from __future__ import annotations

import itertools

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, feed_constraint, prefix_state, real_prefixes, tvm_accepts


def test_fuse_takes_chains_of_only_children_outer_first(engine, smollm2):
    """At real prefixes (right before a real record's `split`/`fuse`): every `fuse` of two live loops the mask
    forbids is one TVM refuses; every outer-then-only-child pair is allowed; the reversed pair (the H200's
    `fuse l23 l22`) is forbidden and refused; a three-loop chain is allowed where one exists."""
    forbidden = chains = reversed_pairs = 0
    for _, mod, wl, head, _ in real_prefixes(DATA / "real_cuda_db", ("split", "fuse"), limit=3):
        st = prefix_state(mod, head)
        assert st.loop_child, "a real CUDA prefix has nested loops"
        for a, b in itertools.permutations(sorted(st.loops), 2):
            line = f"fuse l{a} l{b}\n"
            ok = allowed_by_mask(engine, wl, smollm2, head + line)
            if b in st.loop_child.get(a, ()) and not {a, b} & st.loop_pinned:
                assert ok, (head[-200:], line)
                chains += 1
            if not ok:
                forbidden += 1
                assert not tvm_accepts(mod, head + line), (head[-200:], line)
            if a in st.loop_child.get(b, ()):
                assert not ok, line
                reversed_pairs += 1
        for a, kids in st.loop_child.items():
            for b in kids:
                for c in st.loop_child.get(b, ()):
                    line = f"fuse l{a} l{b} l{c}\n"
                    assert allowed_by_mask(engine, wl, smollm2, head + line) == tvm_accepts(mod, head + line), line
    assert chains and forbidden and reversed_pairs, (chains, forbidden, reversed_pairs)


def test_a_bound_loop_is_neither_split_nor_fused(engine, smollm2):
    """Right after a real `bind` line: the bound loop is pinned; `split` and `fuse` of it are forbidden and TVM
    refuses them; an unbound loop's `split` stays allowed."""
    seen = 0
    for _, mod, wl, head, line in real_prefixes(DATA / "real_cuda_db", ("bind",), limit=2):
        head += line + "\n"
        st = prefix_state(mod, head)
        bound = int(line.split()[1][1:])
        assert bound in st.loop_pinned, (line, sorted(st.loop_pinned))
        for text in (f"split l{bound} _ 2\n", f"fuse l{bound}\n"):
            assert not allowed_by_mask(engine, wl, smollm2, head + text), text
            assert not tvm_accepts(mod, head + text), text
        free = [k for k, e in st.loops.items() if k not in st.loop_pinned and e and e % 2 == 0]
        assert free and allowed_by_mask(engine, wl, smollm2, head + f"split l{free[0]} _ 2\n")
        seen += 1
    assert seen


def test_split_and_fuse_flags_are_booleans(engine, smollm2):
    """`fuse l l pui=_` decodes, and TVM's Fuse then crashes the process (SIGSEGV) on the None flag (the tiny model
    wrote it in session 10's CPU sealed run; the evaluation died): the constraint lets only 0/1 (or true/false)
    follow `pui=` and `dp=`."""
    import json

    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon import codec
    from little_dragon.generation.constrained import Workload

    wl = Workload(prim_module(matmul_tensors(64)), json.dumps({"kind": "llvm", "num-cores": 2}))
    head = "blk C\nloops b0 3\n"
    for line in ("fuse l0 l1 pui=_", "fuse l0 l1 pui= _", "split l0 _ 4 dp=_", 'split l0 _ 4 pui="1"'):
        codec.decode(head + line + "\n", codec.SyntaxOnlyContext())  # the codec reads it
        assert feed_constraint(engine, wl, smollm2, head + line + "\n")[0] is not None, line
    for line in ("fuse l0 l1 pui=0", "fuse l0 l1 pui=1", "split l0 _ 4 pui=1 dp=0"):
        why, c = feed_constraint(engine, wl, smollm2, head + line + "\n")
        assert why is None and not c.dead, (line, why, c.error)
