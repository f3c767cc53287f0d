"""`tensorize` takes a registered tensor intrinsic (``kinds.TENSOR_INTRINSICS``): the abbreviated ones (`$sync`) or
another of TVM's written out.  Session 24's CPU sealed runs had 5 of 136 attempts end on `tensorize b0 shared.dyn`,
`tensorize b3 l58` and the like (TVM: "TensorIntrin 'l58' is not registered").

Real parts: the committed CUDA tensor-core record, the codec, llguidance over SmolLM2's tokenizer, TVM's verdict.
"""
from __future__ import annotations

from dragon_testkit import CODEC_DATA, allowed_by_mask, real_prefixes, tvm_accepts


def test_only_registered_intrinsics_are_allowed(engine, smollm2):
    """After the real record's lines up to its first tensorization annotation: `tensorize` of its block with a
    registered intrinsic (abbreviated, or written out bare or quoted) is allowed (TVM's pattern check decides at the
    line's end); with a loop name, a scope, an unknown `$name` or a near miss it is masked, and TVM refuses those."""
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    name, mod, wl, head, real = next(real_prefixes(CODEC_DATA / "real_cuda_db", ("ann b",), limit=1))
    block = real.split()[1]
    for other in ("$sync", "$fill", "dot_16x4_vnni", '"dot_16x4_vnni"'):
        assert allowed_by_mask(engine, wl, smollm2, head + f"tensorize {block} {other}\n"), other
    for bad in ("l58", "shared.dyn", '"global"', "dot_16x4_vnni_x"):
        line = f"tensorize {block} {bad}\n"
        assert not allowed_by_mask(engine, wl, smollm2, head + line), bad
        assert not tvm_accepts(mod, head + line), bad
    assert not allowed_by_mask(engine, wl, smollm2, head + f"tensorize {block} $nope\n")  # the codec's own refusal
