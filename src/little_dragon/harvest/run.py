"""The harvest stage: tune every selected workload once, resumably, and consolidate the results.

Layout of ``<out_dir>/<target_key>/`` (docs/data-contracts.md):
  db/<workload_id>/   MetaSchedule JSON database + candidates.jsonl + result.json (a finished workload)
  failed/<id>.json    a workload whose tuning crashed, hung or raised (error kept, harvest went on)
  .staging/           work in progress; discarded on restart
  records.parquet, baselines.parquet, status.parquet, meta.json   consolidated, rebuilt atomically

A workload's folder appears in ``db/`` by one rename after it finished, so a killed harvest leaves
finished workloads complete and unfinished ones absent: a restart tunes exactly the missing ones.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon import atomic
from little_dragon.harvest.config import HarvestConfig
from little_dragon.tvmx import target as tgt
from little_dragon.tvmx.timing import TimingConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class HarvestResult:
    out_dir: Path
    tuned_now: int
    skipped: int
    ok: int
    failed: int
    records: int
    valid_records: int
    wall_s: float


# Version of the per-candidate record format; part of the fingerprint, so a format change re-harvests.
# 2: trace_json in the MetaSchedule database's canonical JSON form (little_dragon.codec.canonical_json).
RECORD_FORMAT = 2


def config_fingerprint(cfg: HarvestConfig, timing: TimingConfig) -> str:
    """What makes two harvests comparable: a resume only continues a harvest with the same fingerprint."""
    keep = {k: v for k, v in dataclasses.asdict(cfg).items()
            if k not in ("max_workloads", "families", "retry_failed", "orchestrator",
                         "max_concurrent_workloads", "out_dir", "workload_timeout_sec", "builder_workers")}
    blob = json.dumps({"harvest": keep, "timing": dataclasses.asdict(timing), "record_format": RECORD_FORMAT},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def select_workloads(workloads: pd.DataFrame, cfg: HarvestConfig) -> pd.DataFrame:
    df = workloads
    if cfg.families:
        df = df[df["family"].isin(cfg.families)]
    if cfg.max_workloads:
        df = df.head(cfg.max_workloads)
    return df.reset_index(drop=True)


def _prepare_out(out: Path, fingerprint: str, cfg: HarvestConfig, timing: TimingConfig) -> None:
    meta_path = out / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text()).get("fingerprint")
        if old != fingerprint:
            log.warning("harvest config changed (%s -> %s): starting %s afresh", old, fingerprint, out)
            for sub in ("db", "failed", "records.parquet", "baselines.parquet", "status.parquet"):
                p = out / sub
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    shutil.rmtree(out / ".staging", ignore_errors=True)
    (out / "db").mkdir(parents=True, exist_ok=True)
    (out / "failed").mkdir(exist_ok=True)
    import tvm

    atomic.write_json(meta_path, {
        "fingerprint": fingerprint, "target": cfg.target, "target_key": out.name,
        "harvest": dataclasses.asdict(cfg), "timing": dataclasses.asdict(timing),
        "tvm_version": tvm.__version__,
    })


def harvest_one(pool: Any, row: dict[str, Any], out: Path, cfg: HarvestConfig, timing: TimingConfig,
                seed: int) -> dict[str, Any]:
    """Tune one workload in the sandbox; move its finished folder into db/ or record it in failed/."""
    from little_dragon.harvest.tune import tune_workload

    wid = row["workload_id"]
    stage = out / ".staging" / f"{wid}.{os.getpid()}"  # never shared with a worker of an earlier run
    t0 = time.perf_counter()
    outcome = pool.run(tune_workload, wid, row["tvmscript"], cfg.target, dataclasses.asdict(cfg),
                       dataclasses.asdict(timing), seed, str(stage), timeout=cfg.workload_timeout_sec)
    if outcome.ok:
        dest = out / "db" / wid
        if dest.exists():  # left by a run killed between rename and bookkeeping: replace
            shutil.rmtree(dest)
        os.replace(stage / "db", dest)
        shutil.rmtree(stage, ignore_errors=True)
        (out / "failed" / f"{wid}.json").unlink(missing_ok=True)
        return outcome.value
    shutil.rmtree(stage, ignore_errors=True)
    failure = {"workload_id": wid, "status": "failed", "error_kind": outcome.kind,
               "error": f"workload {wid} ({row.get('name', '?')}): {outcome.kind}: {outcome.message}",
               "wall_s": time.perf_counter() - t0}
    atomic.write_json(out / "failed" / f"{wid}.json", failure)
    log.error("harvest: %s", failure["error"].splitlines()[0])
    return failure


def _run_local(jobs: list[dict[str, Any]], work: Callable[[dict[str, Any]], dict[str, Any]],
               on_done: Callable[[dict[str, Any]], None], max_concurrent: int) -> None:
    """Without Prefect (e.g. on a bare GPU box): the same fan-out on a thread pool."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    with ThreadPoolExecutor(max_workers=max_concurrent) as ex:
        for fut in as_completed([ex.submit(work, job) for job in jobs]):
            on_done(fut.result())


