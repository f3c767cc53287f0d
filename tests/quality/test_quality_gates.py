"""Great Expectations gates on real data: they pass on clean data and name the offending rows otherwise."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dragon_testkit import datasets_cfg, quality_cfg

pytestmark = pytest.mark.slow


def _copy_harvest(harvested: Path, dest: Path) -> Path:
    shutil.copytree(harvested, dest)
    return dest


def test_harvest_gate_passes_then_names_a_negative_latency(harvested, tmp_path):
    from little_dragon.quality.gate import QualityGateError, build_frames, check, run_suite

    qc = quality_cfg(tmp_path)
    ds = datasets_cfg(harvested, tmp_path)
    ok = check("harvest", ds, qc)
    assert ok.success and ok.rows["harvest_records"] > 0
    assert (tmp_path / "monitoring" / "data-docs" / "harvest" / "index.html").is_file()

    bad_dir = _copy_harvest(harvested, tmp_path / "bad")
    rec_path = next((bad_dir / "harvest").glob("*/records.parquet"))
    rec = pd.read_parquet(rec_path)
    i = int(rec.index[rec["valid"]][0])
    rec.loc[i, "latency_us"] = -5.0
    rec.to_parquet(rec_path, index=False)
    bad = datasets_cfg(bad_dir, tmp_path)
    with pytest.raises(QualityGateError) as e:
        check("harvest", bad, qc)
    msg = str(e.value)
    assert "expect_column_values_to_be_between" in msg and "latency_us" in msg
    assert f"records.parquet:{i} {rec.loc[i, 'workload_id']} trial {rec.loc[i, 'trial']}" in msg
    assert "-5.0" in msg and "1 of" in msg
    # a workload whose baseline is missing fails the baseline expectation, naming it
    base_path = rec_path.parent / "baselines.parquet"
    base = pd.read_parquet(base_path)
    gone = base.iloc[0]["workload_id"]
    base.iloc[1:].to_parquet(base_path, index=False)
    res = run_suite("harvest", build_frames("harvest", bad, qc), bad, qc)
    failed = [o for o in res.outcomes if not o.success]
    assert any(o.kwargs.get("column") == "baseline_us" and any(gone in r for r in o.offending) for o in failed)


def test_workloads_gate_catches_a_script_that_no_longer_matches_its_hash(harvested, tmp_path):
    from little_dragon.quality.gate import QualityGateError, check

    qc = quality_cfg(tmp_path)
    assert check("workloads", datasets_cfg(harvested, tmp_path), qc).success
    bad_dir = _copy_harvest(harvested, tmp_path / "bad")
    wl = pd.read_parquet(bad_dir / "workloads.parquet")
    wl.loc[0, "tvmscript"] = wl.loc[0, "tvmscript"].replace("T.float32(0.0)", "T.float32(1.0)")
    assert wl.loc[0, "tvmscript"] != pd.read_parquet(harvested / "workloads.parquet").loc[0, "tvmscript"]
    wl.to_parquet(bad_dir / "workloads.parquet", index=False)
    with pytest.raises(QualityGateError, match=rf"reparse_ok.*\n.*{wl.loc[0, 'workload_id']}"):
        check("workloads", datasets_cfg(bad_dir, tmp_path), qc)


def _copy_built(cfg, dest: Path):
    import dataclasses

    shutil.copytree(cfg.out_dir, dest / "datasets")
    shutil.copytree(cfg.sealed_dir, dest / "sealed")
    return dataclasses.replace(cfg, out_dir=str(dest / "datasets"), sealed_dir=str(dest / "sealed"))


def _rewrite(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_examples_gate_passes_and_catches_undecodable_completion_slow_refinement_and_leak(built, tmp_path):
    from little_dragon.quality.gate import QualityGateError, check

    cfg, _ = built
    qc = quality_cfg(tmp_path)
    assert check("examples", cfg, qc).success
    assert (tmp_path / "monitoring" / "data-docs" / "examples" / "index.html").is_file()

    bad = _copy_built(cfg, tmp_path / "c1")
    train_p = Path(bad.out_dir) / "train.jsonl"
    rows = [json.loads(x) for x in train_p.read_text().splitlines()]
    rows[0]["completion"] = rows[0]["completion"] + "\n)))garbage(((\n"
    _rewrite(train_p, rows)
    with pytest.raises(QualityGateError) as e:
        check("examples", bad, qc)
    assert "codec_roundtrip_ok" in str(e.value) and f"train.jsonl:1 {rows[0]['workload_id']}" in str(e.value)

    bad = _copy_built(cfg, tmp_path / "c2")
    train_p = Path(bad.out_dir) / "train.jsonl"
    rows = [json.loads(x) for x in train_p.read_text().splitlines()]
    j = next(i for i, r in enumerate(rows) if r["task"] == "refinement")
    rows[j]["start_latency_us"] = rows[j]["completion_latency_us"] * 1.01  # only 1% faster
    _rewrite(train_p, rows)
    with pytest.raises(QualityGateError, match=rf"measured_speedup.*\n.*train.jsonl:{j + 1} "):
        check("examples", bad, qc)

    bad = _copy_built(cfg, tmp_path / "c3")
    train_p = Path(bad.out_dir) / "train.jsonl"
    rows = [json.loads(x) for x in train_p.read_text().splitlines()]
    leaked = json.loads((Path(bad.sealed_dir) / "test.jsonl").read_text().splitlines()[0])
    _rewrite(train_p, rows + [{**leaked, "split": "train"}])
    with pytest.raises(QualityGateError) as e:
        check("examples", bad, qc)
    assert "sealed_leak" in str(e.value) and f"train.jsonl:{len(rows) + 1} {leaked['workload_id']}" in str(e.value)


def test_examples_gate_checks_token_budget_and_family_mix(built, tmp_path):
    import dataclasses

    from little_dragon.quality.gate import build_frames, run_suite

    cfg, _ = built
    tight = dataclasses.replace(cfg, context_tokens=10)
    qc = quality_cfg(tmp_path, max_family_share=0.01)
    res = run_suite("examples", build_frames("examples", tight, qc), tight, qc)
    failed = {o.kwargs.get("column") for o in res.outcomes if not o.success}
    assert {"total_tokens", "share"} <= failed


def test_cli_gate_fails_the_stage_with_the_expectation_named(harvested, tmp_path, monkeypatch, capsys):
    import yaml

    from little_dragon.cli import main

    bad_dir = _copy_harvest(harvested, tmp_path / "bad")
    rec_path = next((bad_dir / "harvest").glob("*/records.parquet"))
    rec = pd.read_parquet(rec_path)
    rec.loc[rec.index[rec["valid"]][0], "latency_us"] = float("inf")
    rec.to_parquet(rec_path, index=False)
    import dataclasses

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"datasets": dataclasses.asdict(datasets_cfg(bad_dir, tmp_path)),
                                      "quality": dataclasses.asdict(quality_cfg(tmp_path))}))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("DRAGON_NO_MLFLOW", raising=False)
    assert main(["--params", str(params), "quality", "check", "--suite", "harvest"]) == 1
    err = capsys.readouterr().err
    assert "quality gate 'harvest' failed" in err and "latency_us" in err and "inf" in err
    metrics = json.loads((tmp_path / "monitoring" / "metrics" / "quality_harvest.json").read_text())
    assert metrics["success"] is False and metrics["failed"] >= 1
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["little-dragon/quality-harvest"])
    assert len(runs) == 1 and runs.iloc[0]["metrics.success"] == 0.0


def test_harvest_gate_tolerates_a_recorded_tuning_failure_but_not_an_ok_workload_without_valid_records(
        harvested, tmp_path):
    """A crash the harvest recorded (status failed) is data; an 'ok' workload with no valid record is not."""
    from little_dragon.quality.gate import QualityGateError, check

    qc = quality_cfg(tmp_path)
    d = _copy_harvest(harvested, tmp_path / "h")
    hdir = next((d / "harvest").glob("*/records.parquet")).parent
    status = pd.read_parquet(hdir / "status.parquet")
    rec = pd.read_parquet(hdir / "records.parquet")
    victim = status.iloc[0]["workload_id"]
    # 1) the harvest recorded the victim's tuning as failed: no records, no baseline -> still passes
    status.loc[0, ["status", "error", "valid_trials"]] = ["failed", f"workload {victim}: crash", 0]
    status.to_parquet(hdir / "status.parquet", index=False)
    rec[rec["workload_id"] != victim].to_parquet(hdir / "records.parquet", index=False)
    base = pd.read_parquet(hdir / "baselines.parquet")
    base[base["workload_id"] != victim].to_parquet(hdir / "baselines.parquet", index=False)
    qc_loose = dataclasses.replace(qc, max_failed_workload_fraction=0.5)
    assert check("harvest", datasets_cfg(d, tmp_path), qc_loose).success
    # 2) but not when failures exceed the allowed share
    with pytest.raises(QualityGateError, match="status"):
        check("harvest", datasets_cfg(d, tmp_path), dataclasses.replace(qc, max_failed_workload_fraction=0.0))
    # 3) and an 'ok' workload whose records are all invalid fails, named
    status.loc[0, ["status", "error"]] = ["ok", ""]
    status.to_parquet(hdir / "status.parquet", index=False)
    with pytest.raises(QualityGateError, match=f"valid_records(.|\\n)*{victim}"):
        check("harvest", datasets_cfg(d, tmp_path), qc_loose)
