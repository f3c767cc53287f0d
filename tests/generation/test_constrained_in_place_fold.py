"""On a CPU target the end check refuses a kernel that TVM's StorageRewrite miscompiles.

StorageRewrite folds a buffer into another in place when one statement last reads the first and first writes the
second at the same index, assuming each element is written once (apache/tvm#759).  After `at` and `inline` lines an
rms_norm's `rsqrt[i] = f(T_multiply_red[i])` runs under a loop over j that it does not use: folded, its second run
reads its own output.  MetaSchedule's builder compiles the same wrong kernel, so the judge's verdict (wrong result) is
right; 7 of session 24's 672 CPU sealed attempts ended so.  The end check builds such a kernel with and without the
pass and refuses it when the two disagree (``constrain_state.in_place_fold_candidate``,
``tvmx.build.storage_rewrite_changes_results``, ``schedule_worker.finish_check``).

Real parts: TVM (schedule, llvm post-processors, builds with and without the pass, the kernels run), the codec,
numpy's answer, the committed real llvm MetaSchedule records.
"""
from __future__ import annotations

import numpy as np
from dragon_testkit import CODEC_DATA, prim_module, real_records

TARGET = {"kind": "llvm", "num-cores": 2}
# session 24's sealed attempt, cut where its kernel first goes wrong (`inline b4`: the squares into their row sums)
SCRIPT = ("blk root\nblk T_cast\nblk rsqrt\nblk T_cast_2\nann b1 producer 1\nloops b1 2\nat b2 = 7\nprods b3 1\n"
          "unann b1 producer\nat b3 = 1\nat b3 = 1\nprods b3 1\n")
FOLDED = SCRIPT + "inline b4\n"


def _rms_norm():
    from tvm import te, tirx

    a = te.placeholder((64, 256), "float16", name="A")
    b = te.placeholder((256,), "float16", name="B")
    c = te.compute((64, 256), lambda i, j: a[i, j].astype("float32"), name="T_cast")
    m = te.compute((64, 256), lambda i, j: c[i, j] * c[i, j], name="T_multiply")
    k = te.reduce_axis((0, 256), name="k")
    red = te.compute((64,), lambda i: te.sum(m[i, k], axis=k), name="T_multiply_red")
    rs = te.compute((64,), lambda i: tirx.rsqrt(red[i] / 256.0 + 1e-5), name="rsqrt")
    cb = te.compute((256,), lambda j: b[j].astype("float32"), name="T_cast_1")
    n = te.compute((64, 256), lambda i, j: rs[i] * c[i, j] * cb[j], name="T_rms_norm")
    return prim_module([a, b, te.compute((64, 256), lambda i, j: n[i, j].astype("float16"), name="T_cast_2")])


def _computes_right(sch, storage_rewrite: bool) -> bool:
    import tvm

    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (64, 256)).astype("float16"), rng.uniform(-1, 1, 256).astype("float16")
    out = tvm.runtime.tensor(np.zeros((64, 256), "float16"))
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": not storage_rewrite}):
        kernel = tvm.tirx.build(sch.mod, target=tvm.target.Target(TARGET))
    kernel(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    x = a.astype("float32")
    want = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5) * b.astype("float32")
    return bool(np.allclose(out.numpy().astype("float32"), want, rtol=2e-2, atol=2e-2))


def test_the_fold_miscompiles_and_the_end_check_refuses_it():
    import tvm

    from little_dragon import codec
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.generation.schedule_worker import finish_check
    from little_dragon.tvmx.schedule import fresh_schedule

    mod = _rms_norm()
    context = PostprocContext(mod, tvm.target.Target(TARGET))
    sch = codec.apply(FOLDED + "post *\n", fresh_schedule(mod), context)
    assert not _computes_right(sch, storage_rewrite=True) and _computes_right(sch, storage_rewrite=False)
    why = finish_check(mod, context, FOLDED + "post *\n")
    assert why.startswith("in-place fold: TVM's StorageRewrite folds T_multiply_red into the buffer block rsqrt "
                          "writes"), why
    sch = codec.apply(SCRIPT + "post *\n", fresh_schedule(mod), context)
    assert _computes_right(sch, storage_rewrite=True)
    assert finish_check(mod, context, SCRIPT + "post *\n") == ""


def test_real_llvm_records_build_alike_with_and_without_the_pass():
    """The committed llvm MetaSchedule records: none is refused (the candidates among them compute the same both
    ways)."""
    import tvm

    from little_dragon.codec import PostprocContext, encode
    from little_dragon.generation.schedule_worker import finish_check

    n = 0
    for db in sorted((CODEC_DATA / "real_llvm_db").iterdir()):
        for name, mod, target, trace_json in real_records(db):
            text = encode(trace_json)
            text = text[:text.index("\npost\n") + 1] + "post *\n" if "\npost\n" in text else text
            assert finish_check(mod, PostprocContext(mod, tvm.target.Target(target)), text) == "", name
            n += 1
    assert n >= 4, n
