"""The one timing protocol: harvest candidates, baselines and the evaluator are all timed by it.

It is MetaSchedule's own runner protocol (``run_evaluator_common``: ``time_evaluator`` with ``number``
runs per repeat, ``repeat`` repeats, ``min_repeat_ms``), so a latency measured by the evaluator is
comparable with the ``run_secs`` of the harvested tuning records.  On CUDA ``time_evaluator`` times with
device events.  ``alloc_repeat`` input sets are rotated so a kernel cannot be timed on a warm cache only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import math
import os
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class TimingConfig:
    number: int = field(3, help="Kernel runs per timed repeat (time_evaluator 'number').")
    repeat: int = field(5, help="Timed repeats; the reported latency is their median.")
    min_repeat_ms: int = field(20, help="Grow 'number' until one repeat lasts at least this long.")
    enable_cpu_cache_flush: bool = field(False, help="Flush the CPU cache before each repeat (llvm only).")
    alloc_repeat: int = field(1, help="Distinct random input sets, rotated between repeats.")
    timeout_sec: float = field(30.0, help="Runner timeout per candidate, seconds.")

    def evaluator_config(self):
        from tvm.s_tir import meta_schedule as ms

        return ms.runner.EvaluatorConfig(
            number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
            enable_cpu_cache_flush=self.enable_cpu_cache_flush,
        )


@dataclasses.dataclass(frozen=True)
class Latency:
    """Per-repeat latencies (seconds) and their summary."""

    samples: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    @property
    def spread(self) -> float:
        """(max - min) / median: how stable the measurement was."""
        m = self.median_s
        return (max(self.samples) - min(self.samples)) / m if m > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "min_us": min(self.samples) * 1e6,
                "max_us": max(self.samples) * 1e6, "spread": self.spread, "repeats": len(self.samples)}


def random_args(args_info: Sequence[Any], dev: Any, alloc_repeat: int = 1) -> list[list[Any]]:
    """Allocate ``alloc_repeat`` sets of random input tensors like MetaSchedule's runner does."""
    import tvm
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    f_random_fill = tvm.get_global_func("tvm.contrib.random.random_fill", True)
    if f_random_fill is None:
        raise RuntimeError("TVM was built without tvm.contrib.random.random_fill")
    infos = [a.as_json() if hasattr(a, "as_json") else a for a in args_info]
    return alloc_argument_common(f_random_fill, dev, infos, alloc_repeat)


_held: dict[str, int] = {}  # lock path -> nesting depth in this process (flock is not reentrant)


@contextlib.contextmanager
def device_lock(dev: Any) -> Iterator[None]:
    """Exclusive use of one device for timing, across processes (harvest workers, evaluator workers):
    builds run in parallel, measurements on one device never overlap.  An OS file lock, released by the
    kernel if the holder dies; re-entrant within a process (a correctness check and its timing may nest)."""
    lock_dir = os.environ.get("DRAGON_MEASURE_LOCK_DIR", tempfile.gettempdir())
    path = os.path.join(lock_dir, f"dragon-measure-{str(dev).replace(':', '-')}.lock")
    if _held.get(path):
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _held[path] = 1
        try:
            yield
        finally:
            _held[path] = 0
            fcntl.flock(f, fcntl.LOCK_UN)


def locked_run_evaluator(rt_mod: Any, device: Any, evaluator_config: Any, repeated_args: list) -> list[float]:
    """MetaSchedule's ``f_run_evaluator`` hook: its own protocol, under the device lock."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    with device_lock(device):
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)


_RUNNERS: dict[str, Any] = {}


def local_runner(cfg: TimingConfig):
    """MetaSchedule LocalRunner with the project's protocol and device lock, one per process and protocol.

    A LocalRunner owns a popen worker (a fresh Python importing TVM) and checks it at start-up with another
    round trip: ~4 s per tuning run on 2 cores, paid once per harvest worker instead. The popen pool
    replaces a worker that times out or dies, so reuse across workloads is safe."""
    import json

    key = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    runner = _RUNNERS.get(key)
    if runner is None:
        from tvm.s_tir import meta_schedule as ms

        from little_dragon.tvmx.build import without_sanity_check

        runner = _RUNNERS[key] = without_sanity_check(ms.runner.LocalRunner)(
            timeout_sec=cfg.timeout_sec, evaluator_config=cfg.evaluator_config(), alloc_repeat=cfg.alloc_repeat,
            f_run_evaluator=locked_run_evaluator)
    return runner



def time_module(rt_mod: Any, dev: Any, repeated_args: list[list[Any]], cfg: TimingConfig) -> Latency:
    """Time the module's entry function with MetaSchedule's evaluator protocol, under the device lock."""
    costs = locked_run_evaluator(rt_mod, dev, cfg.evaluator_config(), repeated_args)
    if not costs or any(not math.isfinite(c) or c <= 0 for c in costs):
        raise RuntimeError(f"timer returned invalid costs {costs}")
    return Latency(tuple(float(c) for c in costs))


def measure(rt_mod: Any, prim_func: Any, target_spec: Any, cfg: TimingConfig, args_info: Any = None) -> Latency:
    """Allocate random inputs for ``prim_func``'s signature (or for ``args_info``, MetaSchedule ArgInfos, e.g.
    a layout-rewritten kernel's pre-transformed weight) on the target's device and time ``rt_mod``."""
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.tvmx import target as tgt

    dev = tgt.device(target_spec)
    infos = args_info if args_info is not None else ms.arg_info.ArgInfo.from_prim_func(prim_func)
    args = random_args(infos, dev, cfg.alloc_repeat)
    return time_module(rt_mod, dev, args, cfg)
