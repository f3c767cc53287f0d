"""The constraint's TVM work in a worker process: TVM crashing or hanging on a line ends one attempt, not the run.

Constrained decoding applies every completed line of an attempt to a live schedule of its workload
(``constrain_state``) and finishes a cut attempt with the target's post-processors.  Some TVM primitives kill the
process on input the codec decodes (SIGSEGV: SamplePerfectTile on ``m=_``, Fuse on ``pui=_``, ComputeAt on ``pul=_``,
CacheRead on a consumer list naming the buffer's writer; the line grammar masks those, but one still unknown would end a
whole evaluation, RL run or ``dragon optimize``).  So that work
runs in one worker of ``little_dragon.sandbox.WorkerPool`` (pebble, as the harvest's tuning tasks: replaced when it
dies or times out, its process group killed), which keeps the prefixes' live schedules between requests.

Requests (the worker's functions, each returning a value, never raising TVM's error):

    _state_task(key, mod_json, text, trace_json, rules) -> ("ok", (ScheduleState, counts)) | ("err", TVM's message, counts)
                                                    (counts: ``APPLIED``'s, this request's; rules: ``_rules()``)
    _finish_task(key, mod_json, target, text)    -> ("ok", why not finished: str, "" when finished)
    _post_task(key, mod_json, target, text, pre_json) -> ("ok", (why, the post-processors' section | None))
    _clear_task()                                -> ("ok", None)
    any of them                                  -> ("err", TVM's message) | ("need_module",)

``key`` is the workload's cache key (``constrained.Workload.key``); ``mod_json`` (``tvm.ir.save_json`` of its kernel)
is sent the first time the worker sees the key, else None (a replaced worker answers ``need_module`` and the request
is sent again with it).  ``text`` is the script's complete lines; ``trace_json`` its decode (the caller decodes: the
codec is pure Python and its caches live there).

A worker that dies during a request raises ``TVMCrashed``; one that has not answered after ``timeout_s`` is killed
and raises ``TVMTimedOut``.  Both name the workload and the script's last line; the caller counts the attempt as
rejected (its line did not apply) and the next request gets a new worker.
"""
from __future__ import annotations

import collections
import functools
import json
import logging
import sys
import threading
import time
from typing import Any

from little_dragon.generation.constrain_state import (LiveSchedule, ScheduleState, block_name_counts,
                                                     blocks_in_run_order, device_allocations,
                                                     device_global_allocations,
                                                     diagonal_thread_bindings, extend, fragment_elements,
                                                     half_bound_blocks,
                                                     in_place_fold_candidates, launch_over_limits, live_state,
                                                     LOOKUP_RUN_FACTOR, host_blocks, nested_thread_bindings,
                                                     read_before_written, reduction_restarted_by_loop,
                                                     repeated_in_place_update, replay)
from little_dragon.generation.device_bounds import out_of_bounds_accesses
from little_dragon.generation.launch_scopes import launch_scope_message, reads_outside_launch_scope
from little_dragon.generation.shared_memory import gives_pipeline, shared_memory_message, shared_memory_over
from little_dragon.generation.thread_bounds import gives_thread_bounds, thread_bounds_message, threads_outside_bounds
from little_dragon.generation.tvm_breaks import (inits_without_their_update, regions_outside_buffers,
                                                 updates_without_their_predicate, vector_stores_into_one_element)
from little_dragon.tvmx.schedule import fingerprint, fresh_schedule

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0  # one request: a line's apply takes milliseconds, a cut attempt's post-processing seconds at most


class TVMCrashed(RuntimeError):
    """TVM ended the constraint's worker process (a signal or an exit) while applying a script."""


class TVMTimedOut(RuntimeError):
    """TVM did not finish applying a script within the worker's time limit; the worker was killed."""


# ------------------------------------------------------------------------------------ the work itself
class LRU:
    """Results by script prefix, the least recently used dropped first: the k attempts of a prompt share their first
    lines, and a line's decode, live schedule and facts are functions of the text so far.  Locked: a step's
    constraint work may run in a background thread (``constrained.BACKGROUND``)."""

    def __init__(self, size: int):
        self.size, self.data = size, collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            v = self.data.get(key)
            if v is not None:
                self.data.move_to_end(key)
            return v

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            if len(self.data) > self.size:
                self.data.popitem(last=False)


_LIVE = LRU(512)  # (workload key, prefix) -> its LiveSchedule (a TVM schedule each: fewer of them kept)
# "extended" (one line applied) / "replayed" (whole prefix) lines, and [line work] by the line's keyword, with
# " replayed" where the whole prefix was applied, the lines' count ("n <kw>") and milliseconds ("ms <kw>") in the
# worker, refused lines included: which lines the TVM work of a step goes to (the bench's +procprofile shows them)
APPLIED: collections.Counter = collections.Counter()

# [shared memory] True: a line that completes a software pipeline is refused when the kernel then needs more shared
# memory a thread block than the target has (``shared_memory``; the bench's +shared).  False (the default since
# session 40): found at `post *` (VerifyGPUCode), as before session 39.  On session 40's H100 A/B (two calls, the same
# draws each) the rule moved 4 of 96 retries three lines earlier and cost its check at every pipeline line, in the step
# that line ends (~5 ms a check; the loop's wait for the marks 5.3-5.8 -> 7.2-8.5 ms a step): 2.42-2.46x free in
# sampled tokens/s against 2.17-2.33x without it.  The end check refuses the same kernels either way.  The caller's
# value goes with each request (``_rules``).
SHARED_MEMORY_RULE = False