def _run_prefect(jobs: list[dict[str, Any]], work: Callable[[dict[str, Any]], dict[str, Any]],
                 on_done: Callable[[dict[str, Any]], None], max_concurrent: int) -> None:
    """Fan out one Prefect task per workload; the task runner's width is the concurrency limit."""
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    @task(name="tune-workload", task_run_name="tune-{job[workload_id]}")
    def tune_task(job: dict[str, Any]) -> dict[str, Any]:
        result = work(job)
        on_done(result)
        return result

    @flow(name="harvest-fanout", task_runner=ThreadPoolTaskRunner(max_workers=max_concurrent),
          log_prints=True)
    def fanout() -> None:
        futures = [tune_task.submit(job) for job in jobs]
        for f in futures:
            f.wait()

    # the configured Prefect server, or a temporary one that is stopped even if this process is killed
    # (Prefect's own temporary server outlived a SIGTERMed harvest)
    from little_dragon.prefect_api import prefect_api

    with prefect_api():
        fanout()


def run_harvest(cfg: HarvestConfig, timing: TimingConfig, workloads: pd.DataFrame,
                out_root: str | os.PathLike) -> HarvestResult:
    """Tune the selected workloads for ``cfg.target`` (resuming), then consolidate the tables."""
    from little_dragon.progress import Progress
    from little_dragon.sandbox import WorkerPool

    t0 = time.perf_counter()
    out = Path(out_root) / tgt.key(cfg.target)
    _prepare_out(out, config_fingerprint(cfg, timing), cfg, timing)
    selected = select_workloads(workloads, cfg)
    done = {p.name for p in (out / "db").iterdir() if (p / "result.json").exists()}
    failed = {p.stem for p in (out / "failed").glob("*.json")}
    skip = done | (set() if cfg.retry_failed else failed)
    jobs = [dict(r, seed=cfg.seed + i) for i, r in enumerate(selected.to_dict("records"))
            if r["workload_id"] not in skip]
    log.info("harvest %s: %d workloads selected, %d already done, %d to tune (%d trials each)",
             out.name, len(selected), len(selected) - len(jobs), len(jobs), cfg.trials_per_workload)
    if jobs:
        with WorkerPool(max_workers=cfg.max_concurrent_workloads) as pool, \
                Progress(len(jobs), f"harvest {out.name}") as bar:
            def work(job: dict[str, Any]) -> dict[str, Any]:
                return harvest_one(pool, job, out, cfg, timing, job["seed"])

            def on_done(res: dict[str, Any]) -> None:
                best = res.get("best_us", float("nan"))
                bar.update(1, workload=res["workload_id"], status=res["status"],
                           best_us=f"{best:.1f}" if isinstance(best, float) and math.isfinite(best) else "-")

            if cfg.orchestrator == "prefect":
                _run_prefect(jobs, work, on_done, cfg.max_concurrent_workloads)
            else:
                _run_local(jobs, work, on_done, cfg.max_concurrent_workloads)
    counts = consolidate(out, selected["workload_id"].tolist())
    # the harvest carries the workloads it tuned, so a harvest brought from elsewhere (data/) is self-contained
    atomic.write_parquet(out / "workloads.parquet", selected.reset_index(drop=True))
    return HarvestResult(out_dir=out, tuned_now=len(jobs), skipped=len(selected) - len(jobs),
                         wall_s=time.perf_counter() - t0, **counts)


def consolidate(out: Path, workload_ids: list[str]) -> dict[str, int]:
    """Rebuild records/baselines/status tables from the per-workload folders (deterministic order)."""
    meta = json.loads((out / "meta.json").read_text())
    target_json = json.dumps(meta["target"], sort_keys=True)
    records, baselines, status = [], [], []
    for wid in sorted(workload_ids):
        d = out / "db" / wid
        if (d / "result.json").exists():
            res = json.loads((d / "result.json").read_text())
            for line in (d / "candidates.jsonl").read_text().splitlines():
                if line:
                    c = json.loads(line)
                    records.append({"workload_id": wid, "target": target_json, **c})
            baselines.append({"workload_id": wid, "target": target_json, "baseline_us": res["baseline_us"],
                              "baseline_kind": res["baseline_kind"], "spread": res["baseline_spread"]})
            status.append({"workload_id": wid, "status": "ok", "error": "", "trials": res["trials"],
                           "valid_trials": res["valid_trials"], "best_us": res["best_us"], "wall_s": res["wall_s"]})
        elif (out / "failed" / f"{wid}.json").exists():
            f = json.loads((out / "failed" / f"{wid}.json").read_text())
            status.append({"workload_id": wid, "status": "failed", "error": f["error"], "trials": 0,
                           "valid_trials": 0, "best_us": float("nan"), "wall_s": f["wall_s"]})
    rec_cols = ["workload_id", "target", "trial", "trace_json", "run_secs", "latency_us", "valid", "error"]
    rec = pd.DataFrame(records, columns=rec_cols)
    rec["valid"] = rec["valid"].astype(bool)
    atomic.write_parquet(out / "records.parquet", rec)
    atomic.write_parquet(out / "baselines.parquet", pd.DataFrame(
        baselines, columns=["workload_id", "target", "baseline_us", "baseline_kind", "spread"]))
    atomic.write_parquet(out / "status.parquet", pd.DataFrame(
        status, columns=["workload_id", "status", "error", "trials", "valid_trials", "best_us", "wall_s"]))
    st = pd.DataFrame(status)
    return {
        "ok": int((st["status"] == "ok").sum()) if len(st) else 0,
        "failed": int((st["status"] == "failed").sum()) if len(st) else 0,
        "records": len(rec),
        "valid_records": int(rec["valid"].sum()),
    }
