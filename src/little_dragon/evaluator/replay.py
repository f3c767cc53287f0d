"""Apply a script's trace to its workload exactly as MetaSchedule tuning builds a candidate.

1. Replay the sampled part (before ``EnterPostproc``) on a fresh schedule of the workload.
2. ``enter_postproc()`` and the target's post-processors once, in order (``tvmx.postprocs``); a VerifyGPUCode
   refusal (``verify_error``) names its cause and numbers: shared memory, threads, a thread extent outside a block's
   bounds, a lowering error (``tvmx.verify_gpu``).
3. A script that wrote its post-processing section out must have written exactly what step 2 produced;
   the first differing instruction is reported with its script line.

Scheduling nothing is a failure of its own (``no_op``), never "correct": a sampled part that leaves the
module as it was (empty, or only look-ups), or one of look-ups, samples and annotations only that compiles
to the very code an empty script gives (annotations nothing reads; on CUDA the post-processors bind an
unscheduled kernel's threads themselves, so "it runs" does not mean "the script did something").

``code_hash`` (of the generated code: LLVM IR, CUDA source) identifies the kernel.  A script with real
transformations that still compiles to the empty script's code (MetaSchedule samples such schedules: 3 of
112 H200 records, a fuse/split/bind that equals RewriteUnboundBlock's default) is a correct kernel, and a
*copy* of the default one: credited like a refinement that compiles to the given script's code (correct,
``copy_reward``, below every kernel that changed something).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from little_dragon.tvmx.schedule import fresh_schedule

LAYOUT_REWRITE_NOTE = ("layout-rewritten weight (RewriteLayout): correctness checked on the original layout, "
                       "timing on the pre-transformed weight, as MetaSchedule measures it")


class ReplayFailure(Exception):
    """The script fails before build: ``category`` is one of apply_error, no_op, verify_error, build_error (the
    builder's own first step, ``strip_layout_rewrite``)."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


@dataclasses.dataclass
class Replayed:
    sch: Any                   # the post-processed tvm.s_tir.Schedule
    layout_rewrite: bool       # holds a layout-rewrite pre-processing block (built two ways, see worker)




def code_hash(rt_mod: Any) -> str:
    """Identity of a built kernel: a hash of its generated code (host LLVM IR and every device source)."""
    import hashlib
    import re

    h = hashlib.sha1()
    for m in [rt_mod, *getattr(rt_mod, "imports", [])]:
        for fmt in ("ll", "cuda"):
            try:
                text = m.inspect_source(fmt)
            except Exception:  # noqa: BLE001  a module without that format
                continue
            # LLVM's type-based alias metadata names buffers by their address in the compiling process
            # (!{!"0x5580fbd17df0", ...}): the same kernel built twice differs there and nowhere else
            h.update(re.sub(r'"0x[0-9a-fA-F]+"', '"0x"', text).encode())
    return h.hexdigest()


def empty_script_code_hash(mod: Any, procs: list, target: Any) -> str | None:
    """``code_hash`` of what an empty script gives (the post-processors alone); None if they reject it or
    it does not build."""
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import PostprocRejected, run_postprocs

    sch = fresh_schedule(mod, debug_mask=0)
    try:
        run_postprocs(sch, procs)
        return code_hash(fast_build(sch.mod, target))
    except PostprocRejected:
        return None
    except Exception:  # noqa: BLE001  (the build) the comparison is then skipped, nothing else
        return None


def _line_of(index: int, lines: list[int] | None) -> str:
    if not lines:
        return f"instruction {index}"
    if index < len(lines):
        return f"line {lines[index]}"
    return f"line {lines[-1] + 1} (end of the script: an instruction is missing there)"


def _check_written_post(sch: Any, mod: Any, trace_json: list, pre_len: int, written: list,
                        lines: list[int] | None) -> None:
    """The written section must be what the post-processors produced: the same instructions, or at least
    (IndexMaps serialise with spans and variable names) a replay that yields the very same module."""
    import tvm_ffi
    from tvm.s_tir import Trace

    from little_dragon.codec.canonical import canonical_json, dumps, first_mismatch, index_maps_parsed

    derived = canonical_json(sch.trace.as_json(remove_postproc=False))[0][pre_len:]
    first = first_mismatch(derived, written, lambda d, w: d is not None and w is not None
                           and index_maps_parsed(d) == index_maps_parsed(w))
    if first is None:
        return
    if len(derived) == len(written):
        try:
            whole = fresh_schedule(mod, debug_mask=0)
            Trace.apply_json_to_schedule(trace_json, whole)
            if tvm_ffi.structural_equal(whole.mod, sch.mod):
                return
        except Exception:  # noqa: BLE001  does not even replay: reported below
            pass
    i, d, w = first
    raise ReplayFailure("verify_error", (
        f"{_line_of(pre_len + i, lines)}: the script's post-processing section differs from what the target's "
        f"post-processors produce (the script has {dumps(w)[:200] if w is not None else 'nothing'}; they "
        f"produce {dumps(d)[:200] if d is not None else 'nothing'}); write `post *` to let them derive it"))


def replay(mod: Any, trace_json: list, procs: list, *, lines: list[int] | None = None, text: str = "",
           on_phase: Any = None) -> Replayed:
    """Schedule ``mod`` with ``trace_json`` as tuning would; raises ReplayFailure with its category."""
    import tvm_ffi

    from little_dragon.codec.apply import apply_json
    from little_dragon.codec.errors import ApplyError
    from little_dragon.tvmx.postprocs import PostprocRejected, run_postprocs, split_postproc

    pre, written = split_postproc(trace_json)
    # a schedule of a private copy: TVM may write into the module it schedules (tvmx/schedule.py), and the worker
    # keeps ``mod`` for the workload's next scripts
    sch = fresh_schedule(mod, debug_mask=0)  # as MetaSchedule's trace replay: no per-primitive self-checks
    try:
        apply_json(pre, sch, lines, text)
    except ApplyError as e:
        raise ReplayFailure("apply_error", f"line {e.line}: {e}") from None
    except Exception as e:  # noqa: BLE001  anything a model writes
        raise ReplayFailure("apply_error", f"{type(e).__name__}: {str(e)[-800:]}") from None
    if tvm_ffi.structural_equal(sch.mod, mod):
        raise ReplayFailure("no_op", "the script schedules nothing: the kernel is unchanged by its instructions"
                                     + (" (empty script)" if not pre[0] else ""))
    if on_phase is not None:
        on_phase("verify")  # a crash from here on is charged to verification
    try:
        run_postprocs(sch, procs)
    except PostprocRejected as e:
        raise ReplayFailure("verify_error", str(e)) from None
    if written is not None:
        _check_written_post(sch, mod, trace_json, len(pre[0]), written, lines)
    stripped = strip_layout_rewrite(sch.mod)
    return Replayed(sch, not tvm_ffi.structural_equal(stripped, sch.mod))


def strip_layout_rewrite(mod: Any) -> Any:
    """``mod`` without its layout-rewrite pre-processing blocks, as MetaSchedule's builder strips them before it builds
    (``RemoveWeightLayoutRewriteBlock``); ReplayFailure ``build_error`` where TVM cannot: a block annotated as such a
    pre-processing block (`ann b preproc 1`) that is not one ("Check failed: (load)", "(block->alloc_buffers.empty())":
    2 of 336 attempts of a session 19 CPU sealed seed, which escaped as "evaluator internal error")."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    try:
        return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    except Exception as e:  # noqa: BLE001 - TVM's InternalError: the kernel MetaSchedule's builder would not build
        lines = str(e).strip().splitlines()
        raise ReplayFailure("build_error", "removing the layout-rewrite pre-processing blocks (MetaSchedule's builder's "
                                           f"first step) failed: {type(e).__name__}: {lines[-1][:300] if lines else ''}"
                            ) from None


NO_OP_CODE = "the script schedules nothing: it compiles to the very code an empty script gives"


def timing_args_info(sch_mod: Any) -> list:
    """Argument shapes MetaSchedule's runner times a candidate with (layout-rewritten weights transformed)."""
    from tvm.s_tir import meta_schedule as ms

    return list(ms.arg_info.ArgInfo.from_entry_func(sch_mod, remove_preproc=True))
