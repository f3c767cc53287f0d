"""The baseline every speedup is measured against (shared with the harvest stage).

llvm: the unscheduled workload built as-is.  CUDA: an unscheduled kernel cannot run (no thread binding),
so the baseline is TVM's default GPU schedule, the dlight rules Relax's CUDA pipeline applies
(``tvm.relax.backend.cuda.pipeline``: Matmul, GEMV, Reduction, GeneralReduction, Fallback)."""
from __future__ import annotations

from typing import Any

from little_dragon.tvmx.timing import Latency, TimingConfig

KIND_UNSCHEDULED = "unscheduled"
KIND_DLIGHT = "dlight-default-gpu"


def baseline_module(mod: Any, target: Any) -> tuple[Any, str]:
    """The IRModule to build as the baseline for ``target``, and its kind."""
    import tvm
    from tvm.s_tir import dlight as dl

    tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if tgt.kind.name == "llvm":
        return mod, KIND_UNSCHEDULED
    # dlight's ApplyDefaultSchedule rewrites the IRModule it is given IN PLACE (seen on TVM 0.27): a fresh
    # container keeps the caller's workload unscheduled (the evaluator caches it for every later script;
    # scheduled by a baseline, later replays failed with "Cannot find a block with the name cast")
    fresh = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    with tgt:
        scheduled = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                            dl.gpu.GeneralReduction(), dl.gpu.Fallback())(fresh)
    return scheduled, KIND_DLIGHT


def build_baseline(mod: Any, target: Any) -> tuple[Any, str]:
    import tvm

    from little_dragon.tvmx.build import fast_build

    tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    bmod, kind = baseline_module(mod, tgt)
    return fast_build(bmod, tgt), kind


def measure_baseline(mod: Any, target: Any, timing_cfg: TimingConfig) -> tuple[Latency, str]:
    """Build and time the baseline of ``mod`` on ``target`` with the project's timing protocol."""
    import tvm

    from little_dragon.tvmx import timing

    tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    rt_mod, kind = build_baseline(mod, tgt)
    # timing.measure only needs the target kind to pick the device
    return timing.measure(rt_mod, mod["main"], {"kind": tgt.kind.name}, timing_cfg), kind