def _rules() -> dict[str, Any]:
    """This process's rule switches, sent with a state request: the worker follows its caller's, whatever they were
    when the worker started."""
    return {"SHARED_MEMORY_RULE": SHARED_MEMORY_RULE}


def prefix_facts(mod: Any, text: str, trace_json: list, key: Any = None) -> ScheduleState:
    """The facts of ``text`` (complete lines, decoded as ``trace_json``) on ``mod``: the live schedule of the prefix
    one line shorter, extended by the last line (``constrain_state.extend``), or, when that is not cached or fails,
    the whole prefix applied to a fresh schedule (whose error, if any, is the verdict).  A line that moves a block
    (``MOVES_BLOCKS``) is refused, as if TVM had refused it, when a block then reads a buffer before the block writing
    it runs (``constrain_state.read_before_written``: TVM applies such a line, and the kernel computes garbage)."""
    if trace_json[0]:
        from little_dragon.codec.postproc import needs_tensor_intrinsics

        if needs_tensor_intrinsics(trace_json):
            from little_dragon.tvmx.build import import_tensor_intrinsics

            import_tensor_intrinsics()
    live: LiveSchedule | None = None
    if text and key is not None:
        head = text[:-1].rpartition("\n")[0]
        parent = _LIVE.get((key, head + "\n" if head else ""))
        if parent is not None and parent.n_insts >= 0:
            n = parent.n_insts
            try:
                live = extend(parent, trace_json[0][n:], [[i - n, d] for i, d in trace_json[1] if i >= n])
                APPLIED["extended"] += 1
            except Exception:  # noqa: BLE001 - the whole prefix on a fresh schedule decides
                live = None
    if live is None:
        APPLIED["replayed"] += 1
        live = replay(mod, trace_json)
    if _last_keyword(text) == "layout":
        overlap = layout_overlap(mod, trace_json)
        if overlap:  # TVM applied it trusting the script's word: refused as if TVM had checked (its retries, its reason)
            raise RuntimeError(f"the index map is not injective: TVM's own check refuses it ({overlap}); `inj` (the "
                               "default) skips that check, and a map that folds indices together computes garbage")
    if _last_keyword(text) in MOVES_BLOCKS:
        clash = read_before_written(live.sch)
        if clash:  # TVM applied it: the constraint refuses the line as if TVM had (its retries, its reason counted)
            raise RuntimeError(f"block {clash[0]} would read {clash[1]} before block {clash[2]} writes it (the line "
                               "places a block past its consumer or producer; TVM checks one side only)")
        restart = reduction_restarted_by_loop(live.sch.mod)
        if restart:
            raise RuntimeError(restarted_message(restart))
    if _last_keyword(text) in MAKES_BLOCKS:
        twice = repeated_name(mod, live.sch.mod, key)
        if twice:  # TVM names a new block without looking: `blk` lookups and RewriteReductionBlock then fail on it
            raise RuntimeError(f"the line would name a second block {twice} (TVM does not make block names unique; "
                               "a lookup of the name and the post-processing's RewriteReductionBlock fail on it)")
    target = key[1] if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], str) else None
    if target is not None and gives_thread_bounds(_final_line(text)):
        warp = gpu_warp_size(target)
        off = threads_outside_bounds(live.sch.mod, warp) if warp else None
        if off:  # VerifyGPUCode refuses it at `post *`: the constraint goes back to the tiling now (``_new_line``)
            raise RuntimeError(thread_bounds_message(off))
    if SHARED_MEMORY_RULE and target is not None and gives_pipeline(_final_line(text)) and gpu_warp_size(target):
        over = shared_memory_over(live.sch.mod, _tvm_target(target))
        if over:  # VerifyGPUCode refuses it at `post *` too: back to the tiling now (``shared_memory``)
            raise RuntimeError(shared_memory_message(over))
    if key is not None:
        _LIVE.put((key, text), live)
    state = live_state(live)
    state.unchanged = _unchanged(live, mod, key)
    state.cpu = target is not None and cpu_target(target)
    if target is not None and not state.cpu and state.loop_bound:
        half, fixable = half_bound_blocks(live.sch)
        state.half_bound = half[0] if half and fixable else ""
    state.lookups_capped = trailing_lookups(text) >= LOOKUP_RUN_FACTOR * max(1, len(state.block_names))
    state.lookup_run = lookup_run(text)
    return state


# the lines that place a block: moved under a loop (`at`, `rat`), or a new copy block beside it (TVM's ReIndex puts
# it before or after the whole loop nest, past a producer or consumer computed under that nest: session 23's two
# `reindex` wrong results, outputs never written; `cread`/`cwrite`, whose placement TVM computes, alike to be sure);
# ``read_before_written`` and ``reduction_restarted_by_loop`` after each
MOVES_BLOCKS = ("at", "rat", "reindex", "cread", "cwrite")


# the lines that add a block, named by TVM after the block or buffer it comes from (`rfactor` of a loop already
# factored makes a second `A_sum_rf`: session 23's CPU sealed verify error, "Found 4 blocks with the name: A_sum_rf")
MAKES_BLOCKS = ("reindex", "cread", "cwrite", "rfactor", "blockize", "decomp")
_WORKLOAD_NAMES = LRU(256)  # workload key -> its own block name counts


