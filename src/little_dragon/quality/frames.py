"""The tables each suite validates, with derived check columns computed by the real code under check.

Every frame has a ``row_id`` naming its row for humans (``train.jsonl:17 w… refinement``), which the gate
quotes for each offending row. Derived columns (``codec_roundtrip_ok``, ``sealed_leak``, ...) are computed
here with the project's own codec and manifest; the expectations then make them visible in Data Docs.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.quality.config import QualityConfig


def workloads_frame(ds: DatasetsConfig, qc: QualityConfig) -> pd.DataFrame:
    """The workload store plus ``reparse_ok`` for a deterministic sample (None where not sampled)."""
    from little_dragon.workloads.store import load_workloads, module_from_script

    df = load_workloads(ds.workloads).reset_index(drop=True)
    df["row_id"] = [f"{ds.workloads}:{i} {w} ({n})" for i, w, n in zip(df.index, df["workload_id"], df["name"])]
    n = len(df) if qc.reparse_sample <= 0 else min(qc.reparse_sample, len(df))
    sample = set(np.linspace(0, len(df) - 1, n).round().astype(int).tolist()) if n else set()
    ok: list[Any] = []
    for i, r in enumerate(df.itertuples()):
        if i not in sample:
            ok.append(None)
            continue
        try:
            module_from_script(r.tvmscript, r.structural_hash, where=r.workload_id)
            ok.append(True)
        except Exception:
            ok.append(False)
    df["reparse_ok"] = pd.Series(ok, dtype=object)
    df["tvmscript_chars"] = df["tvmscript"].str.len()
    return df


def _trace_ok(text: Any) -> bool:
    try:
        t = json.loads(text)
        return isinstance(t, list) and len(t) == 2 and isinstance(t[0], list) and isinstance(t[1], list)
    except (TypeError, ValueError):
        return False


def harvest_frames(ds: DatasetsConfig) -> dict[str, pd.DataFrame]:
    """``harvest_records`` (every measured candidate) and ``harvest_workloads`` (one row per tuned workload)."""
    from little_dragon.datasets.examples import all_workloads, find_harvests

    harvests = find_harvests(ds.harvest_roots)
    if not harvests:
        raise FileNotFoundError(f"no harvest (records.parquet) under any of {ds.harvest_roots}")
    store_ids = set(all_workloads(ds.workloads, harvests)["workload_id"])
    recs, per_wl = [], []
    for h in harvests:
        r = h.records.copy()
        r["harvest"] = h.path.name
        r["row_id"] = [f"{h.path}/records.parquet:{i} {w} trial {t}"
                       for i, w, t in zip(range(len(r)), r["workload_id"], r["trial"])]
        r["trace_json_ok"] = [_trace_ok(t) for t in r["trace_json"]]
        recs.append(r)
        status = pd.read_parquet(h.path / "status.parquet")
        valid = r[r["valid"].astype(bool)].groupby("workload_id").size()
        base = dict(zip(h.baselines["workload_id"], h.baselines["baseline_us"]))
        for s in status.itertuples():
            per_wl.append({"harvest": h.path.name, "workload_id": s.workload_id, "status": s.status,
                           "valid_records": int(valid.get(s.workload_id, 0)),
                           "baseline_us": float(base.get(s.workload_id, math.nan)),
                           "in_store": s.workload_id in store_ids,
                           "row_id": f"{h.path}/status.parquet {s.workload_id} ({s.status})"})
    records = pd.concat(recs, ignore_index=True)
    records["latency_us"] = records["latency_us"].astype(float)
    records["record_key"] = records["harvest"] + "/" + records["workload_id"] + "/" + records["trial"].astype(str)
    return {"harvest_records": records, "harvest_workloads": pd.DataFrame(per_wl)}


def _context(row: dict[str, Any]) -> Any:
    """``post *`` context of an example (None when the row lacks its kernel or target: the re-encoding
    check then fails for a `post *` script, which is what the column reports)."""
    from little_dragon.datasets.validity import postproc_context

    if not all(isinstance(row.get(k), str) and row[k] for k in ("tvmscript", "target")):
        return None
    return postproc_context(row)


def _roundtrip_ok(text: Any, context: Any = None) -> bool:
    from little_dragon import codec

    if not isinstance(text, str) or not text:
        return False
    try:
        return codec.encode(codec.decode(text, context), context) == text
    except Exception:  # an undecodable script is exactly what this column reports
        return False


def examples_frames(ds: DatasetsConfig, qc: QualityConfig) -> dict[str, pd.DataFrame]:
    """``examples`` (train, validation and the sealed files, one row per line) and ``family_mix``."""
    from little_dragon.datasets.guard import read_manifest, read_sealed
    from little_dragon.datasets.store import read_examples

    out, sealed = Path(ds.out_dir), Path(ds.sealed_dir)
    files = [(out / "train.jsonl", "train"), (out / "validation.jsonl", "validation"),
             (sealed / "test.jsonl", "sealed"), (sealed / "heldout_families.jsonl", "heldout_family")]
    parts = []
    for path, split in files:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (run `dragon datasets build`)")
        rows = read_sealed(path) if split in ("sealed", "heldout_family") else \
            read_examples(path).to_dict("records")
        df = pd.DataFrame(rows)
        df["file"] = path.name
        df["file_split"] = split
        df["row_id"] = [f"{path}:{i + 1} {r.get('workload_id')} {r.get('task')}" for i, r in enumerate(rows)]
        parts.append(df)
    ex = pd.concat(parts, ignore_index=True)
    manifest = read_manifest(sealed)
    hashes = {str(w["structural_hash"]) for w in manifest["workloads"]}
    groups = {w["group"] for w in manifest["workloads"]}
    training = ex["file_split"].isin(("train", "validation"))
    ex["sealed_leak"] = training & (ex["structural_hash"].astype(str).isin(hashes) | ex["group"].isin(groups))
    ex["split_matches_file"] = ex["split"] == ex["file_split"]
    cols = [c for c in ("workload_id", "target", "tvmscript") if c in ex]
    contexts = [_context(r) for r in ex[cols].to_dict("records")]
    ex["codec_roundtrip_ok"] = [_roundtrip_ok(t, c) for t, c in zip(ex["completion"], contexts)]
    ex["start_roundtrip_ok"] = [_roundtrip_ok(s, c) if t == "refinement" else None
                                for t, s, c in zip(ex["task"], ex["start_script"], contexts)]
    ex["start_roundtrip_ok"] = ex["start_roundtrip_ok"].astype(object)
    for c in ("completion_latency_us", "start_latency_us", "prompt_tokens", "completion_tokens"):
        ex[c] = pd.to_numeric(ex[c], errors="coerce")
    ex["measured_speedup"] = ex["start_latency_us"] / ex["completion_latency_us"]
    ex["total_tokens"] = ex["prompt_tokens"] + ex["completion_tokens"] + 1
    train = ex[ex["file_split"] == "train"]
    mix = train.groupby("family").size().rename("examples").reset_index()
    mix["share"] = mix["examples"] / max(1, len(train))
    mix["row_id"] = "train.jsonl family " + mix["family"]
    return {"examples": ex, "family_mix": mix}
