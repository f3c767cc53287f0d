"""Construction and refinement examples from the harvested tuning runs.

Per workload and target, the run's valid traces are encoded with the codec; a trace whose codec text does
not decode back to the exact trace (in the codec's canonical JSON: booleans as 0/1, as the MetaSchedule
database stores them), or does not re-encode to the same text, is rejected and counted, never used.
Distinct scripts are ranked by latency (the best measurement of a script that was measured twice).

- construction: the best script, plus distinct scripts within ``construction_margin`` of it, up to
  ``construction_per_workload`` (separate examples);
- refinement: starting scripts taken evenly along the latency ranks in ``refinement_start_quantiles``
  (mediocre to good); each one's completion is a script at least ``refinement_min_speedup`` times faster,
  chosen (seeded) among those measured later in the same tuning run, or among all faster ones when the
  run found none later.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from little_dragon.datasets.config import DatasetsConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Harvest:
    """One target's consolidated harvest tables."""

    path: Path
    target: str  # JSON of the target dict, as in records.parquet
    records: pd.DataFrame
    baselines: pd.DataFrame


def all_workloads(store: str, harvests: list[Harvest]) -> pd.DataFrame:
    """The workload store plus the workloads each harvest carries (``<harvest>/workloads.parquet``), e.g. the
    CUDA set of a harvest brought back from the GPU; one row per workload id (the store wins)."""
    from little_dragon.workloads.store import load_workloads

    tables = [load_workloads(store)]
    tables += [pd.read_parquet(h.path / "workloads.parquet")[tables[0].columns]
               for h in harvests if (h.path / "workloads.parquet").is_file()]
    return pd.concat(tables, ignore_index=True).drop_duplicates("workload_id", keep="first").reset_index(drop=True)


def find_harvests(roots: list[str]) -> list[Harvest]:
    """Every ``<root>/<target_key>/`` holding ``records.parquet`` (missing roots are skipped)."""
    out = []
    for root in roots:
        r = Path(root)
        if not r.is_dir():
            log.info("harvest root %s: absent, skipped", r)
            continue
        for d in sorted(p for p in r.iterdir() if (p / "records.parquet").is_file()):
            meta_p = d / "meta.json"
            if not meta_p.is_file():
                raise FileNotFoundError(f"{meta_p}: harvest without meta.json")
            target = json.dumps(json.loads(meta_p.read_text())["target"], sort_keys=True)
            out.append(Harvest(d, target, pd.read_parquet(d / "records.parquet"),
                               pd.read_parquet(d / "baselines.parquet")))
    return out


@dataclasses.dataclass
class Script:
    text: str
    latency_us: float
    trial: int


@dataclasses.dataclass
class BuildCounts:
    workloads_with_records: int = 0
    valid_records: int = 0
    distinct_scripts: int = 0
    codec_rejected: int = 0
    codec_errors: list[str] = dataclasses.field(default_factory=list)
    no_valid_record: int = 0
    no_refinement_pair: int = 0