def repeated_name(mod: Any, scheduled: Any, key: Any = None) -> str:
    """A block name that ``scheduled`` (``mod`` after some lines) gives more blocks than ``mod`` gives (at least one);
    "" when none.  No real record makes one (the llvm and H200 harvests, after each line that adds a block)."""
    base = _WORKLOAD_NAMES.get(key) if key is not None else None
    if base is None:
        base = block_name_counts(mod)
        if key is not None:
            _WORKLOAD_NAMES.put(key, base)
    return next((n for n, c in block_name_counts(scheduled).items() if c > max(1, base.get(n, 0))), "")


def restarted_message(restart: list[str]) -> str:
    return (f"block {restart[0]} would compute its reduction again at each of the {restart[2]} iterations of loop "
            f"{restart[1]}, which it does not use, and the post-processing hoists its init above that loop: it "
            "would accumulate them all (TVM's DecomposeReduction does not check it)")


def layout_overlap(mod: Any, trace_json: list) -> str:
    """Why TVM's own check refuses the `layout` line that ends ``trace_json`` (TransformLayout, the last instruction),
    "" when it passes or the script does not assume its map injective.  The codec's `inj` option (the
    ``assume_injective_transform`` attribute) defaults to true, as MetaSchedule writes its layout rewrites, and then TVM
    applies any map without checking that it does not fold two indices into one.  Session 23's CPU sealed wrong result
    `layout b2 w0 {v_i,v_j,v_k->v_i,v_k}` turned a (1, 2, 32) buffer into (1, 32): both rows summed into one.  The line
    is applied again with the check on (``inj=false``), the whole prefix replayed (10 ms median, 185 ms at most on 112
    layouts of the H200 harvest; `layout` lines are rare); every layout of the 773 real records that have one passes
    it (``test_constrained_layout.py``)."""
    inst = trace_json[0][-1] if trace_json[0] else None
    if inst is None or inst[0] != "TransformLayout" or inst[2][3] not in (True, 1):
        return ""
    checked = [list(trace_json[0][:-1]) + [[inst[0], inst[1], [*inst[2][:3], False, *inst[2][4:]], inst[3]]],
               trace_json[1]]
    try:
        replay(mod, checked)
    except Exception as e:  # noqa: BLE001 - TVM's refusal is the verdict
        msg = str(e).strip().splitlines()
        return (msg[-1] if msg else type(e).__name__)[:200]
    return ""


def _final_line(text: str) -> str:
    """The last line of ``text`` (complete lines)."""
    return text[:-1].rpartition("\n")[2] if text.endswith("\n") else ""


def _last_keyword(text: str) -> str:
    """The first word of the last line of ``text`` (complete lines)."""
    return _final_line(text).split(" ", 1)[0]


def trailing_lookups(text: str) -> int:
    """How many `blk` lines end ``text`` (complete lines) in a row."""
    n = 0
    for line in reversed(text.splitlines()):
        if not line.startswith("blk "):
            break
        n += 1
    return n


LOOKUPS = ("blk", "loops", "kids", "prods", "cons")  # the instructions that look up what exists, changing nothing


def lookup_run(text: str) -> frozenset[str]:
    """The lookup lines (``LOOKUPS``), stripped, of the run of them that ends ``text`` (complete lines)."""
    out = []
    for line in reversed(text.splitlines()):
        if line.split(" ", 1)[0] not in LOOKUPS:
            break
        out.append(line.strip())
    return frozenset(out)


@functools.lru_cache(maxsize=64)
def _tvm_target(target: str) -> Any:
    """``target`` (a workload key's target: compact JSON, or a target string) as a TVM Target; None where TVM does not
    parse it (then no target rules: the GPU's, the wider ones)."""
    import tvm

    try:
        spec = json.loads(target)
    except ValueError:
        spec = target
    try:
        return tvm.target.Target(spec)
    except Exception:  # noqa: BLE001 - TVM's parse errors vary
        return None


def cpu_target(target: str) -> bool:
    """Whether ``target`` (a workload key's target) runs kernels on the host CPU."""
    from tvm_ffi import DLDeviceType

    t = _tvm_target(target)
    return t is not None and t.get_target_device_type() == DLDeviceType.kDLCPU


def gpu_warp_size(target: str) -> int | None:
    """The warp size of a GPU ``target`` (a workload key's target; TVM's ``thread_warp_size``), None on a CPU target or
    one TVM does not parse."""
    t = _tvm_target(target)
    if t is None or cpu_target(target):
        return None
    return int(t.attrs.get("thread_warp_size", 32))


_WORKLOAD_HASH = LRU(64)  # workload key -> the structural hash of its module


def _unchanged(live: LiveSchedule, mod: Any, key: Any) -> bool:
    """Whether ``live``'s kernel is still ``mod`` (the evaluator's ``no_op`` test, ``_schedules_nothing``): compared
    by structural hash, confirmed structurally when the hashes agree.  ``live`` was just made by ``replay`` or
    ``extend``, which hashed its module then: that hash is current (hashed here only when they could not)."""
    import tvm_ffi

    want = _WORKLOAD_HASH.get(key) if key is not None else None
    if want is None:
        want = fingerprint(mod)
        if key is not None:
            _WORKLOAD_HASH.put(key, want)
    have = live.fingerprint if live.fingerprint is not None else fingerprint(live.sch.mod)
    return have == want and bool(tvm_ffi.structural_equal(live.sch.mod, mod))


