"""A target's MetaSchedule post-processors, and applying a trace the way tuning does.

MetaSchedule builds a candidate by replaying the *sampled* trace (everything before ``EnterPostproc``) on a
fresh schedule of the workload, entering post-processing, and running the target's post-processors once, in
order (``ThreadedTraceApply``): each both rewrites the schedule and checks it; the first that returns False
rejects the candidate.  A database record's trace already ends with ``EnterPostproc`` and what those
post-processors appended, so replaying the whole record and post-processing *again* is wrong (an annotation
such as ``meta_schedule.cooperative_fetch`` is consumed the first time: ``IndexError: Cannot find
annotation key``), and so is running only ``VerifyGPUCode`` on the replayed record (the tensor-core list
verifies *before* ``RewriteTensorize``).  ``split_postproc`` + ``run_postprocs`` with ``target_postprocs`` is
the one correct way, shared by the codec's ``post *`` and the evaluator.

The list is the one ``tune_tir``'s ``post-order-apply`` space generator picks "from-target" (TVM 0.27's
``GetRuleKindFromTarget``, checked against a real ``TuneContext``: llvm -> ``llvm``; CUDA ``sm_75`` and
newer -> ``cuda-tensorcore``, older -> ``cuda``), built without ``TuneContext.__init__``, which imports
``tvm.s_tir.tensor_intrin`` (13-75 s) even where nothing tensorizes.
"""
from __future__ import annotations

import re
from typing import Any

from little_dragon.tvmx.errors import tvm_error_reason

POSTPROC_MARKER = "EnterPostproc"


def rule_kind(target: Any) -> str:
    """MetaSchedule's rule/post-processor kind for ``target`` (a ``tvm.target.Target``)."""
    kind = target.kind.name
    if kind == "llvm":
        return "llvm"
    if kind == "cuda":
        m = re.fullmatch(r"sm_(\d+)a?", str(target.attrs.get("arch", "")))
        return "cuda-tensorcore" if m and int(m.group(1)) >= 75 else "cuda"
    raise ValueError(f"no MetaSchedule post-processor list for target kind {kind!r} (llvm and cuda are supported)")


def light_tune_context(mod: Any, target: Any, space_generator: Any = None, rand_state: int = 0) -> Any:
    """A TuneContext through the FFI constructor, without the tensor-intrinsic import of ``__init__``."""
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
    from tvm.s_tir.meta_schedule.tune_context import TuneContext

    ctx = TuneContext.__new__(TuneContext)
    ctx.__init_handle_by_constructor__(_ffi_api.TuneContext, mod, target, space_generator, None, "main", 1,
                                       rand_state, get_logging_func(get_logger("little_dragon.tvmx")))
    _ffi_api.TuneContextInitialize(ctx)
    return ctx


def as_target(target: Any) -> Any:
    import json

    import tvm

    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str):
        target = json.loads(target) if target.lstrip().startswith("{") else {"kind": target}
    return tvm.target.Target(target)


class Postprocs(list):
    """A target's post-processors (a list, in tuning order) and that target: VerifyGPUCode keeps its target to itself,
    and ``run_postprocs`` needs it to say why VerifyGPUCode refused a schedule."""

    def __init__(self, procs: Any, target: Any):
        super().__init__(procs)
        self.target = target


def target_postprocs(mod: Any, target: Any) -> Postprocs:
    """The target's post-processors, in tuning order, initialised for ``mod`` (an IRModule)."""
    from tvm.s_tir import meta_schedule as ms

    tgt = as_target(target)
    ctx = light_tune_context(mod, tgt)
    procs = ms.postproc.Postproc.create(rule_kind(tgt))
    for p in procs:
        p._initialize_with_tune_context(ctx)
    return Postprocs(procs, tgt)


def split_postproc(trace_json: list) -> tuple[list, list | None]:
    """``[insts, decisions]`` -> (the sampled part before ``EnterPostproc``, the written post-processing
    section from ``EnterPostproc`` on, or None when the trace has none)."""
    insts, decisions = trace_json
    for k, inst in enumerate(insts):
        if inst[0] == POSTPROC_MARKER:
            return [list(insts[:k]), [d for d in decisions if d[0] < k]], list(insts[k:])
    return [list(insts), list(decisions)], None


