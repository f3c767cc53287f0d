"""Drift: is the newest harvest batch like the data the model was trained on?

Two sides, each as a per-workload table and a per-candidate table:
  batch      the workloads of the pipeline's own harvest (``<drift.harvest_root>/<target key>``) tuned in
             its latest run (result or failure written after the run started, i.e. after ``meta.json``);
             when the latest run tuned nothing new, the whole harvest
  reference  the training split's workloads (``drift.train``), with their harvest records from
             ``datasets.harvest_roots``, restricted to the batch's target when the training set has it

Per workload: family, log2 FLOPs (shape size), failed (tuning failed), invalid fraction of candidates,
codec length (lines of the best valid script's codec text, self-contained form: cheap and the same on both
sides).  Per candidate: log10 latency of valid candidates.  ``drift_suite`` turns the reference into
Great Expectations expectations on the batch.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.quality.drift_config import DriftConfig

log = logging.getLogger(__name__)
ROW_ID = "row_id"


@dataclasses.dataclass
class DriftData:
    target_key: str
    batch_kind: str                    # "latest run" or "whole harvest"
    batch: pd.DataFrame                # per workload
    batch_records: pd.DataFrame        # per valid candidate
    reference: pd.DataFrame
    reference_records: pd.DataFrame
    reference_target: str              # what the reference is, for the report


def _codec_lines(trace_json: str) -> float:
    from little_dragon import codec

    try:
        return float(len(codec.encode(json.loads(trace_json)).splitlines()))
    except Exception:  # a record the codec rejects is validate_codec's business, not drift's
        return math.nan


def workload_table(workloads: pd.DataFrame, records: pd.DataFrame, status: pd.DataFrame) -> pd.DataFrame:
    """One row per workload id of ``status``: family, log2_flops, failed, invalid_fraction, codec_lines."""
    wl = workloads.drop_duplicates("workload_id").set_index("workload_id")
    by_wid = {wid: g for wid, g in records.groupby("workload_id")} if len(records) else {}
    rows = []
    for st in status.itertuples():
        recs = by_wid.get(st.workload_id, records.iloc[:0])
        valid = recs[recs["valid"].astype(bool) & np.isfinite(recs["latency_us"].astype(float))]
        best = valid.loc[valid["latency_us"].astype(float).idxmin()] if len(valid) else None
        fam = wl.loc[st.workload_id, "family"] if st.workload_id in wl.index else "?"
        flops = float(wl.loc[st.workload_id, "flops"]) if st.workload_id in wl.index else math.nan
        rows.append({"workload_id": st.workload_id, "family": str(fam),
                     "log2_flops": math.log2(flops) if flops and flops > 0 else math.nan,
                     "failed": int(st.status != "ok"),
                     "invalid_fraction": 1.0 - len(valid) / len(recs) if len(recs) else 1.0,
                     "codec_lines": _codec_lines(best["trace_json"]) if best is not None else math.nan})
    df = pd.DataFrame(rows, columns=["workload_id", "family", "log2_flops", "failed", "invalid_fraction",
                                     "codec_lines"])
    df.insert(0, ROW_ID, df["workload_id"])
    return df


def record_table(records: pd.DataFrame) -> pd.DataFrame:
    lat = records["latency_us"].astype(float)
    ok = records[records["valid"].astype(bool) & np.isfinite(lat) & (lat > 0)]
    df = pd.DataFrame({"workload_id": ok["workload_id"].to_numpy(),
                       "log10_latency_us": np.log10(ok["latency_us"].astype(float).to_numpy())})
    df.insert(0, ROW_ID, [f"{w}#{t}" for w, t in zip(ok["workload_id"], ok["trial"])])
    return df


def latest_batch(harvest: Path) -> tuple[list[str], str]:
    """Workload ids finished (ok or failed) in the harvest's latest run, else all of them."""
    meta = harvest / "meta.json"
    started = meta.stat().st_mtime if meta.exists() else 0.0
    status = pd.read_parquet(harvest / "status.parquet")
    new = []
    for wid in status["workload_id"]:
        for p in (harvest / "db" / wid / "result.json", harvest / "failed" / f"{wid}.json"):
            if p.exists() and p.stat().st_mtime >= started:
                new.append(wid)
                break
    if new:
        return new, "latest run"
    return status["workload_id"].tolist(), "whole harvest"


