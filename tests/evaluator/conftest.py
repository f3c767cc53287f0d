"""One evaluator worker pool per test session (pool start-up is the expensive part)."""
from __future__ import annotations

import pytest
from evkernels import LLVM, design_space_scripts, matmul


@pytest.fixture(scope="session")
def eval_cfg(tmp_path_factory):
    from little_dragon.evaluator.config import EvaluatorConfig

    d = tmp_path_factory.mktemp("evaluator")
    return EvaluatorConfig(pool_size=2, build_timeout_s=30.0, run_timeout_s=8.0, memory_limit_gb=4.0,
                           preload_tensor_intrinsics="never", cache_path=str(d / "cache.sqlite"))


@pytest.fixture(scope="session")
def timing_cfg():
    from little_dragon.tvmx.timing import TimingConfig

    return TimingConfig(number=2, repeat=3, min_repeat_ms=5)


@pytest.fixture(scope="session")
def evaluator(eval_cfg, timing_cfg):
    from little_dragon.evaluator.pool import Evaluator

    with Evaluator(LLVM, eval_cfg, timing_cfg, test_hooks=True) as ev:
        yield ev


@pytest.fixture(scope="session")
def mm256():
    return matmul(256)


@pytest.fixture(scope="session")
def tuned_scripts(mm256):
    return design_space_scripts(mm256)
