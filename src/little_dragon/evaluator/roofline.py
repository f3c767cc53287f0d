"""Roofline bound of a workload: no correct kernel can beat max(FLOPs / peak FLOP/s, bytes / peak B/s)."""
from __future__ import annotations

import math
from typing import Any

from little_dragon.evaluator.config import RooflinePeak


def workload_flops_bytes(mod: Any) -> tuple[float, float]:
    """FLOPs of one call (TVM's estimate) and bytes of its arguments (each read or written once)."""
    import numpy as np
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001  some kernels (e.g. pure copies) have no countable FLOPs
        flops = 0.0
    from little_dragon.evaluator.numerics import param_types

    nbytes = 0.0
    for dtype, shape in zip(*param_types(mod["main"])):
        nbytes += math.prod(shape) * np.dtype(_np_dtype(dtype)).itemsize
    return flops, nbytes


def _np_dtype(dtype: str) -> str:
    return {"bfloat16": "uint16", "bool": "bool"}.get(dtype, dtype)


def bound_seconds(flops: float, nbytes: float, peak: RooflinePeak) -> float:
    return max(flops / (peak.tflops * 1e12), nbytes / (peak.gbps * 1e9))