def finish_check(mod: Any, post_context: Any, text: str, key: Any = None) -> str:
    """Why ``text`` (a script ending in ``post *``) is not a finished kernel of ``mod``; "" when it is: the
    constraint's end-of-script check, and how a cut attempt is finished.  The script must

    - decode, apply, and pass the target's post-processing (on CUDA it ends in VerifyGPUCode: threads per block,
      shared memory, vector width, which no line's check can know while a tile is being written);
    - change the kernel before its post-processing, and if it only looks up, samples and annotates, lower to other
      code than the empty script (else it is the evaluator's ``no_op``);
    - leave no reduction block under a loop it does not use below where the post-processing decomposes it
      (``reduction_restarted_by_loop``: the init hoisted above that loop, the block sums its iterations together;
      after a line that places a block the constraint checks it already);
    - not bind one thread axis on nested loops of different extents (``nested_thread_bindings``: TVM accepts it,
      the kernel leaves outputs unwritten);
    - leave no block bound through two loops of one ``blockIdx``/``threadIdx`` axis (``diagonal_thread_bindings``:
      TVM makes them one index, the block runs their diagonal; session 26's H200 sealed run, a wrong result);
    - on an accelerator, leave no block outside its kernels (``host_blocks``: TVM builds it into the host function,
      which then reads device memory and segfaults; ``post *`` leaves a block annotated as tiled unbound);
    - on an accelerator, leave no block touching a tensor-core fragment element by element where a kernel allocates
      the fragment (``fragment_elements``, ``device_allocations``: a tensorization that did not happen; TVM lowers it
      and nvcc refuses the code; a fragment stage at the root is host memory, a plain pointer in the kernels);
    - on an accelerator, read no shared or local buffer in a block outside a ``blockIdx`` (shared) or thread (local)
      loop that its writer is under, in one kernel (``launch_scopes.reads_outside_launch_scope``: that memory is a
      thread block's or a thread's own, so such a block reads what its own did not write; session 20's H200 sealed
      run, a wrong result);
    - strip its layout-rewrite pre-processing blocks, as MetaSchedule's builder does first (a block annotated as one
      that is not one fails there);
    - lower for the target (``tvmx.build.lower_for_target``: the build's passes without code generation; on the H200
      sealed run 10 of 13 build errors failed there, at ~10 ms a script).  On a CPU target only a script that
      transformed nothing was lowered until session 24 (the lowering had refused none of 417 scripts the
      post-processors accept: ``benchmarks/cpu_lowering_yield.py``); session 24's CPU sealed runs, whose attempts now
      reach software-pipeline annotations and inlined cast stages, had 4 of 336 attempts fail the judge's build
      there ("Stage of the software pipeline is not defined", "Buffer T_cast_1 is used before its definition"), and
      the lowering refuses all 4 in 3-7 ms each.  It leaves out the passes that only rewrite for speed
      (``END_CHECK_SKIPPED_PASSES``: 2.5x faster on the CPU, 4.6x on CUDA);
    - on CUDA, launch no kernel over CUDA's per-axis limits (``launch_over_limits`` of the lowered device modules:
      threadIdx.z at most 64, which VerifyGPUCode does not check when the target gives only a per-block total; session
      26's H200 sealed run, a runtime error at threadIdx.z 512);
    - on an accelerator, allocate no global memory inside a kernel (``device_global_allocations`` of the lowered
      device modules: code generation, which the lowering stops before, refuses it; session 26's H200 sealed run had
      3 such build errors, an rms_norm's reduction computed at its consumer's thread-bound loop);
    - on an accelerator, access no shared, local or warp buffer outside it (``device_bounds.out_of_bounds_accesses``
      of the lowered device modules, guards read: TVM's LowerCrossThreadReduction drops a block's predicate on the
      write-back; session 26's H200 sealed run, an illegal address);
    - not be a kernel that TVM breaks in one of the ways ``tvm_breaks`` reads off its TIR (session 27's CPU sealed
      wrong results, traced in session 28): a reduction's init writing a buffer its update never writes (ReIndex of a
      blockized accumulator), an update repeated by a loop its dropped predicate kept to one iteration (blockize), a
      block region outside its buffer, a vector stored into one element of a buffer that is read (VectorizeLoop over a
      compacted allocation);
    - not be a kernel that TVM's StorageRewrite breaks (``in_place_fold_candidates`` on the kernel before
      post-processing, then ``repeated_in_place_update`` on the lowered one: a block a loop it does not use runs again
      and again, given its input's storage, reads its own output; apache/tvm#759).  No kernel runs: the lowered code
      says it.

    ``key``: the workload's cache key in this process's live schedules (``prefix_facts``): the no-op test then reads
    the schedule the constraint already applied the lines to, instead of applying them again."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target

    try:
        sch = fresh_schedule(mod)
        verdict = check_module_script(text, mod, post_context, schedule=sch)
        if not verdict.valid:
            return verdict.error
        before_post = _lines_module(mod, post_context, text, key)
        if _schedules_nothing(mod, before_post):
            return "no_op: the script schedules nothing: the kernel is unchanged by its instructions"
        restart = reduction_restarted_by_loop(before_post)  # lines other than moves may put a loop there (reorder)
        if restart:
            return restarted_message(restart)
        lost = inits_without_their_update(before_post)
        if lost:
            return (f"reduction without its accumulator: {lost[0]} (TVM's ReIndex moved the update to a new buffer "
                    "and copies nothing back)")
        rerun = updates_without_their_predicate(before_post)
        if rerun:
            return f"update repeated by a loop: {rerun[0]} (TVM's blockize dropped the predicate that kept it once)"
        clash = nested_thread_bindings(sch)
        if clash:
            return f"nested thread binding: {clash[0]}"
        diagonal = diagonal_thread_bindings(sch)
        if diagonal:
            return f"two thread loops of one axis in one block: {diagonal[0]}"
        beyond = regions_outside_buffers(sch.mod)
        if beyond:
            return f"access outside a buffer: {beyond[0]}"
        target = as_target(post_context.target)
        on_device = on_accelerator(target)
        placed = blocks_in_run_order(sch) if on_device else []  # one walk of the kernel for the rules below
        host = host_blocks(sch, placed) if on_device else []
        if host:
            return (f"host code: block {host[0]} is under no blockIdx/threadIdx loop, so the host would compute it on "
                    "device memory")
        scalar = fragment_elements(sch, placed) if on_device else []  # refused below if a kernel allocates it
        unshared = reads_outside_launch_scope(sch, placed) if on_device else []
        if unshared:
            return launch_scope_message(unshared)
    except Exception as e:  # noqa: BLE001 - any failure of the derivation: not finished, and why
        return f"{type(e).__name__}: {str(e).strip()[:300]}"
    transforms = _transforms(text)
    if not on_device:
        # MetaSchedule's builder first strips the layout-rewrite pre-processing blocks (on an accelerator the
        # lowering below does it too): TVM fails there on a block annotated as one that is not (`ann b preproc 1`: the
        # judge's build error, ``evaluator.replay.strip_layout_rewrite``)
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        try:
            RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod)
        except Exception as e:  # noqa: BLE001 - TVM's InternalError
            return f"layout rewrite: {_last_line(e)}"
    try:
        lowered = lower_for_target(sch.mod, target, skip=END_CHECK_SKIPPED_PASSES)
    except Exception as e:  # noqa: BLE001 - TVM's lowering passes raise several error types
        return f"lowering: {_last_line(e)}"
    one_element = vector_stores_into_one_element([lowered[0], *lowered[1]])
    if one_element:
        return (f"vector stored into one element: {one_element[0]} (TVM's VectorizeLoop did not widen a buffer that "
                "CompactBufferAllocation shrank to one iteration's element)")
    over = launch_over_limits(lowered[1]) if target.kind.name == "cuda" else []
    if over:
        return (f"launch over CUDA's limits: kernel {over[0][0]} launches {over[0][2]} along {over[0][1]}, and CUDA "
                f"allows at most {over[0][3]}")
    if scalar and scalar[1] in device_allocations(lowered[1]):
        return (f"untensorized fragment: block {scalar[0]} reads or writes the tensor-core fragment {scalar[1]} "
                "element by element (its tensorization did not happen; nvcc refuses the code)")
    allocated = device_global_allocations(lowered[1]) if on_device else []
    if allocated:
        return (f"device kernel allocates global memory: buffer {allocated[0]} is allocated inside a kernel in global "
                "scope (computed under the kernel's launch loops, not made local or shared), which CUDA code "
                "generation refuses")
    outside = out_of_bounds_accesses(lowered[1]) if on_device else []
    if outside:
        return f"on-chip access out of bounds: {outside[0]}"
    if not transforms and _lowers_as_empty(mod, post_context, lowered, target):
        return "no_op: the script schedules nothing: it lowers to the very code an empty script gives"
    folds = in_place_fold_candidates(before_post)
    repeated = repeated_in_place_update([lowered[0], *lowered[1]], {b for f in folds for b in f[1:3]}) if folds else []
    if repeated:
        fold = next(f for f in folds if repeated[0] in f[1:3])
        return (f"in-place fold: TVM's StorageRewrite gives block {fold[0]}'s output {fold[2]} the storage of {fold[1]}, "
                f"and {repeated[1]} then runs it again on the same element, applying it to {repeated[0]} again and "
                "again (apache/tvm#759)")
    return ""


# The lowering passes the end check leaves out: they rewrite a kernel for speed after its structure is settled (common
# subexpressions, and simplification of the code that unrolling wrote), and on unrolled kernels they are most of the
# lowering's time.  Measured on every kernel the end check lowers (``benchmarks/end_check_lowering.py``,
# results/constrained-decoding/cpu-s25/), the verdict without them equals the verdict with them on the H200 harvest's
# 1,219 records (387 refused, 832 accepted; 94 -> 20 ms a kernel) and on 1,214 CPU lowerings (the llvm harvest's 305
# records, 851 CPU sealed attempts: 400 correct and 451 the judge failed; 113 refused; 24 -> 10 ms) but one: a CPU
# kernel that ThreadSync refuses only after the common-subexpression pass ("Cannot insert syncs inside condition"),
# which the judge's build then refuses (a lost attempt, not a wrong score).  Both sides of ``_lowers_as_empty`` leave
# them out alike, so its no-op test refuses a subset of what it did.
END_CHECK_SKIPPED_PASSES = ("tirx.CommonSubexprElim", "tirx.StmtSimplify", "tirx.RemoveNoOp",
                            "s_tir.RenormalizeSplitPattern")


def _last_line(e: BaseException) -> str:
    """A TVM error as one line: its type and the last line of its message (TVM's own verdict; the lines before it are
    its traceback)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[-1][:300] if lines else ''}"