def load_drift_data(cfg: DriftConfig, ds: DatasetsConfig, target: dict) -> DriftData:
    from little_dragon.datasets.examples import all_workloads, find_harvests
    from little_dragon.tvmx import target as tgt

    key = tgt.key(target)
    harvest = Path(cfg.harvest_root) / key
    if not (harvest / "status.parquet").exists():
        raise FileNotFoundError(f"{harvest}/status.parquet: no harvest for target {key} (run `dragon harvest`)")
    if not Path(cfg.train).exists():
        raise FileNotFoundError(f"{cfg.train}: no training split (run `dragon datasets build`)")
    batch_ids, kind = latest_batch(harvest)
    status = pd.read_parquet(harvest / "status.parquet")
    records = pd.read_parquet(harvest / "records.parquet")
    batch_wl = pd.read_parquet(harvest / "workloads.parquet")
    # held-out families are unseen by design (the generalisation slice of evaluation), never drift
    heldout = set(batch_wl.loc[batch_wl["family"].isin(ds.heldout_families), "workload_id"])
    batch_ids = [w for w in batch_ids if w not in heldout]
    status = status[status["workload_id"].isin(batch_ids)]
    records_b = records[records["workload_id"].isin(batch_ids)]

    train = pd.read_parquet(cfg.train, columns=["workload_id", "target"])
    harvests = find_harvests(ds.harvest_roots)
    target_json = json.dumps(tgt.normalize(target), sort_keys=True)
    # the model's earlier data: training rows of this target, less the batch itself (a split rebuilt after
    # this harvest already holds part of the batch; comparing it with itself would hide the drift)
    same = train[(train["target"].map(_norm_target) == _norm_target(target_json))
                 & ~train["workload_id"].isin(batch_ids)]
    ref_target = "same target, workloads before this batch"
    ref_ids = set(same["workload_id"])
    ref_targets = set(same["target"].map(_norm_target))
    ref_records, ref_status = [], []
    for h in harvests:
        if _norm_target(h.target) not in ref_targets:
            continue
        recs = h.records[h.records["workload_id"].isin(ref_ids)]
        ref_records.append(recs)
        st = pd.read_parquet(h.path / "status.parquet")
        ref_status.append(st[st["workload_id"].isin(ref_ids)])
    ref_records_df = pd.concat(ref_records, ignore_index=True) if ref_records else records.iloc[:0]
    ref_status_df = (pd.concat(ref_status, ignore_index=True).drop_duplicates("workload_id")
                     if ref_status else status.iloc[:0])
    workloads = all_workloads(ds.workloads, harvests) if Path(ds.workloads).exists() else batch_wl
    workloads = pd.concat([workloads, batch_wl[workloads.columns.intersection(batch_wl.columns)]],
                          ignore_index=True)
    return DriftData(
        target_key=key, batch_kind=kind,
        batch=workload_table(workloads, records_b, status), batch_records=record_table(records_b),
        reference=workload_table(workloads, ref_records_df, ref_status_df),
        reference_records=record_table(ref_records_df), reference_target=ref_target)


def _norm_target(t: str) -> str:
    from little_dragon.tvmx import target as tgt

    return json.dumps(tgt.normalize(json.loads(t)), sort_keys=True)


def family_kl(batch: pd.Series, reference: pd.Series) -> float:
    """KL(batch || reference) of the family mix, nats (inf when the batch has a family the reference lacks)."""
    p = batch.value_counts(normalize=True)
    q = reference.value_counts(normalize=True)
    kl = 0.0
    for fam, pk in p.items():
        qk = q.get(fam, 0.0)
        if qk == 0:
            return math.inf
        kl += pk * math.log(pk / qk)
    return kl
