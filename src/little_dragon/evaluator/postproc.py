"""MetaSchedule's post-processors and verifiers for a target, without the 13-70 s tensor-intrinsic import.

``TuneContext.__init__`` imports ``tvm.s_tir.tensor_intrin`` unconditionally; post-processors only need
the context's target, so the context is built through the same FFI constructor without that import."""
from __future__ import annotations

from typing import Any


def light_tune_context(mod: Any, target: Any, space_generator: Any = None, rand_state: int = 0):
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
    from tvm.s_tir.meta_schedule.tune_context import TuneContext

    ctx = TuneContext.__new__(TuneContext)
    ctx.__init_handle_by_constructor__(_ffi_api.TuneContext, mod, target, space_generator, None, "main", 1,
                                       rand_state, get_logging_func(get_logger("little_dragon.evaluator")))
    _ffi_api.TuneContextInitialize(ctx)
    return ctx


def postproc_kind(target: Any, trace_text: str = "") -> str:
    kind = target.kind.name
    if kind == "cuda":
        return "cuda-tensorcore" if "ensorize" in trace_text else "cuda"
    return "llvm" if kind == "llvm" else kind


def postprocs_for(mod: Any, target: Any, trace_text: str = "") -> list:
    from tvm.s_tir import meta_schedule as ms

    ctx = light_tune_context(mod, target)
    procs = ms.postproc.Postproc.create(postproc_kind(target, trace_text))
    for p in procs:
        p._initialize_with_tune_context(ctx)
    return procs


def run_postprocs(sch: Any, procs: list) -> str | None:
    """Apply each post-processor; the name of the first that rejects the schedule, or None."""
    for p in procs:
        if not p.apply(sch):
            return type(p).__name__
    return None
