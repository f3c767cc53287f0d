"""The ``harvest`` section of params.yaml."""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class HarvestConfig:
    target: dict[str, Any] = field(
        default_factory=lambda: {"kind": "llvm", "num-cores": 2},
        help="TVM target as a dict (TVM 0.27 rejects strings). On the H200: "
             '{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, '
             '"max_shared_memory_per_block": 49152, "thread_warp_size": 32}.')
    trials_per_workload: int = field(16, help="MetaSchedule max_trials_global for each workload.")
    trials_per_iter: int = field(16, help="Candidates built and measured per search iteration (one search + one build batch per iteration: fewer, larger iterations cost less overhead).")
    builder_workers: int = field(2, help="Parallel build processes (MetaSchedule LocalBuilder).")
    build_timeout_sec: float = field(30.0, help="Build timeout per candidate, seconds.")
    workload_timeout_sec: float = field(300.0, help="A workload's whole tuning run is killed after this.")
    cost_model: Literal["xgb", "random"] = field("xgb", help="MetaSchedule cost model.")
    strategy: Literal["evolutionary", "replay-trace"] = field("evolutionary", help="MetaSchedule search strategy.")
    max_workloads: int = field(0, help="Tune at most this many workloads (0: all), in store order.")
    families: list[str] = field(default_factory=list, help="Only these families (empty: all).")
    retry_failed: bool = field(False, help="On resume, tune again the workloads recorded as failed.")
    orchestrator: Literal["prefect", "local"] = field(
        "prefect", help="Fan out workloads as Prefect tasks ('prefect') or a plain loop ('local').")
    max_concurrent_workloads: int = field(
        1, help="Workloads tuned at once (their builds and searches overlap; measurements on one device "
                "never do: the runner holds a per-device lock while timing).")
    seed: int = field(0, help="Tuning seed (each workload gets seed + its index).")
    out_dir: str = field("artifacts/harvest", help="Root folder; results go to <out_dir>/<target_key>/.")
