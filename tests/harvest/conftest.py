"""The harvest tests' workloads and configs (small: seconds of real tuning each)."""
from __future__ import annotations

import pytest
from dragon_testkit import add_tensors, matmul_tensors, prim_module, softmax_tensors


def _row(name: str, family: str, mod) -> dict:
    from little_dragon.workloads.store import describe_module

    return describe_module(mod, family=family, name=name, source="test")


@pytest.fixture(scope="session")
def tiny_workloads():
    """Three small real workloads (a matmul, a row softmax, an elementwise add): seconds to tune on CPU."""
    import pandas as pd

    return pd.DataFrame([_row(name, fam, prim_module(tensors)) for name, fam, tensors in [
        ("matmul32", "dense", matmul_tensors(32)), ("softmax32", "softmax", softmax_tensors(32)),
        ("add64", "elementwise", add_tensors(64))]])


@pytest.fixture()
def harvest_cfg():
    from little_dragon.harvest.config import HarvestConfig

    return HarvestConfig(target={"kind": "llvm", "num-cores": 2}, trials_per_workload=4, trials_per_iter=4,
                         builder_workers=2, workload_timeout_sec=600.0, orchestrator="local", cost_model="random")


@pytest.fixture()
def timing_cfg():
    from little_dragon.tvmx.timing import TimingConfig

    return TimingConfig(number=2, repeat=3, min_repeat_ms=5)
