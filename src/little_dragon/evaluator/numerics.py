"""The correctness gate: fresh random inputs, poisoned outputs, an independent float64 CPU reference.

The reference is the *unscheduled* workload built for the CPU, with every float type promoted to float64
(so it measures the candidate against the exact math, not against another rounding of it); integer
kinds keep their types and must match exactly.  Outputs are pre-filled with NaN (floats) or a sentinel
(integers), so a kernel that skips part of its output cannot pass by leaving stale correct values."""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from little_dragon.evaluator.config import Tolerance

_FLOAT_TYPE = re.compile(r"\b(?:bfloat16|float16|float32)\b")


def np_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        raise TypeError("bfloat16 buffers are not supported by the numpy reference")
    return np.dtype(dtype)


def output_indices(func: Any) -> list[int]:
    """Positions of the parameters whose buffers some block writes."""
    import tvm
    from tvm.s_tir import Schedule

    sch = Schedule(tvm.IRModule({"main": func}))
    written: list[Any] = []

    def visit(block_rv: Any) -> None:
        for child in sch.get_child_blocks(block_rv):
            written.extend(r.source for r in sch.get(child).writes)  # 0.27: TensorRegion.source
            visit(child)

    visit(sch.get_sblock("root", func_name="main"))
    # 0.27 exposes no buffer_map in Python; a parameter and its buffer share the name in TVMScript
    names = {str(w.name) for w in written}
    return [i for i, p in enumerate(func.params) if str(p.name) in names]


def param_types(func: Any) -> tuple[list[str], list[tuple[int, ...]]]:
    """dtype and static shape of each parameter buffer (MetaSchedule's ArgInfo)."""
    from tvm.s_tir import meta_schedule as ms

    infos = [a.as_json() for a in ms.arg_info.ArgInfo.from_prim_func(func)]
    return [str(i[1]) for i in infos], [tuple(int(x) for x in i[2]) for i in infos]


def float64_variant(mod: Any) -> Any | None:
    """``mod`` with float16/bfloat16/float32 promoted to float64 (None when nothing to promote)."""
    from tvm.script import from_source

    text = mod.script()
    promoted = _FLOAT_TYPE.sub("float64", text)
    if promoted == text:
        return None
    return from_source(promoted)


@dataclasses.dataclass
class Reference:
    """The built reference of one workload, reused by every evaluation of it in a worker."""

    rt_mod: Any
    promoted: bool
    param_dtypes: list[str]
    param_shapes: list[tuple[int, ...]]
    outputs: list[int]


def build_reference(mod: Any) -> Reference:
    import tvm

    from little_dragon.tvmx.build import fast_build

    func = mod["main"]
    dtypes, shapes = param_types(func)
    cpu = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    promoted = None
    try:
        promoted = float64_variant(mod)
        rt_mod = fast_build(promoted, cpu) if promoted is not None else None
    except Exception:  # noqa: BLE001  an op without a float64 lowering: fall back to the native types
        rt_mod, promoted = None, None
    if rt_mod is None:
        rt_mod = fast_build(mod, cpu)
    jit_now(rt_mod)
    return Reference(rt_mod, promoted is not None, dtypes, shapes, output_indices(func))


def jit_now(rt_mod: Any) -> None:
    """Generate the machine code of a freshly built llvm module now, not at its first call.

    ``tvm.tirx.build`` stops at LLVM IR; the JIT runs on the first ``GetFunction`` (~50-90 ms for a small
    kernel here, benchmarks/evaluator_bench.py).  Done in the build phase it runs in parallel across the
    workers and under the build budget, instead of inside the device lock, where it serialised every
    evaluation of the device."""
    rt_mod.get_function("main")


def random_arrays(ref: Reference, rng: np.random.Generator) -> list[np.ndarray]:
    """Fresh inputs in each parameter's own dtype; outputs poisoned (NaN / integer sentinel)."""
    arrays = []
    for i, (dt, shape) in enumerate(zip(ref.param_dtypes, ref.param_shapes)):
        npdt = np_dtype(dt)
        if i in ref.outputs:
            arrays.append(np.full(shape, poison_value(npdt), dtype=npdt))
        elif npdt.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(npdt))
        elif npdt.kind == "b":
            arrays.append(rng.integers(0, 2, size=shape).astype(npdt))
        else:  # small non-negative integers: exact sums, and valid as indices of any axis of size >= 8
            arrays.append(rng.integers(0, 8, size=shape).astype(npdt))
    return arrays


def poison_value(npdt: np.dtype) -> Any:
    if npdt.kind == "f":
        return np.nan
    if npdt.kind == "b":
        return True
    info = np.iinfo(npdt)
    return info.min if npdt.kind == "i" else info.max


def run_reference(ref: Reference, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import tvm

    dev = tvm.cpu(0)
    host = [a.astype(np.float64) if (ref.promoted and a.dtype.kind == "f") else a for a in arrays]
    tensors = [tvm.runtime.tensor(a, dev) for a in host]
    ref.rt_mod(*tensors)
    return [tensors[i].numpy() for i in ref.outputs]


def run_candidate(rt_mod: Any, dev: Any, ref: Reference, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import tvm

    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    rt_mod(*tensors)
    dev.sync()
    return [tensors[i].numpy() for i in ref.outputs]


def compare(out: np.ndarray, expected: np.ndarray, dtype: str, tol: Tolerance | None) -> tuple[bool, str, float]:
    """(ok, message, max |out - expected|). Floats: |d| <= atol * max(1, max|ref|) + rtol * |ref|."""
    if out.shape != expected.shape:
        return False, f"shape {out.shape} != {expected.shape}", float("inf")
    if out.dtype.kind in "iub":
        bad = out != expected
        err = float(np.abs(out.astype(np.float64) - expected.astype(np.float64)).max()) if out.size else 0.0
        if bad.any():
            idx = tuple(int(x) for x in np.argwhere(bad)[0])
            return False, (f"{int(bad.sum())}/{out.size} {dtype} elements differ (exact compare); first at "
                           f"{idx}: {out[idx]} != {expected[idx]}"), err
        return True, "", err
    o = out.astype(np.float64)
    e = expected.astype(np.float64)
    unwritten = np.isnan(o) & ~np.isnan(e)
    if unwritten.any():
        idx = tuple(int(x) for x in np.argwhere(unwritten)[0])
        return False, (f"{int(unwritten.sum())}/{out.size} output elements NaN (poison not overwritten or "
                       f"NaN produced); first at {idx}"), float("inf")
    tol = tol or Tolerance()
    finite = np.isfinite(e)
    scale = max(1.0, float(np.abs(e[finite]).max()) if finite.any() else 1.0)
    diff = np.abs(o - e)
    diff[np.isnan(o) & np.isnan(e)] = 0.0
    same_inf = np.isinf(o) & np.isinf(e) & (np.sign(o) == np.sign(e))
    diff[same_inf] = 0.0
    with np.errstate(invalid="ignore"):
        allowed = tol.atol * scale + tol.rtol * np.abs(np.where(finite, e, 0.0))
    bad = ~(diff <= allowed)
    max_err = float(np.nanmax(diff)) if diff.size else 0.0
    if bad.any():
        idx = tuple(int(x) for x in np.argwhere(bad)[0])
        return False, (f"{int(bad.sum())}/{out.size} {dtype} elements outside rtol={tol.rtol}, "
                       f"atol={tol.atol}*{scale:.3g}; max |err| {max_err:.3g}; first at {idx}: {o[idx]:.6g} vs "
                       f"{e[idx]:.6g}"), max_err
    return True, "", max_err
