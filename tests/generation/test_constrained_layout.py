"""A `layout` line whose index map folds indices together is refused.

The codec's `inj` option of `layout` (TransformLayout's ``assume_injective_transform``) defaults to true, as
MetaSchedule writes its layout rewrites, and then TVM applies any index map without checking that two indices do not
land on one element.  Session 23's CPU sealed set had such a wrong result: `layout b2 w0 {v_i,v_j,v_k->v_i,v_k}` turned
a softmax's (1, 2, 32) row sums into (1, 32), both heads summed into one.  The constraint applies the line again with
TVM's check on (``schedule_worker.layout_overlap``) and refuses it at its end, as if TVM had.

Real parts: TVM (the schedule, its build for llvm and the kernel's numbers against numpy), the codec, llguidance over
SmolLM2's tokenizer, the committed real MetaSchedule databases.
"""
from __future__ import annotations

import json

import numpy as np
from dragon_testkit import CODEC_DATA, feed_constraint, prim_module, real_records, tvm_accepts

# B = 2A (4, 8, 16), C = B + 1.  Folding B's middle index away makes B (4, 16): all 8 rows write one.
FOLDS = "blk B\nlayout b0 w0 {i0,i1,i2->i0,i2}\n"
PERMUTES = "blk B\nlayout b0 w0 {i0,i1,i2->i2,i0,i1}\n"


def _tensors():
    from tvm import te

    a = te.placeholder((4, 8, 16), name="A")
    b = te.compute((4, 8, 16), lambda i, j, k: a[i, j, k] * 2.0 + j, name="B")
    return [a, te.compute((4, 8, 16), lambda i, j, k: b[i, j, k] + 1.0, name="C")]


def _computes_right(mod, text) -> bool:
    import tvm

    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    sch = replay(mod, codec.decode(text, codec.SyntaxOnlyContext())).sch
    a = np.random.default_rng(0).random((4, 8, 16), dtype=np.float32)
    c = tvm.runtime.tensor(np.zeros((4, 8, 16), np.float32))
    tvm.compile(sch.mod, target="llvm")(tvm.runtime.tensor(a), c)
    return bool(np.allclose(c.numpy(), a * 2 + np.arange(8, dtype=np.float32)[None, :, None] + 1, rtol=1e-5))


def test_a_layout_that_folds_indices_is_refused(engine, smollm2):
    """TVM applies the folding map (the script says it is injective) and the kernel computes wrong numbers; the
    constraint allows every token of the line and refuses it at its end.  A permutation computes right and passes."""
    from little_dragon.generation.constrained import Workload, clear_caches

    clear_caches()
    mod = prim_module(_tensors())
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    assert tvm_accepts(mod, FOLDS) and not _computes_right(mod, FOLDS)
    where, c = feed_constraint(engine, wl, smollm2, FOLDS)
    assert where is None and c.dead and c.error.startswith("apply: the index map is not injective"), (where, c.error)
    assert _computes_right(mod, PERMUTES)
    where, c = feed_constraint(engine, wl, smollm2, PERMUTES)
    assert where is None and not c.dead, (where, c.error)


def test_every_real_layout_passes_the_check():
    """Every `layout` line of the committed real records (CUDA tensor-core and llvm) passes TVM's own check: the rule
    refuses none of them (on session 23's 1,948 records of the H200, llvm and committed databases: 773 with a layout,
    all pass)."""
    from little_dragon.generation.schedule_worker import layout_overlap
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    checked = 0
    for db in ("real_cuda_db", "real_cuda_valid_db", "real_llvm_db"):
        for _, mod, _target, tj in real_records(CODEC_DATA / db):
            for i, inst in enumerate(tj[0]):
                if inst[0] == "TransformLayout":
                    prefix = [tj[0][:i + 1], [[k, d] for k, d in tj[1] if k <= i]]
                    assert layout_overlap(mod, prefix) == "", (i, inst)
                    checked += 1
    assert checked >= 3, checked
