"""[intrinsics at start] The constraint's TVM workers register the tensor-core intrinsics when they start, on a machine
with a CUDA device (issue 16, session 39; ``constrained.TENSOR_INTRINSICS_AT_START``).  On session 39's H100 host the
first tensor-core line of a run waited ~2.6 s for them in three of the four constraint processes at once (the decoding
loop waits for every process); registered at start they are ready before the run's first step, beside the model's load.

Real parts only: the constraint's sandboxed TVM worker process, TVM's tensor intrinsics, a real constraint process.
"""
from __future__ import annotations


def test_a_worker_registers_the_intrinsics_when_told_at_start():
    """A fresh worker has no tensor intrinsics until told; ``warm(tensor_intrinsics=True)`` registers them there (what
    its first tensor-core line would otherwise wait for) and says so."""
    from little_dragon.generation.schedule_worker import ScheduleWorker

    w = ScheduleWorker()
    try:
        assert w.warm() is False
        assert w.warm(tensor_intrinsics=True) is True
        assert w.warm() is True  # kept: the worker's process is the same
    finally:
        w.close()


def test_at_start_by_the_machine(monkeypatch):
    """None (the default): when torch sees a CUDA device (not on a CPU machine, whose llvm kernels never use them);
    True/False: always/never."""
    import torch

    from little_dragon.generation import constrained

    assert constrained.TENSOR_INTRINSICS_AT_START is None
    assert constrained.tensor_intrinsics_at_start() is torch.cuda.is_available()
    for value in (True, False):
        monkeypatch.setattr(constrained, "TENSOR_INTRINSICS_AT_START", value)
        assert constrained.tensor_intrinsics_at_start() is value


def test_a_constraint_process_is_ready_with_its_workers_holding_them(smollm2):
    """A constraint process started with the intrinsics answers ready only once its TVM workers hold them."""
    from little_dragon.generation.constraint_process import ConstraintProcess

    proc = ConstraintProcess(smollm2, semantic=True, tensor_intrinsics=True)
    try:
        proc.wait_ready()
        assert proc.request(("threads",))["tensor_intrinsics"] is True
    finally:
        proc.close()