def post_section(mod: Any, post_context: Any, text: str, pre_json: list, key: Any = None) -> tuple[str, list | None]:
    """For an explicit `post` line after ``text`` (complete lines, decoded as ``pre_json``): why the script before it
    is not a finished kernel (``finish_check`` of ``text`` with `post *`), and when it is, the section the target's
    post-processors write after it: its instructions from ``EnterPostproc`` on (trace JSON), which the script's own
    section must be, instruction by instruction (the judge's ``evaluator.replay._check_written_post``)."""
    why = finish_check(mod, post_context, text + "post *\n", key)
    if why:
        return why, None
    try:
        return "", post_context.derive(pre_json)[0][len(pre_json[0]):]
    except Exception as e:  # noqa: BLE001 - the end check derived it just now: never (a changed cache, say)
        return f"{type(e).__name__}: {str(e).strip()[:300]}", None


def _lowers_as_empty(mod: Any, post_context: Any, lowered: tuple, target: Any) -> bool:
    """The evaluator's other ``no_op``, for a script of lookups, samples and annotations only
    (``codec.kinds.transforms_anything`` false: the caller asks): its kernel, ``lowered``, is the empty script's (the
    post-processors alone).  The judge compares generated code; equal lowered modules (structurally) give equal code,
    so this refuses a subset of what the judge calls a no-op."""
    import tvm_ffi

    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import run_postprocs

    empty = fresh_schedule(mod, debug_mask=0)
    try:
        run_postprocs(empty, post_context.postprocs())
        host, devices = lower_for_target(empty.mod, target, skip=END_CHECK_SKIPPED_PASSES)
    except Exception:  # noqa: BLE001 - the post-processors or the lowering refuse the empty script: no kernel to compare
        return False
    # free variables mapped: the two kernels come from two private copies of ``mod`` (tvmx/schedule.py), and a lowered
    # module keeps free variables that each copy made its own (equal code, unequal objects)
    return bool(tvm_ffi.structural_equal(host, lowered[0], map_free_vars=True)) and len(devices) == len(lowered[1]) and all(
        tvm_ffi.structural_equal(a, b, map_free_vars=True) for a, b in zip(devices, lowered[1]))


