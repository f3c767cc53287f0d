"""Traces to test and measure the codec on, without a harvest: sampled from MetaSchedule design spaces.

A MetaSchedule search samples its initial population by replaying a design-space trace with its decisions
dropped on a freshly seeded schedule, then runs the post-processors after ``EnterPostproc``; the traces
built here go through exactly those steps, so they carry every instruction kind a tuning record can hold.
Workloads are small ``te.create_prim_func`` kernels of the families the project tunes, for llvm and CUDA
(tensor-core spaces for float16 matmuls).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterator

from little_dragon.tvmx.schedule import fresh_schedule
from little_dragon.tvmx.target import CUDA_H200

LLVM_TARGET: dict[str, Any] = {"kind": "llvm", "num-cores": 2}


def _matmul(n: int, m: int, k: int, dtype: str = "float32", out: str = "float32", int64: bool = False):
    from tvm import te, tirx

    def dim(x: int):
        return tirx.IntImm("int64", x) if int64 else x

    a = te.placeholder((dim(n), dim(k)), dtype, name="A")
    b = te.placeholder((dim(k), dim(m)), dtype, name="B")
    r = te.reduce_axis((0, dim(k)), name="k")
    c = te.compute((dim(n), dim(m)), lambda i, j: te.sum(a[i, r].astype(out) * b[r, j].astype(out), axis=r),
                   name="C")
    return [a, b, c]


def _matmul_relu(n: int, m: int, k: int):
    from tvm import te

    a, b, c = _matmul(n, m, k)
    d = te.compute(c.shape, lambda i, j: te.max(c[i, j] + 1.0, 0.0), name="D")
    return [a, b, d]


def _batch_matmul(bs: int, n: int, m: int, k: int):
    from tvm import te

    a = te.placeholder((bs, n, k), "float32", name="A")
    b = te.placeholder((bs, k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((bs, n, m), lambda x, i, j: te.sum(a[x, i, r] * b[x, r, j], axis=r), name="C")
    return [a, b, c]


def _conv2d(n: int, c: int, hw: int, f: int, ksz: int):
    from tvm import te, topi

    x = te.placeholder((n, c, hw, hw), "float32", name="X")
    w = te.placeholder((f, c, ksz, ksz), "float32", name="W")
    y = topi.nn.conv2d_nchw(x, w, stride=1, padding=1, dilation=1)
    z = topi.nn.relu(y)
    return [x, w, z]


def _softmax(m: int, n: int):
    from tvm import te, topi

    x = te.placeholder((m, n), "float32", name="X")
    return [x, topi.nn.softmax(x, axis=1)]


def _layer_norm(m: int, n: int):
    from tvm import te, topi

    x = te.placeholder((m, n), "float32", name="X")
    g = te.placeholder((n,), "float32", name="gamma")
    b = te.placeholder((n,), "float32", name="beta")
    return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1], epsilon=1e-5)]


def _row_sum(m: int, n: int):
    from tvm import te

    x = te.placeholder((m, n), "float32", name="X")
    r = te.reduce_axis((0, n), name="r")
    return [x, te.compute((m,), lambda i: te.sum(x[i, r], axis=r), name="S")]


def _elementwise(m: int, n: int):
    from tvm import te

    x = te.placeholder((m, n), "float32", name="X")
    y = te.placeholder((m, n), "float32", name="Y")
    z = te.compute((m, n), lambda i, j: x[i, j] * 2.0 + y[i, j], name="Z")
    w = te.compute((m, n), lambda i, j: te.exp(z[i, j]), name="W")
    return [x, y, w]


# name -> (tensor builder, targets it is sampled for)
WORKLOADS: dict[str, tuple[Callable[[], list], tuple[str, ...]]] = {
    "matmul_64": (lambda: _matmul(64, 64, 64), ("llvm", "cuda")),
    "matmul_relu_128x64x32": (lambda: _matmul_relu(128, 64, 32), ("llvm", "cuda")),
    "batch_matmul_4x32": (lambda: _batch_matmul(4, 32, 32, 32), ("llvm", "cuda")),
    "conv2d_nchw_relu": (lambda: _conv2d(1, 16, 14, 32, 3), ("llvm", "cuda")),
    "softmax_64x128": (lambda: _softmax(64, 128), ("llvm", "cuda")),
    "layer_norm_32x256": (lambda: _layer_norm(32, 256), ("llvm", "cuda")),
    "row_sum_128x512": (lambda: _row_sum(128, 512), ("llvm", "cuda")),
    "elementwise_exp_64x64": (lambda: _elementwise(64, 64), ("llvm", "cuda")),
    "matmul_fp16_tc_128": (lambda: _matmul(128, 128, 128, "float16", "float32"), ("cuda",)),
    "matmul_fp16_tc_i64_64x128x64": (lambda: _matmul(64, 128, 64, "float16", "float16", int64=True), ("cuda",)),
}

TENSOR_CORE_WORKLOADS = tuple(n for n in WORKLOADS if "_tc" in n)


def workload_module(name: str):
    """The IRModule (one PrimFunc ``main``) of a named corpus workload."""
    import tvm
    from tvm import te

    build, _ = WORKLOADS[name]
    return tvm.IRModule({"main": te.create_prim_func(build()).with_attr("global_symbol", "main")})


def target_dict(kind: str) -> dict[str, Any]:
    return dict(LLVM_TARGET if kind == "llvm" else CUDA_H200)


@dataclasses.dataclass
class SampledTrace:
    workload: str
    target: str  # "llvm" | "cuda"
    space: int  # index of the design space it was sampled from
    seed: int
    mod: Any  # the workload IRModule
    trace: Any  # tvm.s_tir.Trace, post-processed
    postproc_ok: bool  # False: a post-processor rejected it (the trace stops after the failing one)


class DesignSpaces:
    """Design spaces of one (workload, target), generated once; ``sample(seed)`` gives post-processed traces."""

    def __init__(self, workload: str, target: str):
        import tvm
        from tvm.s_tir import meta_schedule as ms

        self.workload, self.target = workload, target
        self.mod = workload_module(workload)
        self.ctx = ms.TuneContext(self.mod, target=tvm.target.Target(target_dict(target)),
                                  space_generator="post-order-apply", task_name="main", rand_state=0)
        self.spaces = [s.trace for s in self.ctx.generate_design_space()]
        self.postprocs = list(self.ctx.space_generator.postprocs)

    def sample(self, space: int, seed: int) -> SampledTrace:
        """Replay design space ``space`` with fresh decisions (seeded), then enter postproc and run them."""
        from tvm.s_tir import Trace

        design = self.spaces[space % len(self.spaces)]
        sch = fresh_schedule(self.mod, seed=seed + 1)  # TVM seeds start at 1
        Trace(design.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        ok = all(p.apply(sch) for p in self.postprocs)
        return SampledTrace(self.workload, self.target, space % len(self.spaces), seed, self.mod, sch.trace, ok)


def sample_traces(workloads: list[str] | None = None, targets: tuple[str, ...] = ("llvm", "cuda"),
                  seeds: range = range(2)) -> Iterator[SampledTrace]:
    """Every design space of every (workload, target), sampled once per seed."""
    for name in workloads or list(WORKLOADS):
        for tgt in WORKLOADS[name][1]:
            if tgt not in targets:
                continue
            spaces = DesignSpaces(name, tgt)
            for sp in range(len(spaces.spaces)):
                for seed in seeds:
                    yield spaces.sample(sp, seed)


def tune_database(workload: str, target: str, work_dir: str, trials: int = 16, seed: int = 1) -> str:
    """A real MetaSchedule JSON database for one corpus workload: ``tune_tir`` with the dummy builder and
    runner (random latencies, nothing compiled or timed), so the records are exactly what tuning stores
    (evolved, post-processed traces) at a fraction of the cost.  Returns ``work_dir``."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.testing.dummy_object import DummyBuilder, DummyRunner

    os.makedirs(work_dir, exist_ok=True)
    ms.tune_tir(
        mod=workload_module(workload), target=tvm.target.Target(target_dict(target)), work_dir=work_dir,
        max_trials_global=trials, num_trials_per_iter=min(trials, 8), builder=DummyBuilder(),
        runner=DummyRunner(), database=ms.database.JSONDatabase(work_dir=work_dir),
        cost_model=ms.cost_model.RandomModel(), seed=seed, num_tuning_cores=1,
        measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel()],
    )
    return work_dir
