"""The CUDA baseline (dlight's default GPU schedule) never touches the workload it is given.

dlight's ApplyDefaultSchedule rewrites the IRModule it gets in place; the evaluator caches each workload
module per worker, so a baseline measured on the cached module turned every later replay on that worker into
an apply_error (20 of 512 H200 harvest records: "Cannot find a block with the name cast", GetLoops counts off)."""
from __future__ import annotations

from dragon_testkit import matmul_tensors, prim_module

from little_dragon.tvmx.target import CUDA_H200


def test_dlight_baseline_leaves_the_workload_unscheduled():
    from little_dragon.tvmx.baseline import KIND_DLIGHT, baseline_module

    mod = prim_module(matmul_tensors(64))
    before = mod.script()
    scheduled, kind = baseline_module(mod, CUDA_H200)
    assert kind == KIND_DLIGHT
    assert "threadIdx" in scheduled.script() and "threadIdx" not in before
    assert mod.script() == before
