"""The Great Expectations ``drift`` suite: the reference (training data) sets the bounds, the batch is tested.

Tables (GX suites, Data Docs site ``drift``):
  drift_workloads   family mix (KL divergence), shapes (log2 FLOPs inside the training range), failure
                    rates (failed workloads, invalid candidates), codec lengths (median lines)
  drift_candidates  latency distribution (KL divergence of log10 latency of valid candidates)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from little_dragon.quality.config import QualityConfig
from little_dragon.quality.drift import DriftData
from little_dragon.quality.drift_config import DriftConfig

SUITE = "drift"


def expectations(data: DriftData, cfg: DriftConfig) -> dict[str, list[Any]]:
    import great_expectations as gx

    ref, ref_rec = data.reference, data.reference_records
    fam = ref["family"].value_counts(normalize=True).sort_index()
    workloads: list[Any] = [
        # GX's own KL divergence over the categorical partition of the training data; a family absent from
        # training makes it infinite (no tail holdout): a family the model never saw is drift
        gx.expectations.ExpectColumnKLDivergenceToBeLessThan(
            column="family", partition_object={"values": fam.index.tolist(), "weights": fam.tolist()},
            threshold=cfg.max_family_kl),
    ]
    flops = ref["log2_flops"].dropna()
    if len(flops):
        workloads.append(gx.expectations.ExpectColumnValuesToBeBetween(
            column="log2_flops", min_value=float(flops.min() - cfg.flops_margin_log2),
            max_value=float(flops.max() + cfg.flops_margin_log2), mostly=1.0 - cfg.max_flops_out_of_range))
    for col in ("failed", "invalid_fraction"):
        ref_rate = float(ref[col].mean()) if len(ref) else 0.0
        workloads.append(gx.expectations.ExpectColumnMeanToBeBetween(
            column=col, max_value=min(1.0, ref_rate + cfg.max_failure_rate_increase)))
    lines = ref["codec_lines"].dropna()
    if len(lines):
        med = float(lines.median())
        workloads.append(gx.expectations.ExpectColumnMedianToBeBetween(
            column="codec_lines", min_value=med / cfg.max_codec_length_ratio,
            max_value=med * cfg.max_codec_length_ratio))
    candidates: list[Any] = []
    lat = ref_rec["log10_latency_us"].dropna().to_numpy()
    edges = np.unique(np.quantile(lat, np.linspace(0, 1, 11))) if len(lat) else np.array([])
    if len(edges) >= 2:
        tail = 0.01  # a batch value outside the training range costs a finite, large divergence
        weights = np.histogram(lat, edges)[0] / len(lat) * (1 - 2 * tail)
        candidates.append(gx.expectations.ExpectColumnKLDivergenceToBeLessThan(
            column="log10_latency_us", threshold=cfg.max_latency_kl,
            partition_object={"bins": edges.tolist(), "weights": weights.tolist(), "tail_weights": [tail, tail]}))
    return {"drift_workloads": workloads, "drift_candidates": candidates}


def run_drift_suite(data: DriftData, cfg: DriftConfig, qc: QualityConfig) -> Any:
    """Validate the batch tables; Data Docs under ``<quality.data_docs_dir>/drift``. A ``gate.SuiteResult``."""
    from little_dragon.quality.gate import SuiteResult, open_site, outcomes_of, run_checkpoint

    ctx, docs_index = open_site(qc, SUITE)
    frames = {"drift_workloads": data.batch, "drift_candidates": data.batch_records}
    outcomes = []
    for table, exps in expectations(data, cfg).items():
        if not exps:
            continue
        for r in run_checkpoint(ctx, SUITE, table, exps, frames[table]):
            outcomes.extend(_with_observed(outcomes_of(table, [r]), r))
    rows = {t: len(f) for t, f in frames.items()}
    return SuiteResult(SUITE, all(o.success for o in outcomes), outcomes, rows, docs_index)


def _with_observed(outcomes: list[Any], r: Any) -> list[Any]:
    """Aggregate expectations (KL, mean, median, quantiles) have no offending rows: name the observed value."""
    obs = (r.result or {}).get("observed_value")
    for o in outcomes:
        if not o.success and not o.offending:
            o.offending = [f"observed {_fmt(obs)}"]
        o.kwargs["observed_value"] = obs
        if "partition_object" in o.kwargs:  # the training distribution: named, not printed in full
            part = o.kwargs.pop("partition_object") or {}
            o.kwargs["training"] = (f"{len(part.get('values', []))} families" if "values" in part
                                    else f"{max(0, len(part.get('bins', [])) - 1)} bins")
    return outcomes


def _fmt(v: Any) -> str:
    if v is None:
        return "infinite (a value the training data does not have)"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    return str(v)