def _lines_module(mod: Any, post_context: Any, text: str, key: Any = None) -> Any:
    """The kernel that the lines before ``text``'s last (its ``post *``) make of ``mod``, before post-processing: read
    off the live schedule of those lines where this process holds it (``key``), or the kernel the `post *` derivation
    left before post-processing (``PostprocContext.pre_module``), else the lines are applied to a fresh schedule."""
    from little_dragon.codec import apply

    lines = text[:text.rstrip("\n").rfind("\n") + 1]
    live = _LIVE.get((key, lines)) if key is not None else None
    if live is not None:
        return live.sch.mod
    from little_dragon.codec import SyntaxOnlyContext, decode

    pre = post_context.pre_module(decode(lines, SyntaxOnlyContext()))
    if pre is not None:  # the `post *` derivation the check just ran applied these lines
        return pre
    sch = fresh_schedule(mod)
    apply(lines, sch, post_context)
    return sch.mod


def _schedules_nothing(mod: Any, lines_module: Any) -> bool:
    """Whether the lines before the script's `post *` leave ``mod`` unchanged (``lines_module``: ``_lines_module``):
    the evaluator's ``no_op`` (``evaluator.replay``), a failure the judge never rewards, so the constraint resamples
    it."""
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(lines_module, mod))


def _transforms(text: str) -> bool:
    """Whether the script does more than look up, sample and annotate (``codec.kinds.transforms_anything``)."""
    from little_dragon.codec import SyntaxOnlyContext, decode
    from little_dragon.codec.kinds import transforms_anything

    return bool(transforms_anything(decode(text, SyntaxOnlyContext())))


def on_accelerator(target: Any) -> bool:
    """Whether ``target`` (a ``tvm.target.Target``) is an accelerator: the end check's kernel rules (host code,
    tensor-core fragments) apply there only."""
    from tvm_ffi import DLDeviceType

    return target.get_target_device_type() != DLDeviceType.kDLCPU


# ------------------------------------------------------------------------------------ in the worker
_MODS: dict[Any, Any] = {}      # workload key -> its kernel (loaded once per worker)
_CONTEXTS: dict[Any, Any] = {}  # workload key -> its ``post *`` context


def _init() -> None:
    # tvm_ffi imports torch when it can (DLPack interop); the schedule work needs none of it, and without it a
    # worker starts in ~1 s instead of ~3.5 s (a replacement after a crash costs that much of an attempt's time)
    sys.modules.setdefault("torch", None)


def _module(key: Any, mod_json: str | None) -> Any:
    if mod_json is not None:  # ``tvm_json`` of the caller's kernel, written by the same TVM
        from little_dragon.tvmx.schedule import load_own_json

        _MODS[key] = load_own_json(mod_json)
    return _MODS.get(key)


def _state_task(key: Any, mod_json: str | None, text: str, trace_json: list, rules: dict | None = None) -> tuple:
    if rules:
        globals().update(rules)
    mod = _module(key, mod_json)
    if mod is None:
        return ("need_module",)
    before = collections.Counter(APPLIED)
    t = time.perf_counter()
    try:
        state = prefix_facts(mod, text, trace_json, key)
    except Exception as e:  # noqa: BLE001 - TVM's refusal is the answer
        return ("err", str(e) or type(e).__name__, _line_work(text, t, before))
    return ("ok", (state, _line_work(text, t, before)))


def _line_work(text: str, t0: float, before: collections.Counter) -> dict:
    """[line work] Count the request's line (its keyword, whether the prefix was replayed) and time since ``t0``;
    the counts since ``before``."""
    kw = _last_keyword(text) + (" replayed" if APPLIED["replayed"] > before["replayed"] else "")
    APPLIED[f"n {kw}"] += 1
    APPLIED[f"ms {kw}"] += 1e3 * (time.perf_counter() - t0)
    return dict(APPLIED - before)


