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
    from tvm.s_tir import meta_schedule as ms

    return without_sanity_check(ms.builder.LocalBuilder)(max_workers=max_workers, timeout_sec=timeout_sec,
                                                         f_build=fast_build)


_UNCHECKED: dict[Any, Any] = {}


def without_sanity_check(local_cls: Any) -> Any:
    """MetaSchedule's LocalBuilder or LocalRunner class with its start-up ``_sanity_check`` (a popen round
    trip) turned off; the first real build or measurement exercises the same path."""
    if local_cls not in _UNCHECKED:
        from tvm.ir.utils import derived_object

        @derived_object
        class Unchecked(local_cls._cls):  # the class behind TVM's derived_object wrapper
            def _sanity_check(self) -> None:
                pass

        Unchecked.__name__ = f"Unchecked{local_cls._cls.__name__}"
        _UNCHECKED[local_cls] = Unchecked
    return _UNCHECKED[local_cls]


def import_tensor_intrinsics() -> None:
    """Register the tensor-core intrinsics (needed to load or apply tensor-core traces); once per process.

    The module parses ~200 TVMScript intrinsics, and each ``@T.prim_func`` calls ``inspect.stack()``, which
    builds source context for every frame of the (deep, import-machinery) stack: ``getsourcefile`` scans all
    of ``sys.modules`` for frames of generated code. In a process that has imported the project (~2,000
    modules) that took 361 s under load here, 38 s with ``_light_stack`` (same machine, same load). TVM reads
    only the third frame's source line (``is_defined_in_class``) and the frames' locals (closure
    variables), which ``_light_stack`` keeps."""
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    import inspect

    saved = inspect.stack
    inspect.stack = _light_stack
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.stack = saved


def _light_stack(context: int = 1) -> list:
    """``inspect.stack()`` with full frame info (source context) for the innermost three frames only."""
    import inspect
    import sys

    frame = sys._getframe(1)
    out: list = []
    while frame is not None:
        if len(out) < 3:
            info = inspect.getframeinfo(frame, context)
            out.append(inspect.FrameInfo(frame, *info, positions=info.positions))
        else:
            code = frame.f_code
            out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None,
                                         positions=None))
        frame = frame.f_back
    return out
