from __future__ import annotations

import pytest


def _row(name: str, family: str, mod) -> dict:
    from little_dragon.workloads.store import describe_module

    return describe_module(mod, family=family, name=name, source="test")


@pytest.fixture(scope="session")
def tiny_workloads():
    """Three small real workloads (a matmul, a row softmax, an elementwise add): seconds to tune on CPU."""
    import pandas as pd
    import tvm
    from tvm import te, topi

    def matmul(n):
        a = te.placeholder((n, n), name="A")
        b = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), "k")
        c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
        return [a, b, c]

    def softmax(n):
        x = te.placeholder((n, n), name="X")
        return [x, topi.nn.softmax(x, axis=-1)]

    def add(n):
        x = te.placeholder((n, n), name="X")
        y = te.placeholder((n, n), name="Y")
        return [x, y, te.compute((n, n), lambda i, j: x[i, j] + y[i, j], name="Z")]

    rows = []
    for name, fam, tensors in [("matmul32", "dense", matmul(32)), ("softmax32", "softmax", softmax(32)),
                               ("add64", "elementwise", add(64))]:
        f = te.create_prim_func(tensors).with_attr("global_symbol", "main")
        rows.append(_row(name, fam, tvm.IRModule({"main": f})))
    return pd.DataFrame(rows)


@pytest.fixture()
def harvest_cfg():
    from little_dragon.harvest.config import HarvestConfig

    return HarvestConfig(target={"kind": "llvm", "num-cores": 2}, trials_per_workload=4, trials_per_iter=4,
                         builder_workers=2, workload_timeout_sec=600.0, orchestrator="local", cost_model="random")


@pytest.fixture()
def timing_cfg():
    from little_dragon.tvmx.timing import TimingConfig

    return TimingConfig(number=2, repeat=3, min_repeat_ms=5)
