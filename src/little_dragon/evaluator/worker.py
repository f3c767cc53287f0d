"""Code that runs inside a pool worker: one evaluation from a decoded trace to a categorised raw result.

Workers are long-lived (tvm is imported once in the fork server they fork from; the tensor intrinsics
once per worker).  Every stage runs under a SIGALRM watchdog with the default action (terminate): a
kernel or compiler stuck in C++ cannot ignore it, and the pool sees a worker that died of SIGALRM (a
timeout) and replaces it.  The current phase is written to ``<phase_dir>/<pid>`` so a worker that dies
(segfault, abort, watchdog) is charged to the right category.  Measurements hold an exclusive ``flock``
on the device's lock file; the kernel releases it when a holder dies, so a crash never wedges the lock.

A GPU kernel that fails at run time (an illegal address, a launch failure) can leave the worker's CUDA context
unusable: the error is sticky, every later call on that context fails (a valid schedule evaluated next would be
judged a runtime error), and the failing kernel's device buffers throw the same error from their destructors,
terminating the process wherever the garbage collector happens to free them (session 15's sealed run on the H200:
``terminate called after throwing ... cudaErrorIllegalAddress`` in a worker, then no evaluation finished for 5
minutes).  So after a run-time error on a GPU target the worker writes its result to ``<phase_dir>/<pid>.result``
and leaves at once (``os._exit``: no destructor runs); the pool reads the result there and replaces the worker
(``pool.Evaluator._collect``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import secrets
import signal
import time
from typing import Any

import numpy as np

PHASES = ("start", "apply", "verify", "build", "reference", "run", "baseline")
TEST_HOOK_PREFIX = "#dragon-test:"
LEFT_EXIT_CODE = 75  # a worker that left on purpose (``_leave``): its result is in the phase directory


@dataclasses.dataclass
class _State:
    cfg: Any
    timing: Any
    target: Any                 # tvm.target.Target
    target_kind: str
    phase_fd: int
    test_hooks: bool
    phase_dir: str = ""
    device_present: bool = True   # a GPU target's device exists here (without one, a run error breaks nothing)
    intrinsics_loaded: bool = False
    modules: dict = dataclasses.field(default_factory=dict)
    references: dict = dataclasses.field(default_factory=dict)
    postprocs: dict = dataclasses.field(default_factory=dict)
    empty_code: dict = dataclasses.field(default_factory=dict)


_S: _State | None = None


def init_worker(cfg: Any, timing_cfg: Any, target: dict, phase_dir: str, test_hooks: bool) -> None:
    """pebble initializer: limits, watchdog disposition, long-lived state."""
    global _S
    import tvm

    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the caller's business
    signal.signal(signal.SIGALRM, signal.SIG_DFL)     # the watchdog terminates, whatever C++ is doing
    if test_hooks:  # a worker waits this long for pebble's channel lock before giving up (60 s): tests wait less
        from pebble.common.types import CONSTS

        CONSTS.channel_lock_timeout = 2.0
    kind = target["kind"]
    if cfg.memory_limit_gb > 0 and kind != "cuda":
        limit = int(cfg.memory_limit_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    fd = os.open(os.path.join(phase_dir, str(os.getpid())), os.O_CREAT | os.O_WRONLY, 0o644)
    present = kind == "llvm" or bool(tvm.device(kind, 0).exist)
    _S = _State(cfg, timing_cfg, tvm.target.Target(target), kind, fd, test_hooks, phase_dir, present)
    if cfg.preload_tensor_intrinsics == "always" or (cfg.preload_tensor_intrinsics == "auto" and kind == "cuda"):
        _load_intrinsics()
    _set_phase("start")


def _set_phase(name: str) -> None:
    os.pwrite(_S.phase_fd, name.ljust(16).encode(), 0)


def result_path(phase_dir: str, pid: int) -> str:
    """Where a worker that left on purpose (``_leave``) put the result of its last task."""
    return os.path.join(phase_dir, f"{pid}.result")


def _device_state_lost(hook: str | None) -> bool:
    """Whether a run-time error may have left this worker's device context unusable: on a GPU target whose device is
    here, always (CUDA's sticky errors cannot be told apart from the others without touching the context again, which
    may terminate the process); the test hook ``device-error`` says so on any target."""
    return (_S.target_kind != "llvm" and _S.device_present) or hook == "device-error"


def _leave(result: dict) -> None:
    """Hand ``result`` to the pool through the phase directory (written whole, then renamed) and end this worker
    without running a destructor: its device buffers may throw from them (module docstring)."""
    path = result_path(_S.phase_dir, os.getpid())
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)
    os._exit(LEFT_EXIT_CODE)  # not 0: pebble takes a worker that exits with 0 for a normal retirement, and its task
    # would wait for the pool's backstop


def _arm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 0.001))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _load_intrinsics() -> None:
    if not _S.intrinsics_loaded:
        from little_dragon.tvmx.build import import_tensor_intrinsics

        import_tensor_intrinsics()
        _S.intrinsics_loaded = True


def _device_lock():
    """The project-wide per-device measurement lock (shared with the harvest's runner)."""
    from little_dragon.tvmx.timing import device_lock
    from little_dragon.tvmx.target import device

    return device_lock(device({"kind": _S.target_kind}))


# a compiler's own error line: nvcc's `file.cu(12): error: ..`, gcc/clang's `file.c:12:3: error: ..`
_COMPILER_ERROR = re.compile(r"^\s*\S+(?:\(\d+\)|:\d+(?::\d+)?): (?:catastrophic |fatal )?error\b.*$", re.M)


def _short(e: BaseException, limit: int = 1200) -> str:
    """``e`` as a verdict's message of at most ~``limit`` characters.  TVM errors end with the useful line: the tail
    is kept.  A compiler's output (nvcc through TVM's CUDA build) is mostly warnings, and its tail is warnings: its
    error lines go first (session 21's H200 build errors kept 1,200 characters of nvcc warnings and no error)."""
    text = f"{type(e).__name__}: {e}".strip()
    if len(text) <= limit:
        return text
    errors = [m.group(0).strip() for m in _COMPILER_ERROR.finditer(text)]
    if errors:
        head = f"{type(e).__name__}: {len(errors)} compiler error(s): " + " | ".join(errors[:5])
        head = head[:limit // 2]
        return head + " ... " + text[-(limit - len(head) - 5):]
    return "..." + text[-limit:]


def describe_device() -> str:
    """A stable name of the measuring device (part of the cache key)."""
    import tvm

    if _S.target_kind == "cuda":
        dev = tvm.cuda(0)
        return f"cuda:{dev.device_name}" if dev.exist else "cuda:absent"
    model = "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} x{_S.target.attrs.get('num-cores', os.cpu_count())}"


def _workload(key: str, script: str):
    mod = _S.modules.get(key)
    if mod is None:
        from tvm.script import from_source

        mod = from_source(script)
        if not hasattr(mod, "functions_items"):
            import tvm

            mod = tvm.IRModule({"main": mod})
        if len(_S.modules) > 64:
            _S.modules.clear()
            _S.references.clear()
            _S.postprocs.clear()
            _S.empty_code.clear()
        _S.modules[key] = mod
    return mod


def _reference(key: str, mod: Any):
    from little_dragon.evaluator.numerics import build_reference

    ref = _S.references.get(key)
    if ref is None:
        ref = _S.references[key] = build_reference(mod)
    return ref


def _fail(res: dict, category: str, phase: str, msg: str) -> dict:
    res.update(category=category, phase=phase, message=msg)
    return res


def evaluate(task: dict) -> dict:
    """Apply, verify, build, check and time one decoded trace. Never raises for a bad script."""
    if _S.test_hooks and task.get("hook") == "exit-after-task":  # this worker ends abnormally once it has answered
        import threading

        threading.Timer(0.3, os._exit, (LEFT_EXIT_CODE,)).start()
        return {"category": "runtime_error", "phase": "run", "message": "test hook exit-after-task", "phase_s": {}}
    if _S.test_hooks and task.get("hook") == "exit-holding-channel-lock":  # as a worker dying inside pebble's code
        import gc

        from pebble.pool.channel import WorkerChannel

        next(o for o in gc.get_objects() if isinstance(o, WorkerChannel)).mutex.acquire()
        os._exit(LEFT_EXIT_CODE)
    try:
        return _evaluate(task)
    finally:
        _disarm()
        _set_phase("start")


def _postprocs(key: str, mod: Any) -> list:
    """The target's post-processors for a workload (initialised for it; stateless across schedules)."""
    procs = _S.postprocs.get(key)
    if procs is None:
        from little_dragon.tvmx.postprocs import target_postprocs

        procs = _S.postprocs[key] = target_postprocs(mod, _S.target)
    return procs


def _empty_code_hash(key: str, mod: Any) -> str | None:
    """The code an empty script compiles to, for the no-op test (once per workload and worker)."""
    if key not in _S.empty_code:
        from little_dragon.evaluator.replay import empty_script_code_hash

        _S.empty_code[key] = empty_script_code_hash(mod, _postprocs(key, mod), _S.target)
    return _S.empty_code[key]


def _evaluate(task: dict) -> dict:
    import tvm

    from little_dragon.evaluator import numerics
    from little_dragon.evaluator.outcome import CHECKED_ONLY
    from little_dragon.codec.kinds import transforms_anything
    from little_dragon.evaluator.replay import (LAYOUT_REWRITE_NOTE, NO_OP_CODE, ReplayFailure, code_hash, replay,
                                                timing_args_info)
    from little_dragon.tvmx import timing
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import needs_tensor_intrinsics

    cfg = _S.cfg
    res: dict[str, Any] = {"category": None, "message": "", "phase": None, "phase_s": {}}
    clock = time.perf_counter
    trace_text = task["trace_text"]
    hook = task.get("hook") if _S.test_hooks else None
    args_info = None

    t0 = clock()
    _set_phase("apply")
    _arm(cfg.build_timeout_s)
    mod = _workload(task["workload_key"], task["workload_script"])
    if hook is None:
        trace_json = json.loads(trace_text)
        if needs_tensor_intrinsics(trace_json) and not _S.intrinsics_loaded:
            _disarm()  # a one-off per worker, not the script's fault
            _load_intrinsics()
            _arm(cfg.build_timeout_s)
        try:
            done = replay(mod, trace_json, _postprocs(task["workload_key"], mod), lines=task.get("lines"),
                          text=task.get("script", ""), on_phase=_set_phase)
        except ReplayFailure as e:
            phase = {"apply_error": "apply", "no_op": "apply", "build_error": "build"}.get(e.category, "verify")
            return _fail(res, e.category, phase, str(e)[:1500])
        res["phase_s"]["apply_verify"] = clock() - t0
        if task.get("stop_after") == "verify":
            res.update(category=CHECKED_ONLY["verify"], phase="verify")
            return res

        t1 = clock()
        _set_phase("build")
        try:
            rt_mod = fast_build(done.sch.mod, _S.target)
            numerics.jit_now(rt_mod)
            check_mod = rt_mod
            if done.layout_rewrite:
                # the kept pre-processing block takes the original weight (correctness); the stripped kernel,
                # timed like MetaSchedule times it, takes the pre-transformed one
                check_mod = tvm.tirx.build(done.sch.mod, target=_S.target)
                numerics.jit_now(check_mod)
                args_info = timing_args_info(done.sch.mod)
                res["message"] = LAYOUT_REWRITE_NOTE
        except Exception as e:  # noqa: BLE001
            return _fail(res, "build_error", "build", _short(e))
        res["phase_s"]["build"] = clock() - t1
        res["kernel_hash"] = code_hash(rt_mod)
        if res["kernel_hash"] == _empty_code_hash(task["workload_key"], mod):
            if not transforms_anything(trace_json):
                return _fail(res, "no_op", "build", NO_OP_CODE)
            res["default_kernel"] = True  # real scheduling that lands on the default kernel: a copy of it
        if task.get("stop_after") == "build":
            res.update(category=CHECKED_ONLY["build"], phase="build")
            return res
    _disarm()

    bound_s = float(task.get("bound_s") or 0.0)  # roofline bound, computed by the caller from its peaks
    res["roofline_bound_us"] = bound_s * 1e6
    dev = tvm.cuda(0) if _S.target_kind == "cuda" else tvm.cpu(0)
    tol_of = cfg.tolerances
    func = mod["main"]

    def reference_case(ref) -> tuple[list, list]:
        """Fresh inputs and their float64 CPU answer."""
        seed = secrets.randbits(32)
        res["input_seed"] = seed
        arrays = numerics.random_arrays(ref, np.random.default_rng(seed))
        _set_phase("reference")
        return arrays, numerics.run_reference(ref, arrays)

    def check_once(ref, case: tuple[list, list] | None = None) -> bool:
        arrays, expected = case or reference_case(ref)
        _set_phase("run")
        try:
            got = numerics.run_candidate(check_mod, dev, ref, arrays)
        except Exception as e:  # noqa: BLE001
            _fail(res, "runtime_error", "run", _short(e))
            if _device_state_lost(hook):
                _leave(res)
            return False
        worst = 0.0
        for i, out, exp in zip(ref.outputs, got, expected):
            dt = ref.param_dtypes[i]
            ok, msg, err = numerics.compare(out, exp, dt, tol_of.get(dt))
            worst = max(worst, err)
            if not ok:
                res["max_abs_err"] = err
                _fail(res, "wrong_result", "run", f"output {func.params[i].name}: {msg}")
                return False
        res["max_abs_err"] = worst
        return True

    def time_once(tcfg) -> Any:
        _set_phase("run")
        try:
            return timing.measure(rt_mod, func, {"kind": _S.target_kind}, tcfg, args_info)
        except Exception as e:  # noqa: BLE001
            _fail(res, "runtime_error", "run", "timing: " + _short(e))
            if _device_state_lost(hook):
                _leave(res)
            return None

    # the CPU reference disturbs CPU timing but not the GPU's: on llvm it is built outside the device lock and
    # run inside; on a GPU it also runs outside (a float64 reference of a large kernel takes seconds on one
    # core: inside the lock it serialised every worker, 8 s per record of a 64x11264x2048 dense on the H200)
    t1 = clock()
    _set_phase("reference")
    _arm(cfg.run_timeout_s)
    ref = _reference(task["workload_key"], mod)
    case = reference_case(ref) if _S.target_kind != "llvm" else None
    _disarm()
    res["phase_s"]["reference_build"] = clock() - t1
    with _device_lock():
        t1 = clock()
        _arm(cfg.run_timeout_s)
        if hook == "hang":
            _set_phase("run")
            while True:
                time.sleep(3600)
        if hook == "abort":
            _set_phase("run")
            os.abort()
        if hook == "device-error":  # a kernel whose run raises (as a CUDA kernel's illegal address does)
            check_mod = _raising_kernel
        if hook == "illegal-address":  # a real kernel writing far out of bounds (on a GPU: a sticky CUDA error)
            check_mod = _out_of_bounds_kernel(_S.target)
        if not check_once(ref, case):
            return res
        res["phase_s"]["check"] = clock() - t1
        t1 = clock()
        lat = time_once(_S.timing)
        if lat is None:
            return res
        res["phase_s"]["timing"] = clock() - t1
        implausible = lat.median_s < bound_s / task["roofline_slack"]
        if implausible and cfg.remeasure_implausible:
            # fresh inputs again, rotated input sets, cold caches: a real kernel stays fast, a fluke does not
            _arm(cfg.run_timeout_s)
            if not check_once(ref):
                return res
            strict = dataclasses.replace(_S.timing, alloc_repeat=max(3, _S.timing.alloc_repeat),
                                         enable_cpu_cache_flush=_S.target_kind == "llvm")
            lat = time_once(strict)
            if lat is None:
                return res
            implausible = lat.median_s < bound_s / task["roofline_slack"]
        res.update(category="correct", latency_s=list(lat.samples), latency_us=lat.median_us, spread=lat.spread,
                   implausible=bool(implausible))
        if implausible:
            res["message"] = (f"latency {lat.median_us:.3g} us beats the roofline bound {bound_s * 1e6:.3g} us "
                              "(workload FLOPs and bytes at the device's peaks): speed not rewarded")
        _disarm()
    return res


def _raising_kernel(*args: Any) -> None:
    raise RuntimeError("CUDA Runtime Error: cudaErrorIllegalAddress (700): an illegal memory access was encountered "
                       "(test hook device-error)")


def _out_of_bounds_kernel(target: Any) -> Any:
    """A callable taking any arguments that runs a kernel writing 2^36 floats past a one-element buffer: on a GPU an
    illegal address, the sticky kind of CUDA error (test hook ``illegal-address``)."""
    import numpy as np
    import tvm
    from tvm.script import tirx as T

    if target.kind.name == "llvm":
        raise RuntimeError("the illegal-address hook needs a GPU target")

    @T.prim_func
    def oob(a: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n,), "float32")
        for t in T.thread_binding(1, thread="threadIdx.x"):
            A[T.Cast("int64", t) + n * T.int64(1 << 36)] = T.float32(1)

    kernel = tvm.tirx.build(tvm.IRModule({"main": oob}), target=target)
    dev = tvm.device(target.kind.name, 0)

    def run(*args: Any) -> None:
        kernel(tvm.runtime.tensor(np.zeros(1, "float32"), dev))

    return run


def measure_workload_baseline(task: dict) -> dict:
    """Time the workload's baseline (see baseline.py) under the device lock."""
    from little_dragon.tvmx.baseline import measure_baseline

    try:
        _set_phase("baseline")
        mod = _workload(task["workload_key"], task["workload_script"])
        with _device_lock():
            _arm(_S.cfg.run_timeout_s)
            lat, kind = measure_baseline(mod, _S.target, _S.timing)
        return {"us": lat.median_us, "kind": kind, "spread": lat.spread}
    except Exception as e:  # noqa: BLE001  reported, never raised: the caller still scores the script
        if _device_state_lost(None):
            _leave({"error": _short(e)})
        return {"error": _short(e)}
    finally:
        _disarm()
        _set_phase("start")
