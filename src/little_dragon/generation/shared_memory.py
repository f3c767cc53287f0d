"""A GPU kernel's shared memory against its target's limit, checked where the script's software pipeline fixes it.

MetaSchedule's GPU tiling of a matmul or convolution caches both inputs in shared memory at the reduction's outer loop
(`cread .. shared`, `at`) and then pipelines that loop (`ann lK stage [0 0 2]`, `ann lK order [0 1 2]`, `ann lK async
[0]`): TVM's InjectSoftwarePipeline keeps one version of each cached buffer per stage, three here.  Its VerifyGPUCode
post-processor lowers the kernel and refuses one whose shared memory is over the target's ``max_shared_memory_per_block``
(48 KB on sm_90 without opting in).  The constraint's end check sees that refusal only at `post *`, and goes back to the
tiling's first `tile` line (``ScriptConstraint._retry_end``): the lines written after the pipeline drawn for nothing.

Why: session 39's H100 A/B, 46 of 100 line retries were VerifyGPUCode refusals at `post *`; its stored examples are
16.5-17.4 KB of shared buffers tripled by the pipeline to 49.5-52.2 KB (``results/constrained-decoding/cpu-s39/
verify_gpu_shared.py``).

The rule (``schedule_worker.prefix_facts``, on a GPU target): after a line that annotates a loop's pipeline stages or
order (`ann lK stage ..`, `ann lK order ..`; TVM lowers a pipeline only with both), the kernel is lowered as
VerifyGPUCode lowers it, and its shared memory over the limit refuses the line as the end check would refuse the
script: the attempt goes back to its tiling (``ScriptConstraint._new_line``).  A prefix TVM does not lower yet (a stage
without its order) gets no verdict here.  MetaSchedule writes the pipeline lines after both cache reads are placed, and
no later line of its scripts adds shared memory, so the verdict is the end check's (every harvested record is accepted
token by token: ``benchmarks/constrained_bench.py --harvest``).

Off by default since session 40 (``schedule_worker.SHARED_MEMORY_RULE``): measured on an H100, it refused 4 of 96
retries at `order` instead of `post *` (three lines earlier), while its check in the step that ends each pipeline line
cost more than that saved (results/constrained-decoding.md, "Session 40").  With it, [drop pipeline]
(``constrained.DROP_PIPELINE``, off by default) takes back the refused pipeline alone and keeps the tiling
(``pipeline_loop`` names the loop a pipeline line annotates)."""
from __future__ import annotations

from typing import Any

from little_dragon.codec.kinds import KEY_ABBREV
from little_dragon.tvmx.verify_gpu import least_limit, lowered  # VerifyGPUCode's lowering, its limits bisected

# the refusal's message starts with this (it crosses the TVM worker's process boundary as text)
SHARED_MEMORY = "shared memory:"
_PIPELINE = ("software_pipeline_stage", "software_pipeline_order")
PIPELINE_KEYS = (*_PIPELINE, *(KEY_ABBREV[k] for k in _PIPELINE))  # the keys as the codec may write them


# every key of a loop's software pipeline (TVM's names; [drop pipeline] takes them all back and masks them)
LOOP_PIPELINE = (*_PIPELINE, "software_pipeline_async_stages")
LOOP_PIPELINE_KEYS = (*LOOP_PIPELINE, *(KEY_ABBREV[k] for k in LOOP_PIPELINE))  # as the codec may write them


def pipeline_loop(line: str) -> int | None:
    """The loop (script index) whose software pipeline ``line`` annotates (`ann lK stage|order|async ..`), else None."""
    words = line.split()
    if len(words) >= 3 and words[0] == "ann" and words[1][:1] == "l" and words[1][1:].isdigit() \
            and words[2].strip('"') in LOOP_PIPELINE_KEYS:
        return int(words[1][1:])
    return None


def gives_pipeline(line: str) -> bool:
    """Whether ``line`` annotates a loop with its software pipeline's stages or order (`ann lK stage [0 0 2]`)."""
    words = line.split()
    return len(words) >= 3 and words[0] == "ann" and words[1].startswith("l") and words[2].strip('"') in PIPELINE_KEYS


def shared_memory_over(mod: Any, target: Any) -> tuple[str, int, int] | None:
    """The first function of ``mod`` whose shared memory, lowered as VerifyGPUCode lowers it, is over ``target``'s
    ``max_shared_memory_per_block``: (function name, bytes, limit).  None when every one fits, when the target names
    no limit, or when TVM does not lower the function yet (no verdict)."""
    from tvm import tirx
    from tvm.s_tir.analysis import verify_gpu_code

    limit = target.attrs.get("max_shared_memory_per_block") if target is not None else None
    if limit is None:
        return None
    limit = int(limit)
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            low = lowered(func, target)
        except Exception:  # noqa: BLE001 - not lowerable as it stands (a pipeline's stage without its order): no verdict
            continue
        if not verify_gpu_code(low, {"max_shared_memory_per_block": limit}):
            return (str(gv.name_hint), least_limit(low, "max_shared_memory_per_block", limit), limit)
    return None


def shared_memory_message(hit: tuple[str, int, int]) -> str:
    name, used, limit = hit
    return (f"{SHARED_MEMORY} kernel {name} uses {used} bytes of shared memory a thread block, over the target's "
            f"{limit} (VerifyGPUCode refuses the kernel at `post *`)")
