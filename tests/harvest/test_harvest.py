"""Real MetaSchedule tuning at tiny sizes: records, databases, baselines, resume, containment."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from little_dragon.harvest.run import consolidate, run_harvest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_tiny_tuning_run_keeps_database_records_and_baselines(tmp_path, tiny_workloads, harvest_cfg, timing_cfg):
    from tvm.s_tir import meta_schedule as ms

    wl = tiny_workloads.head(2)
    res = run_harvest(harvest_cfg, timing_cfg, wl, tmp_path)
    assert (res.ok, res.failed, res.tuned_now) == (2, 0, 2)

    rec = pd.read_parquet(res.out_dir / "records.parquet")
    assert set(rec["workload_id"]) == set(wl["workload_id"])
    # every candidate of every workload, each measured once, in trial order
    for wid, g in rec.groupby("workload_id"):
        assert list(g["trial"]) == list(range(len(g))) and len(g) >= harvest_cfg.trials_per_iter
    valid = rec[rec["valid"]]
    assert len(valid) > 0
    assert (valid["latency_us"] > 0).all() and valid["run_secs"].map(len).min() == timing_cfg.repeat
    assert rec.loc[~rec["valid"], "error"].map(bool).all()
    # the trace JSON re-applies to the workload
    import tvm

    from little_dragon.workloads.store import module_from_script

    row = valid.iloc[0]
    mod = module_from_script(wl.set_index("workload_id").loc[row["workload_id"], "tvmscript"])
    sch = tvm.s_tir.Schedule(mod)
    tvm.s_tir.Trace.apply_json_to_schedule(json.loads(row["trace_json"]), sch)

    # the standard MetaSchedule database is kept and loads
    for wid in wl["workload_id"]:
        db = ms.database.JSONDatabase(work_dir=str(res.out_dir / "db" / wid))
        assert len(db) > 0

    # the harvest is self-contained: it carries the workloads it tuned
    carried = pd.read_parquet(res.out_dir / "workloads.parquet")
    assert list(carried["workload_id"]) == list(wl["workload_id"])
    assert (carried["tvmscript"] == wl["tvmscript"].to_numpy()).all()

    base = pd.read_parquet(res.out_dir / "baselines.parquet")
    assert set(base["baseline_kind"]) == {"unscheduled"}
    assert (base["baseline_us"] > 0).all()
    st = pd.read_parquet(res.out_dir / "status.parquet")
    assert (st["status"] == "ok").all() and st["best_us"].map(math.isfinite).all()

    # nothing left to do: a second run tunes nothing and rebuilds the same tables
    again = run_harvest(harvest_cfg, timing_cfg, wl, tmp_path)
    assert again.tuned_now == 0 and again.records == res.records
    pd.testing.assert_frame_equal(pd.read_parquet(res.out_dir / "records.parquet"), rec)


def test_crashing_and_hanging_workloads_do_not_stop_the_harvest(tmp_path, tiny_workloads, harvest_cfg,
                                                                timing_cfg, monkeypatch):
    import dataclasses

    ids = list(tiny_workloads["workload_id"])
    # planted faults inside the tuning worker: one aborts the process, one hangs forever
    monkeypatch.setenv("DRAGON_HARVEST_FAULTS", f"{ids[0]}:crash,{ids[1]}:hang")
    # the timeout covers every workload: long enough for a real tune on a loaded 2-core machine (a fresh
    # worker imports TVM's tensor intrinsics first), short enough to cut the hang
    cfg = dataclasses.replace(harvest_cfg, workload_timeout_sec=180.0)
    res = run_harvest(cfg, timing_cfg, tiny_workloads, tmp_path)
    st = pd.read_parquet(res.out_dir / "status.parquet").set_index("workload_id")
    assert st.loc[ids[2], "status"] == "ok", st.loc[ids[2], "error"]
    assert st.loc[ids[0], "status"] == "failed" and "crash" in st.loc[ids[0], "error"]
    assert st.loc[ids[1], "status"] == "failed" and "timeout" in st.loc[ids[1], "error"]
    assert ids[0] in st.loc[ids[0], "error"]  # the error names the workload
    assert not (res.out_dir / "db" / ids[0]).exists()
    assert not list((res.out_dir / ".staging").glob(f"{ids[0]}*"))  # no half-written leftovers


def _harvest_cli(tmp_path: Path, wl_path: Path, params: Path) -> subprocess.Popen:
    env = dict(os.environ, DRAGON_PARAMS=str(params), DRAGON_NO_MLFLOW="1")
    return subprocess.Popen([sys.executable, "-m", "little_dragon.cli", "harvest", "--workloads", str(wl_path),
                             "--out", str(tmp_path / "out"), "--orchestrator", "local"],
                            env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "harvest.log", "ab"))


def test_killed_harvest_resumes_without_loss_or_duplicates(tmp_path, tiny_workloads, harvest_cfg, timing_cfg):
    import dataclasses

    import yaml

    wl_path = tmp_path / "workloads.parquet"
    tiny_workloads.to_parquet(wl_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"harvest": dataclasses.asdict(harvest_cfg),
                                      "timing": dataclasses.asdict(timing_cfg)}))
    proc = _harvest_cli(tmp_path, wl_path, params)
    out = None
    deadline = time.time() + 400
    while time.time() < deadline:  # kill the whole harvest as soon as the first workload is finished
        done = list((tmp_path / "out").glob("*/db/*/result.json"))
        if done:
            out = done[0].parents[2]
            break
        assert proc.poll() is None, (tmp_path / "harvest.log").read_text()[-3000:]
        time.sleep(0.5)
    assert out is not None, "first workload never finished"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("db/*/result.json")}
    assert 1 <= len(first) < 3

    proc = _harvest_cli(tmp_path, wl_path, params)
    assert proc.wait(timeout=600) == 0, (tmp_path / "harvest.log").read_text()[-3000:]
    # finished workloads were not tuned again; the rest were
    assert {wid: (out / "db" / wid / "result.json").stat().st_mtime_ns for wid in first} == first
    rec = pd.read_parquet(out / "records.parquet")
    assert set(rec["workload_id"]) == set(tiny_workloads["workload_id"])
    for wid, g in rec.groupby("workload_id"):
        assert list(g["trial"]) == list(range(len(g)))  # no duplicate, no gap
    assert not rec.duplicated(["workload_id", "trial"]).any()
    assert not (out / ".staging").exists() or not any((out / ".staging").iterdir())


def test_consolidate_ignores_a_torn_staging_folder(tmp_path, tiny_workloads, harvest_cfg, timing_cfg):
    # a staged-but-unfinished workload (the state a kill leaves) is not a record
    res = run_harvest(harvest_cfg, timing_cfg, tiny_workloads.head(1), tmp_path)
    stage = res.out_dir / ".staging" / "wdeadbeef" / "db"
    stage.mkdir(parents=True)
    (stage / "candidates.jsonl").write_text('{"trial": 0')
    counts = consolidate(res.out_dir, list(tiny_workloads["workload_id"].head(1)) + ["wdeadbeef"])
    assert counts["ok"] == 1 and counts["records"] == res.records


def test_prefect_fanout_runs_one_task_per_workload(tmp_path, tiny_workloads, harvest_cfg, timing_cfg):
    """The default orchestrator: each workload is a Prefect task run, visible in the (local) Prefect API."""
    import dataclasses

    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    cfg = dataclasses.replace(harvest_cfg, orchestrator="prefect", trials_per_workload=2, trials_per_iter=2)
    wl = tiny_workloads.tail(2)
    with prefect_test_harness(server_startup_timeout=120):
        res = run_harvest(cfg, timing_cfg, wl, tmp_path)
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs()
    assert res.ok == 2
    names = sorted(r.name for r in runs if r.name.startswith("tune-"))
    assert names == sorted(f"tune-{w}" for w in wl["workload_id"])
    assert all(r.state.is_completed() for r in runs if r.name.startswith("tune-"))


def _popen_workers_below(root: int, seen: dict[int, int], stop) -> None:
    """Collect the pids of TVM popen workers (``-m tvm.exec.popen_worker``) descending from ``root``, each with
    its parent's pid. A worker's own children (``tar`` and the linker, started through subprocess) show the
    worker's command line between their fork and exec: ``_popen_workers`` drops them by their parent."""
    while not stop.is_set():
        parents = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    stat = Path(f"/proc/{d}/stat").read_text()
                    parents[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])
                except (OSError, ValueError):
                    pass
        for pid in parents:
            p, depth = pid, 0
            while p in parents and p != root and depth < 8:
                p, depth = parents[p], depth + 1
            if p == root and pid not in seen:
                try:
                    if b"tvm.exec.popen_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        seen[pid] = parents[pid]
                except OSError:
                    pass
        time.sleep(0.05)


def _popen_workers(seen: dict[int, int]) -> list[int]:
    """The popen workers among ``seen``: those whose parent is not itself a popen worker."""
    return sorted(pid for pid, parent in seen.items() if parent not in seen)


def test_builder_and_runner_workers_live_across_workloads(tmp_path, tiny_workloads, harvest_cfg, timing_cfg):
    """One harvest worker tunes three workloads with the same popen workers: builder_workers builders and one
    runner, each a Python that imports TVM once (~3.4 s of CPU). TVM's LocalBuilder started builder_workers
    new ones in every build call (here at least one per workload: 7 or more in all)."""
    import threading

    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_popen_workers_below, args=(os.getpid(), seen, stop), daemon=True)
    watcher.start()
    try:
        res = run_harvest(harvest_cfg, timing_cfg, tiny_workloads, tmp_path)
    finally:
        stop.set()
        watcher.join(5)
    assert res.ok == 3 and res.valid_records > 0
    workers = _popen_workers(seen)
    assert 1 <= len(workers) <= harvest_cfg.builder_workers + 1, (workers, seen)