def _states_task(items: list[tuple], rules: dict | None = None) -> tuple:
    """``_state_task`` of each ``(key, mod_json, text, trace_json)`` in one request (a decoding step's lines)."""
    return ("ok", [_state_task(*item, rules) for item in items])


def _finish_task(key: Any, mod_json: str | None, target: str, text: str) -> tuple:
    mod = _module(key, mod_json)
    if mod is None:
        return ("need_module",)
    return ("ok", finish_check(mod, _context(key, mod, target), text, key))


def _post_task(key: Any, mod_json: str | None, target: str, text: str, pre_json: list) -> tuple:
    mod = _module(key, mod_json)
    if mod is None:
        return ("need_module",)
    return ("ok", post_section(mod, _context(key, mod, target), text, pre_json, key))


def _context(key: Any, mod: Any, target: str) -> Any:
    if key not in _CONTEXTS:
        from little_dragon.codec import PostprocContext

        _CONTEXTS[key] = PostprocContext(mod, target)
    return _CONTEXTS[key]


def _warm_task(tensor_intrinsics: bool = False) -> tuple:
    import tvm  # noqa: F401 - the imports a first request would wait for
    from tvm.s_tir import Schedule  # noqa: F401

    if tensor_intrinsics:  # what the first tensor-core line would wait for (``ScheduleWorker.warm``)
        from little_dragon.tvmx.build import import_tensor_intrinsics

        import_tensor_intrinsics()
    return ("ok", "tvm.s_tir.tensor_intrin" in sys.modules)


def own_cores() -> list[int] | None:
    """The cores this process may run on ([keep cores]); None where the platform does not say (``os.sched_getaffinity``
    is Linux's)."""
    import os

    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _cores_task() -> tuple:
    return ("ok", own_cores())


def _clear_task() -> tuple:
    _LIVE.data.clear()
    _CONTEXTS.clear()
    return ("ok", None)


# ------------------------------------------------------------------------------------ the caller's side
def _where(key: Any, text: str) -> str:
    lines = text.splitlines()
    digest = f"{key[0]:#x}" if isinstance(key, tuple) and key and isinstance(key[0], int) else repr(key)
    target = key[1] if isinstance(key, tuple) and len(key) > 1 else "?"
    try:  # the target's kind and arch, not its whole JSON
        t = json.loads(target)
        target = " ".join(str(t[k]) for k in ("kind", "arch") if k in t) or target
    except (TypeError, ValueError):
        pass
    last = f"line {len(lines)} `{lines[-1][:120]}`" if lines else "the empty script"
    return f"{last} of a script on workload {digest} (target {target})"


class ScheduleWorker:
    """One sandboxed worker process and the workloads it holds; one request at a time (a lock: a step's constraint
    work may run in a background thread while the caller finishes attempts)."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self.pool: Any = None
        self.known: set = set()          # workload keys whose kernel was sent to the worker
        self.lock = threading.Lock()
        self.crashed = 0
        self.timed_out = 0

    # -- requests
    def state(self, key: Any, mod: Any, text: str, trace_json: list) -> ScheduleState:
        state, applied = self._call(key, mod, text, lambda mj: (_state_task, key, mj, text, trace_json, _rules()))
        APPLIED.update(applied)
        return state

    def states(self, items: list[tuple[Any, Any, str, list]]) -> list[ScheduleState | BaseException]:
        """``state`` of each ``(key, mod, text, trace_json)`` in one round trip (a decoding step ends lines in many
        attempts; one request each cost a round trip each): a state, or the exception ``state`` would raise.  When
        the batch crashes or hangs the worker, each item is asked again alone, so the crash is the one line's."""
        return self.submit_states(items).result()

    def submit_states(self, items: list[tuple[Any, Any, str, list]], resend: frozenset = frozenset(),
                      retry: bool = True) -> "PendingStates":
        """``states`` started, not waited for: the worker computes them while the caller goes on (the model's forward
        pass); ``result()`` gives ``states``' answer.  The kernels of ``resend`` go with the request even where the
        worker had them (it was replaced since); ``retry``: one such request more when it answers ``need_module``."""
        if not items:
            return PendingStates(self, items, None)
        with self.lock:
            pool = self._pool()
            sent = {k for k, *_ in items if k not in self.known} | set(resend)
            batch = [(k, tvm_json(m) if k in sent else None, text, tj) for k, m, text, tj in items]
            task = pool.submit(_states_task, batch, _rules(), timeout=self.timeout_s)
        return PendingStates(self, items, task, sent, retry)

    def _each(self, items: list[tuple[Any, Any, str, list]]) -> list[ScheduleState | BaseException]:
        """``state`` of each item, one request each (after a batch crashed or hung: the culprit is named)."""
        results: list[ScheduleState | BaseException] = []
        for key, mod, text, tj in items:
            try:
                results.append(self.state(key, mod, text, tj))
            except Exception as e:  # noqa: BLE001 - the item's answer
                results.append(e)
        return results

    def finish_check(self, key: Any, mod: Any, target: str, text: str) -> str:
        """``finish_check`` in the worker: why ``text`` is not a finished kernel, "" when it is."""
        return self._call(key, mod, text, lambda mj: (_finish_task, key, mj, target, text))

    def post_section(self, key: Any, mod: Any, target: str, text: str, pre_json: list) -> tuple[str, list | None]:
        """``post_section`` in the worker: the end check of ``text`` and the section its explicit `post` line opens."""
        return self._call(key, mod, text, lambda mj: (_post_task, key, mj, target, text, pre_json))

    def clear(self) -> None:
        """Empty the worker's caches (benchmarks: each timed arm starts cold)."""
        with self.lock:
            if self.pool is not None:
                self.pool.run(_clear_task, timeout=self.timeout_s)

    def warm(self, tensor_intrinsics: bool = False) -> bool:
        """Start the worker now and wait for it (its Python and TVM imports), not in the first attempt's time;
        ``tensor_intrinsics``: and the tensor-core intrinsics registered (the first line that needs them waited ~2.6 s
        for them on session 39's H100 host, in every constraint process at once).  Whether the worker has them."""
        with self.lock:
            out = self._pool().run(_warm_task, tensor_intrinsics, timeout=self.timeout_s)
        return bool(out.ok and out.value[1])

    def cores(self) -> list[int] | None:
        """The cores the worker's process may run on (inherited from its caller's: [keep cores]); None where the
        platform does not say (``os.sched_getaffinity`` is Linux's)."""
        with self.lock:
            out = self._pool().run(_cores_task, timeout=self.timeout_s)
        return out.value[1] if out.ok else None

    def start(self, tensor_intrinsics: bool = False) -> None:
        """Begin starting the worker (``warm`` without waiting): its process and imports overlap the caller's work."""
        with self.lock:
            if self.pool is None:
                self._pool().pool.schedule(_warm_task, args=(tensor_intrinsics,))

    def close(self) -> None:
        with self.lock:
            if self.pool is not None:
                self.pool.close()
                self.pool = None

    # -- plumbing
    def _pool(self) -> Any:
        if self.pool is None:
            from little_dragon.sandbox import WorkerPool

            self.pool = WorkerPool(max_workers=1, initializer=_init)
        return self.pool

    def _call(self, key: Any, mod: Any, text: str, request: Any) -> Any:
        with self.lock:
            pool = self._pool()
            for known in ((True, False) if key in self.known else (False,)):
                fn, *args = request(None if known else tvm_json(mod))
                out = pool.run(fn, *args, timeout=self.timeout_s)
                if not out.ok:
                    self.known.clear()  # a new worker holds no kernel
                    if out.kind == "timeout":
                        self.timed_out += 1
                        raise TVMTimedOut(f"TVM did not finish applying {_where(key, text)} in {self.timeout_s:g} s "
                                          "(the constraint's worker was killed)")
                    if out.kind == "crash":
                        self.crashed += 1
                        raise TVMCrashed(f"TVM ended the constraint's worker while applying {_where(key, text)} "
                                         f"({out.message})")
                    raise RuntimeError(f"the constraint's worker failed on {_where(key, text)}: {out.message}")
                if out.value[0] != "need_module":
                    break
            self.known.add(key)
            if out.value[0] == "ok":
                return out.value[1]
            if len(out.value) > 2:
                APPLIED.update(out.value[2])
            raise RuntimeError(out.value[1])  # TVM's own message: the attempt's rejection reason


