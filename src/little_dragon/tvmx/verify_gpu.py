"""Why MetaSchedule's VerifyGPUCode post-processor refuses a kernel: it answers only False.

VerifyGPUCode (TVM 0.27, ``src/s_tir/meta_schedule/postproc/verify_gpu_code.cc``) refuses a function, in this order,
when
1. a block annotated with both thread bounds (``meta_schedule.thread_extent_low_inclusive`` / ``_high_inclusive``, the
   codec's `minthreads` / `maxthreads`) runs a number of threads outside them, or a thread loop's extent is not a
   constant (``ThreadExtentChecker``: the product of the ``threadIdx.x/y/z`` extents of the loops bound above the
   block, ``threadIdx.x`` counted as one warp inside a ``warp_execution`` block);
2. its lowering (``lowered``: the passes below) raises, e.g. InjectSoftwarePipeline on a pipelined loop whose body is
   not one statement a stage;
3. the lowered code is over one of the limits: the target's ``max_shared_memory_per_block`` and
   ``max_threads_per_block``, 8 virtual threads, 16-byte vectors.
``verify_gpu_code_why`` says which, with the numbers, so that a refused script's error names its cause (the evaluator's
verify errors, the constraint's retry reasons) instead of "rejects the schedule".  It runs only after a refusal.
"""
from __future__ import annotations

from typing import Any

from little_dragon.tvmx.errors import tvm_error_reason

LOW, HIGH = "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive"
WARP_EXECUTION = "warp_execution"
# VerifyGPUCode's limits on the lowered code (its ``target_constraints_``): the target's, or these constants
TARGET_LIMITS = ("max_shared_memory_per_block", "max_threads_per_block")
FIXED_LIMITS = {"max_vthread": 8, "max_vector_bytes": 16}
# how a why names each limit (its first word is what a counted reason keeps)
LIMIT_NAMES = {"max_shared_memory_per_block": "shared memory: {used} bytes a thread block",
               "max_threads_per_block": "threads: {used} a thread block",
               "max_vthread": "virtual threads: {used}",
               "max_vector_bytes": "vector: {used} bytes"}


def lowered(func: Any, target: Any, name: str = "main") -> Any:
    """VerifyGPUCode's lowering of one function (TVM 0.27's pass list, in its order), as the post-processor lowers it
    before it checks the limits; raises what TVM raises."""
    import tvm
    import tvm.s_tir.transform as st
    import tvm.tirx.transform as tt

    passes = [st.LowerCrossThreadReduction(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
              st.ConvertBlocksToOpaque(), st.LiftThreadBinding(), st.ManifestSharedMemoryLocalStage(),
              st.CompactBufferAllocation(), tt.StmtSimplify(), st.LowerAutoCopy(), st.UnifyThreadBinding(),
              st.LowerMatchBuffer(), st.InjectSoftwarePipeline(), st.LowerOpaqueBlock(), tt.FlattenBuffer(),
              tt.BF16ComputeLegalize(), tt.NarrowDataType(32), tt.StmtSimplify(), tt.VectorizeLoop(True),
              st.InjectVirtualThread(), st.InjectDoubleBuffer(), tt.StorageRewrite(),
              st.MergeSharedMemoryAllocations(), tt.LowerIntrin()]
    f = func.with_attr("global_symbol", name).with_attr("target", target).with_attr("tirx.noalias", True)
    return tvm.transform.Sequential(passes)(tvm.IRModule({name: f}))[name]


def least_limit(low: Any, key: str, limit: int) -> int:
    """The least value of VerifyGPUCode's limit ``key`` that the lowered function ``low`` passes, where it fails
    ``limit``: what it uses (bisection; each check is one walk of the lowered code)."""
    from tvm.s_tir.analysis import verify_gpu_code

    lo, hi = limit + 1, 1 << 30
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if verify_gpu_code(low, {key: mid}) else (mid + 1, hi)
    return lo


def threads_outside_bounds(mod: Any, warp_size: int = 32) -> tuple[str, int, int, int] | None:
    """The first block of ``mod`` annotated with both thread bounds whose threads per thread block lie outside them:
    (block name, threads, low, high), as VerifyGPUCode's ThreadExtentChecker counts them (the innermost loop bound to
    each ``threadIdx`` axis above the block; ``threadIdx.x`` is ``warp_size`` inside a ``warp_execution`` block; a
    loop of unknown extent counts as outside).  None when every such block is within its bounds."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    def walk(stmt: Any, xyz: tuple[int, int, int]) -> tuple[str, int, int, int] | None:
        if isinstance(stmt, tirx.For):
            tag = stmt.thread_binding.thread_tag if stmt.thread_binding is not None else ""
            if tag.startswith("threadIdx."):
                ext = stmt.extent
                if not isinstance(ext, tirx.IntImm):
                    return ("(a loop of unknown extent)", -1, -1, -1)
                dim = "xyz".index(tag[-1])
                xyz = tuple(int(ext.value) if i == dim else v for i, v in enumerate(xyz))  # type: ignore[assignment]
            return walk(stmt.body, xyz)
        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            ann = block.annotations
            if WARP_EXECUTION in ann:
                xyz = (warp_size, xyz[1], xyz[2])
            if LOW in ann and HIGH in ann:
                low, high, threads = int(ann[LOW]), int(ann[HIGH]), xyz[0] * xyz[1] * xyz[2]
                if not low <= threads <= high:
                    return (str(block.name_hint), threads, low, high)
            for child in ([block.init] if block.init is not None else []) + [block.body]:
                hit = walk(child, xyz)
                if hit:
                    return hit
            return None
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                hit = walk(s, xyz)
                if hit:
                    return hit
            return None
        for attr in ("body", "then_case", "else_case"):
            child = getattr(stmt, attr, None)
            if child is not None:
                hit = walk(child, xyz)
                if hit:
                    return hit
        return None

    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            hit = walk(func.body, (1, 1, 1))
            if hit:
                return hit
    return None


def verify_gpu_code_why(mod: Any, target: Any) -> str:
    """Why VerifyGPUCode refuses ``mod`` (the schedule's module as the post-processor saw it) on ``target`` (a GPU
    ``tvm.target.Target``): the first of its checks that fails, in its order (every limit the lowered code is over),
    with the numbers; "" when none does."""
    import tvm
    from tvm import tirx
    from tvm.s_tir.analysis import verify_gpu_code

    limits = {k: int(target.attrs[k]) for k in TARGET_LIMITS if target.attrs.get(k) is not None}
    limits.update(FIXED_LIMITS)
    warp = int(target.attrs.get("thread_warp_size", 32))
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        name = str(gv.name_hint)
        off = threads_outside_bounds(tvm.IRModule({gv: func}), warp)
        if off:
            block, threads, low, high = off
            if threads < 0:
                return f"thread extent: a thread loop of {name} has no constant extent"
            return (f"thread extent: block {block} runs {threads} threads a thread block, outside the bounds "
                    f"[{low}, {high}] it is annotated with")
        try:
            low = lowered(func, target, name)
        except Exception as e:  # noqa: BLE001 - VerifyGPUCode refuses a function whose lowering raises
            return f"lowering: {tvm_error_reason(e, 290)}"
        over = [f"{LIMIT_NAMES[key].format(used=least_limit(low, key, limit))} in {name}, over the limit of {limit}"
                for key, limit in limits.items() if not verify_gpu_code(low, {key: limit})]
        if over:  # every limit it is over (VerifyGPUCode checks them all at once)
            return "; ".join(over)
    return ""
