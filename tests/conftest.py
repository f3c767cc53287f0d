"""Fixtures shared by every test folder (pytest loads this file for all of them).

The expensive real things are made once per session and reused: a tiny real MetaSchedule harvest (4 small
kernels x 8 trials, real builds and timings), the datasets built from it and the SmolLM2 token counter.
Plain helpers (kernels, workload tables, configs) are in tests/dragon_testkit.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dragon_testkit import LLVM, datasets_cfg, tiny_workloads_frame


@pytest.fixture(scope="session")
def harvested(tmp_path_factory) -> Path:
    """``<dir>/workloads.parquet`` and ``<dir>/harvest/<target_key>/`` from a real tiny harvest."""
    import os

    # DRAGON_TEST_HARVEST_DIR: reuse a tiny harvest kept from an earlier run (local iteration only; CI makes one)
    base = Path(os.environ.get("DRAGON_TEST_HARVEST_DIR") or tmp_path_factory.getbasetemp() / "dragon-tiny-harvest")
    if (base / "done").exists():
        return base
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    from little_dragon.harvest.config import HarvestConfig
    from little_dragon.harvest.run import run_harvest
    from little_dragon.tvmx.timing import TimingConfig

    wl = tiny_workloads_frame()
    wl.to_parquet(base / "workloads.parquet", index=False)
    res = run_harvest(HarvestConfig(target=LLVM, trials_per_workload=8, trials_per_iter=8, builder_workers=2,
                                    workload_timeout_sec=240.0, orchestrator="local", cost_model="random"),
                      TimingConfig(number=2, repeat=3, min_repeat_ms=5), wl, base / "harvest")
    assert res.ok == len(wl), f"tiny harvest failed: {res}"
    (base / "done").write_text("ok")
    return base


@pytest.fixture(scope="session")
def token_counter():
    from little_dragon.datasets.config import TokenizerSpec
    from little_dragon.datasets.tokens import load_counter

    return load_counter(TokenizerSpec())


@pytest.fixture(scope="session")
def built(harvested, token_counter, tmp_path_factory):
    """The datasets built once from the tiny harvest: (cfg, BuildResult)."""
    from little_dragon.datasets.build import build_datasets

    out = tmp_path_factory.mktemp("built")
    cfg = datasets_cfg(harvested, out)
    return cfg, build_datasets(cfg, counter=token_counter)
