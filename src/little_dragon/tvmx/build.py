"""Building scheduled TensorIR for a target, fast.

MetaSchedule's default build function imports ``tvm.s_tir.tensor_intrin`` (13-22 s) in every fresh builder
worker, so the default ``LocalBuilder`` times out on every candidate.  ``fast_build`` does the same two
steps (strip layout-rewrite blocks, ``tvm.tirx.build``) without that import; the builder pickles it by
reference into its workers.
"""
from __future__ import annotations

from typing import Any


def fast_build(mod: Any, target: Any, _params: Any = None) -> Any:
    """The MetaSchedule ``f_build`` hook: returns a runtime Module (``tvm.compile`` returns an Executable
    that cannot be exported by the builder)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.tirx.build(mod, target=target)


def local_builder(max_workers: int, timeout_sec: float):
    """MetaSchedule's LocalBuilder with ``fast_build``, minus its start-up sanity check (a throw-away popen
    pool that imports TVM only to look up the build function: ~4 s per tuning run on 2 cores). A broken
    build function still shows, as a build error on every candidate."""
    return _quick_builder_class()(max_workers=max_workers, timeout_sec=timeout_sec, f_build=fast_build)


_QUICK_BUILDER = None


def _quick_builder_class():
    global _QUICK_BUILDER
    if _QUICK_BUILDER is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class QuickLocalBuilder(ms.builder.LocalBuilder._cls):  # the class behind TVM's derived_object
            def _sanity_check(self) -> None:
                pass

        _QUICK_BUILDER = QuickLocalBuilder
    return _QUICK_BUILDER


def import_tensor_intrinsics() -> None:
    """Register the tensor-core intrinsics (needed to load or apply tensor-core traces); slow, once."""
    import tvm.s_tir.tensor_intrin  # noqa: F401
