"""Four lines TVM always refuses, masked (session 24, the top reasons the first CPU sealed seed's lines were drawn
again, from the generation log's new refusal table): `unitloop` of the root block ("Cannot add loops on top of the
root block"), a `split` factor of 0 ("All the constant factors are required to be positive"), `blk .. fn=` naming a
function other than `main` ('candidates are: ["main"]': MetaSchedule tunes one function), and `at` of an output block
("The block ... is an output block").  Each forbidden line is one TVM refuses; the line next to it TVM applies is
allowed.

Real parts: a TE kernel made into TensorIR, the codec, TVM's verdicts, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

import pytest
from dragon_testkit import allowed_by_mask, prefix_state, prim_module, tvm_accepts

HEAD = "blk root\nblk B\nblk C\nloops b1 2\nloops b2 2\n"  # b0 root, b1 B, b2 C (the output); l0 l1 B's, l2 l3 C's


def _module():
    from tvm import te

    a = te.placeholder((64, 64), name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="B")
    return prim_module([a, te.compute((64, 64), lambda i, j: b[i, j] + 1.0, name="C")])


@pytest.mark.parametrize("head, refused, applied", [
    (HEAD, "unitloop b0", "unitloop b1"),
    (HEAD, "split l0 0 _", "split l0 4 _"),
    ("", 'blk B fn="other"', 'blk B fn="main"'),  # no lookup yet: `blk B` is not a repeat in its run of lookups
    (HEAD, "at b2 l0", "at b1 l2"),
])
def test_a_line_tvm_always_refuses_is_masked(engine, smollm2, head, refused, applied):
    from little_dragon.generation.constrained import Workload

    mod = _module()
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    assert not tvm_accepts(mod, head + refused + "\n"), refused
    assert not allowed_by_mask(engine, wl, smollm2, head + refused + "\n"), refused
    assert tvm_accepts(mod, head + applied + "\n"), applied
    assert allowed_by_mask(engine, wl, smollm2, head + applied + "\n"), applied


def test_an_output_block_has_no_compute_at_loop_but_keeps_its_reverse_ones():
    st = prefix_state(_module(), HEAD)
    assert st.compute_at[2] == () and 0 in st.reverse_compute_at[2], (st.compute_at, st.reverse_compute_at)