def needs_tensor_intrinsics(trace_json: list) -> bool:
    """Does applying or post-processing this trace need the registered tensor intrinsics?"""
    return any(inst[0] == "Tensorize" or (inst[0] == "Annotate" and "auto_tensorize" in str(inst[2]))
               for inst in trace_json[0])


class PostprocRejected(Exception):
    """A post-processor returned False (it rejects the schedule; ``why``, where known, says what it refused) or raised
    (``reason``, the error's text); ``name`` says which."""

    def __init__(self, name: str, reason: str = "", why: str = ""):
        super().__init__(f"post-processor {name} " + (f"failed: {reason}" if reason else "rejects the schedule"
                                                      + (f": {why}" if why else "")))
        self.name = name
        self.reason = reason
        self.why = why


# The root-block annotations RewriteParallelVectorizeUnroll consumes.  TVM 0.27 (its ParseAnnotation) reads each
# value as an IntImm, -1 when it is not one, and removes only the annotations whose value it read as other than
# -1; its ``while (FindAnnotatedRootBlock(...))`` then finds the same annotation again, forever, growing the
# schedule's symbol table each round: a string, a float or -1 there took a process to 24 GB and the OOM killer
# in seconds (a constrained tiny model wrote `ann b1 parallel "SSRSRS"`).  MetaSchedule writes non-negative
# integers (ParallelizeVectorizeUnroll: core counts, vector widths, sampled unroll steps).
PARALLEL_VECTORIZE_UNROLL_KEYS = ("meta_schedule.parallel", "meta_schedule.vectorize",
                                  "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")


def parallel_vectorize_unroll_error(key: str, value: Any) -> str | None:
    """Why ``value`` (an int, or what the trace JSON holds) cannot be the value of root annotation ``key``, or
    None when it can (also when ``key`` is not one RewriteParallelVectorizeUnroll reads)."""
    if key not in PARALLEL_VECTORIZE_UNROLL_KEYS:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    return (f"annotation {key} = {value!r}: RewriteParallelVectorizeUnroll takes a non-negative integer "
            "(on a string, a float or -1 TVM 0.27 loops forever)")


def check_root_annotations(sch: Any) -> None:
    """Raise PostprocRejected (RewriteParallelVectorizeUnroll) before TVM is asked to post-process a root-block
    annotation it would loop on (``PARALLEL_VECTORIZE_UNROLL_KEYS``)."""
    from tvm.tirx import IntImm, PrimFunc

    for gv, func in sch.mod.functions.items():
        if not isinstance(func, PrimFunc) or not hasattr(func.body, "block"):
            continue
        block = func.body.block
        for key, value in block.annotations.items():
            v = int(value.value) if isinstance(value, IntImm) else value
            why = parallel_vectorize_unroll_error(str(key), v)
            if why is not None:
                raise PostprocRejected("RewriteParallelVectorizeUnroll", f"block {block.name_hint} of "
                                       f"{gv.name_hint}: {why}")


def refusal_why(name: str, sch: Any, target: Any) -> str:
    """What post-processor ``name`` refused in ``sch`` (as it saw it) where that can be said (VerifyGPUCode on a
    known target: ``tvmx.verify_gpu``), else ""; never raises (the refusal stands without it)."""
    if name != "VerifyGPUCode" or target is None:
        return ""
    from little_dragon.tvmx.verify_gpu import verify_gpu_code_why

    try:
        return verify_gpu_code_why(sch.mod, target)
    except Exception:  # noqa: BLE001 - an explanation that fails leaves the refusal as TVM gave it
        return ""


def run_postprocs(sch: Any, procs: list) -> None:
    """``enter_postproc()`` and each post-processor once, in order; raises PostprocRejected (with why VerifyGPUCode
    refused, where ``procs`` is ``target_postprocs``'s and so knows its target)."""
    sch.enter_postproc()
    for p in procs:
        name = type(p).__name__
        if name == "RewriteParallelVectorizeUnroll":
            check_root_annotations(sch)
        try:
            ok = p.apply(sch)
        except Exception as e:  # noqa: BLE001  TVM raises several error types
            raise PostprocRejected(name, tvm_error_reason(e)) from None
        if not ok:
            raise PostprocRejected(name, why=refusal_why(name, sch, getattr(procs, "target", None)))