def _encode_checked(trace_json: str, where: str, counts: BuildCounts, context: Any = None) -> str | None:
    """Codec text of a harvested trace, or None (counted) if the codec does not round-trip it exactly.
    With ``context`` (``codec.PostprocContext`` of the workload and target) the post-processing section is
    written ``post *`` wherever re-deriving it is exact."""
    from little_dragon import codec

    trace = json.loads(trace_json)
    try:
        text = codec.encode(trace, context)
        back = codec.decode(text, context)
        # records hold the MetaSchedule database's canonical form (harvest record format 2): plain
        # booleans already 0/1, boolean IntImms true; compare as is
        if json.dumps(back) != json.dumps(codec.canonical_json(trace, bools_as_int=False)):
            raise ValueError("decode(encode(trace)) differs from the harvested trace")
        if codec.encode(back, context) != text:
            raise ValueError("encode(decode(text)) differs from the text")
    except Exception as e:  # CodecError and friends: count and report, never use the record
        counts.codec_rejected += 1
        if len(counts.codec_errors) < 20:
            counts.codec_errors.append(f"{where}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return None
    return text


def distinct_scripts(records: pd.DataFrame, where: str, counts: BuildCounts, context: Any = None
                     ) -> list[Script]:
    """Valid records of one run as distinct codec scripts, fastest first (ties: earlier trial)."""
    ok = records[records["valid"].astype(bool)]
    ok = ok[np.isfinite(ok["latency_us"].astype(float)) & (ok["latency_us"].astype(float) > 0)]
    counts.valid_records += len(ok)
    best: dict[str, Script] = {}
    for r in ok.sort_values("trial").itertuples():
        text = _encode_checked(r.trace_json, f"{where} trial {r.trial}", counts, context)
        if text is None:
            continue
        lat = float(r.latency_us)
        if text not in best or lat < best[text].latency_us:
            best[text] = Script(text, lat, int(r.trial))
    scripts = sorted(best.values(), key=lambda s: (s.latency_us, s.trial))
    counts.distinct_scripts += len(scripts)
    return scripts


def construction_picks(scripts: list[Script], cfg: DatasetsConfig) -> list[Script]:
    if not scripts:
        return []
    limit = scripts[0].latency_us * (1 + cfg.construction_margin)
    return [s for s in scripts if s.latency_us <= limit][:max(0, cfg.construction_per_workload)]


def refinement_pairs(scripts: list[Script], cfg: DatasetsConfig, rng: random.Random) -> list[tuple[Script, Script]]:
    """(start, completion) pairs; completion.latency * min_speedup <= start.latency always holds."""
    n = len(scripts)
    if n < 2 or cfg.refinement_per_workload <= 0:
        return []
    lo, hi = cfg.refinement_start_quantiles
    eligible = []
    for i, s in enumerate(scripts[1:], 1):
        rank = i / (n - 1)  # 0: the best script, 1: the slowest
        if lo <= rank <= hi and scripts[0].latency_us * cfg.refinement_min_speedup <= s.latency_us:
            eligible.append(s)
    if not eligible:
        return []
    k = min(cfg.refinement_per_workload, len(eligible))
    idx = sorted({int(round(x)) for x in np.linspace(0, len(eligible) - 1, k)})
    pairs = []
    for i in idx:
        start = eligible[i]
        faster = [s for s in scripts if s.latency_us * cfg.refinement_min_speedup <= start.latency_us]
        later = [s for s in faster if s.trial > start.trial]
        pairs.append((start, rng.choice(later or faster)))
    return pairs


def _seed_for(seed: int, *keys: str) -> int:
    return int.from_bytes(hashlib.sha256(":".join([str(seed), *keys]).encode()).digest()[:8], "big")


def _postproc_context(workload: pd.Series, target: str, wid: str) -> Any:
    from little_dragon.codec import PostprocContext
    from little_dragon.workloads.store import module_from_script

    return PostprocContext(module_from_script(workload["tvmscript"], where=f"workload {wid}"), target)


def build_raw_examples(workloads: pd.DataFrame, harvests: list[Harvest], cfg: DatasetsConfig
                       ) -> tuple[pd.DataFrame, BuildCounts]:
    """One row per example, without prompt text yet (``render.py`` adds prompts and token counts)."""
    counts = BuildCounts()
    wl = workloads.set_index("workload_id")
    rows: list[dict[str, Any]] = []
    for h in harvests:
        baselines = dict(zip(h.baselines["workload_id"], h.baselines["baseline_us"].astype(float)))
        for wid, recs in h.records.groupby("workload_id", sort=True):
            if wid not in wl.index:
                raise ValueError(f"{h.path}/records.parquet: workload {wid} is neither in the workload store "
                                 f"{cfg.workloads} nor in {h.path}/workloads.parquet (stale harvest?)")
            counts.workloads_with_records += 1
            scripts = distinct_scripts(recs, f"{h.path.name}/{wid}", counts,
                                       _postproc_context(wl.loc[wid], h.target, wid) if cfg.derive_postproc else None)
            if not scripts:
                counts.no_valid_record += 1
                continue
            best = scripts[0].latency_us
            base = baselines.get(wid, math.nan)
            common = {"workload_id": wid, "target": h.target, "best_latency_us": best, "baseline_us": base}
            if "construction" in cfg.tasks:
                for s in construction_picks(scripts, cfg):
                    rows.append({**common, "task": "construction", "completion": s.text, "start_script": "",
                                 "start_latency_us": math.nan, "start_trial": -1,
                                 "completion_latency_us": s.latency_us, "completion_trial": s.trial,
                                 "speedup": math.nan, "speedup_vs_baseline": base / s.latency_us})
            if "refinement" in cfg.tasks:
                rng = random.Random(_seed_for(cfg.seed, h.target, wid))
                pairs = refinement_pairs(scripts, cfg, rng)
                if not pairs:
                    counts.no_refinement_pair += 1
                for start, done in pairs:
                    rows.append({**common, "task": "refinement", "completion": done.text,
                                 "start_script": start.text, "start_latency_us": start.latency_us,
                                 "start_trial": start.trial, "completion_latency_us": done.latency_us,
                                 "completion_trial": done.trial, "speedup": start.latency_us / done.latency_us,
                                 "speedup_vs_baseline": base / done.latency_us})
    df = pd.DataFrame(rows, columns=[
        "workload_id", "target", "task", "completion", "start_script", "start_latency_us", "start_trial",
        "completion_latency_us", "completion_trial", "best_latency_us", "baseline_us", "speedup",
        "speedup_vs_baseline"])
    return df, counts
