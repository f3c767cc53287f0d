"""Expectation suites, one per table; a CLI suite (workloads | harvest | examples) checks one or two tables."""
from __future__ import annotations

from typing import Any, Callable

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.quality.config import QualityConfig

# CLI suite -> the tables (GX data assets / expectation suites) it validates
SUITES: dict[str, tuple[str, ...]] = {
    "workloads": ("workloads",),
    "harvest": ("harvest_records", "harvest_workloads"),
    "examples": ("examples", "family_mix"),
}


def _col(name: str) -> Any:
    from great_expectations.expectations.row_conditions import Column

    return Column(name)


def _e() -> Any:
    import great_expectations as gx

    return gx.expectations


def workloads_expectations(ds: DatasetsConfig, qc: QualityConfig) -> list[Any]:
    e = _e()
    return [
        *[e.ExpectColumnValuesToNotBeNull(column=c) for c in
          ("workload_id", "family", "name", "dtype", "shapes", "structural_hash", "tvmscript", "flops", "bytes")],
        e.ExpectColumnValuesToBeUnique(column="workload_id"),
        e.ExpectColumnValuesToBeUnique(column="structural_hash"),
        e.ExpectColumnValuesToMatchRegex(column="workload_id", regex=r"^w[0-9a-f]{16}$"),
        e.ExpectColumnValuesToBeBetween(column="flops", min_value=0),
        e.ExpectColumnValuesToBeBetween(column="bytes", min_value=0, strict_min=True),
        e.ExpectColumnValuesToBeBetween(column="tvmscript_chars", min_value=1),
        # sampled rows: the stored TVMScript parses and re-hashes to the stored structural hash
        e.ExpectColumnValuesToBeInSet(column="reparse_ok", value_set=[True]),
        e.ExpectTableRowCountToBeBetween(min_value=1),
    ]


def harvest_records_expectations(ds: DatasetsConfig, qc: QualityConfig) -> list[Any]:
    e = _e()
    valid = {"row_condition": _col("valid") == True}  # noqa: E712  (a GX condition, not a Python test)
    return [
        *[e.ExpectColumnValuesToNotBeNull(column=c) for c in ("workload_id", "target", "trial", "trace_json", "valid")],
        e.ExpectColumnValuesToBeUnique(column="record_key"),
        e.ExpectColumnValuesToBeInSet(column="trace_json_ok", value_set=[True]),
        e.ExpectColumnValuesToBeBetween(column="trial", min_value=0),
        # a valid candidate has a measured latency that is positive and finite
        e.ExpectColumnValuesToNotBeNull(column="latency_us", **valid),
        e.ExpectColumnValuesToBeBetween(column="latency_us", min_value=0, strict_min=True,
                                        max_value=qc.max_latency_us, **valid),
        e.ExpectTableRowCountToBeBetween(min_value=1),
    ]


def harvest_workloads_expectations(ds: DatasetsConfig, qc: QualityConfig) -> list[Any]:
    e = _e()
    ok = {"row_condition": _col("status") == "ok"}
    return [
        e.ExpectColumnValuesToBeInSet(column="in_store", value_set=[True]),
        # a tuning run that crashed is recorded by the harvest (status failed, error kept): that is data, not
        # corruption; every workload tuned without error has a valid record, and failures stay rare
        e.ExpectColumnValuesToBeBetween(column="valid_records", min_value=1, mostly=qc.min_valid_workload_fraction,
                                        **ok),
        e.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"],
                                      mostly=1.0 - qc.max_failed_workload_fraction),
        # the baseline every speedup is measured against
        e.ExpectColumnValuesToNotBeNull(column="baseline_us", **ok),
        e.ExpectColumnValuesToBeBetween(column="baseline_us", min_value=0, strict_min=True,
                                        max_value=qc.max_latency_us, **ok),
    ]


def examples_expectations(ds: DatasetsConfig, qc: QualityConfig) -> list[Any]:
    e = _e()
    ref = {"row_condition": _col("task") == "refinement"}
    return [
        *[e.ExpectColumnValuesToNotBeNull(column=c) for c in
          ("prompt", "completion", "task", "workload_id", "target", "family", "structural_hash", "split")],
        e.ExpectColumnValuesToBeInSet(column="task", value_set=["construction", "refinement"]),
        e.ExpectColumnValuesToBeInSet(column="split_matches_file", value_set=[True]),
        # every completion decodes with the codec and re-encodes to the identical text
        e.ExpectColumnValuesToBeInSet(column="codec_roundtrip_ok", value_set=[True]),
        e.ExpectColumnValuesToBeInSet(column="start_roundtrip_ok", value_set=[True], **ref),
        e.ExpectColumnValuesToBeBetween(column="completion_latency_us", min_value=0, strict_min=True,
                                        max_value=qc.max_latency_us),
        # refinement completions are faster than their starting scripts by the threshold (from the latencies)
        e.ExpectColumnValuesToBeBetween(column="measured_speedup", min_value=ds.refinement_min_speedup, **ref),
        e.ExpectColumnValuesToBeBetween(column="total_tokens", min_value=2, max_value=ds.context_tokens),
        # no sealed workload (structural hash) or near-duplicate (group) in train or validation
        e.ExpectColumnValuesToBeInSet(column="sealed_leak", value_set=[False]),
        e.ExpectColumnValuesToNotBeNull(column="sealed_leak"),
    ]


def family_mix_expectations(ds: DatasetsConfig, qc: QualityConfig) -> list[Any]:
    e = _e()
    return [
        e.ExpectColumnValuesToBeBetween(column="share", min_value=0, max_value=qc.max_family_share),
        e.ExpectTableRowCountToBeBetween(min_value=qc.min_families),
    ]


EXPECTATIONS: dict[str, Callable[[DatasetsConfig, QualityConfig], list[Any]]] = {
    "workloads": workloads_expectations,
    "harvest_records": harvest_records_expectations,
    "harvest_workloads": harvest_workloads_expectations,
    "examples": examples_expectations,
    "family_mix": family_mix_expectations,
}
