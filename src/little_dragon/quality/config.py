"""The ``quality`` section of params.yaml (paths to check come from the ``datasets`` section)."""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class QualityConfig:
    gx_root: str = field("monitoring", help="Great Expectations file-mode project root (the context is <gx_root>/gx).")
    data_docs_dir: str = field("monitoring/data-docs", help="Data Docs HTML: one site per suite, <dir>/<suite>/.")
    metrics_dir: str = field("monitoring/metrics", help="quality_<suite>.json: per-expectation results (DVC metrics).")
    max_latency_us: float = field(1e10, help="Latencies above this (or infinite) are corrupt.")
    min_valid_workload_fraction: float = field(
        1.0, help="Share of workloads tuned without error that must have at least one valid record (1.0: all).")
    max_failed_workload_fraction: float = field(
        0.2, help="Share of workloads whose tuning may have failed (crash, hang, TVM error) in one harvest.")
    reparse_sample: int = field(
        200, help="Workloads whose TVMScript is re-parsed and re-hashed against the store (0: all).")
    max_family_share: float = field(0.5, help="No family may hold more than this share of the training examples.")
    min_families: int = field(2, help="Training examples must cover at least this many families.")
    max_reported_rows: int = field(10, help="Offending rows named per failed expectation in the error message.")
