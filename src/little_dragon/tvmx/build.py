"""Building scheduled TensorIR for a target, fast.

MetaSchedule's default build function imports ``tvm.s_tir.tensor_intrin`` (13-22 s) in every fresh builder
worker, so the default ``LocalBuilder`` times out on every candidate.  ``fast_build`` does the same two
steps (strip layout-rewrite blocks, ``tvm.tirx.build``) without that import; the builder pickles it by
reference into its workers.
"""
from __future__ import annotations

import threading
from typing import Any

_BUILD_LOCK = threading.Lock()


def fast_build(mod: Any, target: Any, _params: Any = None) -> Any:
    """The MetaSchedule ``f_build`` hook: returns a runtime Module (``tvm.compile`` returns an Executable
    that cannot be exported by the builder)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.tirx.build(mod, target=target)


def lower_for_target(mod: Any, target: Any, skip: tuple[str, ...] = ()) -> tuple[Any, list]:
    """``fast_build``'s steps up to code generation (``tvm.tirx.build``: the target bound, its default TIR pipeline,
    the host/device split and both finalization passes), for their verdict: raises what those passes raise (TVM's
    own checks, such as ThreadSync's "Cannot insert syncs inside condition" or an access pointer whose element type
    does not match).  No compiler runs, so a CUDA kernel lowers on a machine without the CUDA toolkit; what only
    nvcc refuses is left to the build.  Returns the finalized host module and device modules (what code generation
    would compile).  ``skip``: names of passes left out (``PassContext``'s ``disabled_pass``, added to the current
    context's, whose other settings are kept)."""
    import tvm

    if skip:
        now = tvm.transform.PassContext.current()
        with tvm.transform.PassContext(opt_level=now.opt_level, required_pass=list(now.required_pass),
                                       disabled_pass=[*now.disabled_pass, *skip], instruments=list(now.instruments),
                                       config=dict(now.config)):
            return _lower(mod, target)
    return _lower(mod, target)


def _lower(mod: Any, target: Any) -> tuple[Any, list]:
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.tirx.build import split_host_device_mods
    from tvm_ffi import DLDeviceType

    target = tvm.target.Target(target)
    if target.host is not None:
        host = target.host
    elif target.get_target_device_type() == DLDeviceType.kDLCPU:
        host = target
    else:
        host = tvm.target.Target("llvm" if tvm.runtime.enabled("llvm") else "c")
    target = target.with_host(host)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    mod = tvm.tirx.transform.BindTarget(target)(mod)
    pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    host_mod, device_mods = split_host_device_mods(pipeline(mod))
    return finalize_host()(host_mod), [finalize_device()(m) for m in device_mods.values()]


# A reused builder worker is recycled after this many builds: TVM restarts its builder pool at every call
# "because of a known memory leak issue with the PopenPool workers after a couple times of usage"
# (LocalBuilder.build); a recycled worker bounds that growth and costs one TVM import per 64 builds.
BUILDER_MAX_USES = 64

_BUILDERS: dict[tuple[int, float], Any] = {}


def local_builder(max_workers: int, timeout_sec: float):
    """MetaSchedule's LocalBuilder with ``fast_build``, one per process and setting, whose popen workers live
    across ``build`` calls (recycled every ``BUILDER_MAX_USES`` builds; a timed-out or dead worker is
    replaced by TVM's pool) and without its start-up sanity check (a throw-away popen pool that imports TVM
    only to look up the build function; a broken build function still shows, as a build error on every
    candidate).

    TVM's LocalBuilder starts a fresh PopenPoolExecutor in every ``build`` call: with 16 trials per workload
    that was 1-2 calls per workload, each starting ``max_workers`` Python processes that import TVM (and,
    through tvm_ffi, torch): ~3.4 s of CPU each. Kept alive: 5 workloads x 16 trials started 3 popen workers
    instead of 17, 126 s of CPU instead of 158 (results/pipeline-cpu.md, session 7)."""
    key = (int(max_workers), float(timeout_sec))
    builder = _BUILDERS.get(key)
    if builder is None:
        builder = _BUILDERS[key] = _persistent_builder_cls()(max_workers=max_workers, timeout_sec=timeout_sec,
                                                              f_build=fast_build)
    return builder


_PERSISTENT: list[Any] = []


def _persistent_builder_cls() -> Any:
    """LocalBuilder (sanity check off) whose ``build`` maps the inputs over one long-lived PopenPoolExecutor;
    otherwise TVM's ``LocalBuilder.build``: the same worker function, the same results and error texts."""
    if not _PERSISTENT:
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule.builder import BuilderResult
        from tvm.s_tir.meta_schedule.builder import local_builder as tvm_lb
        from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

        @derived_object
        class PersistentLocalBuilder(without_sanity_check(ms.builder.LocalBuilder)._cls):
            def build(self, build_inputs: list) -> list:
                with _BUILD_LOCK:
                    pool = getattr(self, "_popen_pool", None)
                    if pool is None:
                        pool = self._popen_pool = PopenPoolExecutor(
                            max_workers=self.max_workers, timeout=self.timeout_sec, initializer=self.initializer,
                            maximum_process_uses=BUILDER_MAX_USES)
                args = [(self.f_build, self.f_export, b.mod, b.target, tvm_lb._serialize_params(b.params))
                        for b in build_inputs]
                results = []
                for res in pool.map_with_error_catching(lambda x: tvm_lb._worker_func(*x), args):
                    if res.status == StatusKind.COMPLETE:
                        results.append(BuilderResult(res.value, None))
                    elif res.status == StatusKind.TIMEOUT:
                        results.append(BuilderResult(
                            None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
                    elif res.status == StatusKind.EXCEPTION:
                        results.append(BuilderResult(None, "LocalBuilder: An exception occurred\n" + str(res.value)))
                    else:
                        raise ValueError(f"Unreachable: unexpected result: {res}")
                return results

            def worker_pids(self) -> list[int]:
                """Process ids of the live popen workers (for tests and benchmarks)."""
                pool = getattr(self, "_popen_pool", None)
                if pool is None:
                    return []
                return sorted(w._proc.pid for w in pool._worker_map.values() if w.is_alive())

        _PERSISTENT.append(PersistentLocalBuilder)
    return _PERSISTENT[0]


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