def _answers(out: list) -> list[ScheduleState | BaseException]:
    results: list[ScheduleState | BaseException] = []
    for r in out:
        if r[0] == "ok":
            APPLIED.update(r[1][1])
            results.append(r[1][0])
        else:
            if len(r) > 2:
                APPLIED.update(r[2])
            results.append(RuntimeError(r[1]))
    return results


class PendingStates:
    """``ScheduleWorker.submit_states``' request; ``result()`` waits for it (once)."""

    def __init__(self, worker: ScheduleWorker, items: list, task: Any, sent: set | None = None, retry: bool = True):
        self.worker, self.items, self.task, self.sent, self.retry = worker, items, task, sent or set(), retry
        self._result: list | None = None

    def result(self) -> list[ScheduleState | BaseException]:
        if self._result is None:
            self._result = self._collect()
        return self._result

    def _collect(self) -> list[ScheduleState | BaseException]:
        if self.task is None:
            return []
        outcome = self.task.outcome()
        if not outcome.ok:  # crashed or hung: a new worker holds no kernel; one request per item names the culprit
            log.warning("constrained decoding: the TVM worker's request of %d lines failed (%s: %s); each asked alone",
                        len(self.items), outcome.kind, (outcome.message.strip().splitlines() or [""])[0][:300])
            with self.worker.lock:
                self.worker.known.clear()
            return self.worker._each(self.items)
        with self.worker.lock:
            self.worker.known.update(self.sent)
        res = outcome.value[1]
        missing = frozenset(self.items[i][0] for i, r in enumerate(res) if r[0] == "need_module")
        if missing:  # the worker was replaced since: those kernels sent again, once; then one request per item
            if self.retry:
                return self.worker.submit_states(self.items, resend=missing, retry=False).result()
            return self.worker._each(self.items)
        return _answers(res)


def tvm_json(mod: Any) -> str:
    import tvm

    return tvm.ir.save_json(mod)


_WORKERS: dict[str, ScheduleWorker] = {}
_WORKER_LOCK = threading.Lock()


def worker(role: str = "lines") -> ScheduleWorker:
    """This process's worker for ``role``: ``lines`` (the lines' schedule facts and the synchronous end checks: its
    live schedules serve every attempt) or ``end`` (the end checks that run beside decoding,
    ``constrained.ScriptConstraint.defer_end``: each takes ~10-60 ms, and on the one worker it held the next step's
    line requests behind it)."""
    with _WORKER_LOCK:
        w = _WORKERS.get(role)
        if w is None:
            import atexit

            w = _WORKERS[role] = ScheduleWorker()
            atexit.register(w.close)
        return w
