"""The drift gate on real harvest records (a trimmed copy of the H200 harvest: 48 workloads, 16 families, 3
candidates each) with real Great Expectations: a like-for-like batch passes, a batch with a family the model
never saw fails naming the expectation and saying what to do, and enforce: false only reports."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

FIXTURE = Path(__file__).parent / "data" / "drift_harvest"


def _harvest(tmp: Path, new_ids: set[str]) -> tuple[Path, dict]:
    """The fixture harvest with ``new_ids`` finished after the latest run started, the rest before it."""
    root = tmp / "harvest"
    shutil.copytree(FIXTURE, root)
    h = next(root.iterdir())
    status = pd.read_parquet(h / "status.parquet")
    t = time.time()
    os.utime(h / "meta.json", (t, t))
    for r in status.itertuples():
        p = h / "db" / r.workload_id / "result.json" if r.status == "ok" else h / "failed" / f"{r.workload_id}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
        m = t + 100 if r.workload_id in new_ids else t - 100
        os.utime(p, (m, m))
    return root, json.loads((h / "meta.json").read_text())["target"]


def _run(tmp: Path, train_ids: list[str], new_ids: set[str], **kw):
    from little_dragon.datasets.config import DatasetsConfig
    from little_dragon.quality.config import QualityConfig
    from little_dragon.quality.drift_config import DriftConfig
    from little_dragon.quality.drift_stage import drift_stage

    root, target = _harvest(tmp, new_ids)
    train = tmp / "train.parquet"
    pd.DataFrame({"workload_id": train_ids, "target": json.dumps(target, sort_keys=True)}).to_parquet(train)
    cfg = DriftConfig(harvest_root=str(root), train=str(train), out_dir=str(tmp / "drift"), **kw)
    ds = DatasetsConfig(workloads=str(tmp / "absent.parquet"), harvest_roots=[str(root)], heldout_families=[])
    qc = QualityConfig(gx_root=str(tmp / "gx"), data_docs_dir=str(tmp / "docs"), metrics_dir=str(tmp / "m"))
    return drift_stage(cfg, ds, qc, target)


@pytest.fixture(scope="module")
def workloads() -> pd.DataFrame:
    return pd.read_parquet(next(FIXTURE.iterdir()) / "workloads.parquet").sort_values("workload_id")


def test_like_for_like_batch_passes(tmp_path, workloads, monkeypatch):
    monkeypatch.setenv("DRAGON_NO_MLFLOW", "1")
    # one workload per family is new this week; the model trained on the other two of each family
    new = set(workloads.groupby("family").head(1)["workload_id"])
    old = [w for w in workloads["workload_id"] if w not in new]
    res = _run(tmp_path, old, new)
    m = res.metrics
    assert m["batch"] == "latest run" and m["batch_workloads"] == len(new) and m["reference_workloads"] == len(old)
    assert m["new_families"] == [] and m["family_kl"] < 0.5
    assert res.success, res.message
    assert m["verdict"] == "no drift"
    report = (tmp_path / "drift" / "README.md").read_text()
    assert "no drift" in report and "expect_column_kl_divergence_to_be_less_than" in report
    assert (tmp_path / "drift" / "drift.png").stat().st_size > 10_000
    assert (tmp_path / "docs" / "drift" / "index.html").exists()


def test_unseen_family_fails_naming_the_expectation(tmp_path, workloads, monkeypatch):
    monkeypatch.setenv("DRAGON_NO_MLFLOW", "1")
    convs = workloads["family"].str.startswith("conv2d")
    new = set(workloads.loc[convs, "workload_id"])           # this week: only convolutions ...
    old = workloads.loc[~convs & ~workloads["family"].isin(["attention_score"]), "workload_id"].tolist()
    res = _run(tmp_path, old, new)                            # ... which the model never saw
    assert not res.success
    assert res.metrics["new_families"] == ["conv2d_nchw", "conv2d_nhwc", "conv2d_transpose"]
    assert "expect_column_kl_divergence_to_be_less_than" in res.message and "column='family'" in res.message
    assert "What to do" in res.message and "drift.enforce" in res.message
    metrics = json.loads((tmp_path / "drift" / "metrics.json").read_text())
    assert metrics["verdict"] == "DRIFT" and metrics["failed_expectations"]

    # the same batch with enforce off: reported, not failed
    shutil.rmtree(tmp_path / "harvest")
    res = _run(tmp_path, old, new, enforce=False)
    assert res.success and "expect_column_kl_divergence_to_be_less_than" in res.message
    assert "reported only" in (tmp_path / "drift" / "README.md").read_text()


def test_first_harvest_of_a_target_is_skipped_saying_why(tmp_path, workloads, monkeypatch):
    monkeypatch.setenv("DRAGON_NO_MLFLOW", "1")
    every = set(workloads["workload_id"])
    res = _run(tmp_path, sorted(every), every)  # the training split holds only this batch
    assert res.success and res.skipped.startswith("no earlier training data")
    # strict JSON (no NaN), and the stage's declared outputs exist, the Data Docs page naming the reason
    metrics = json.loads((tmp_path / "drift" / "metrics.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"{c} in metrics.json"))
    assert metrics["verdict"].startswith("SKIPPED")
    assert "skipped" in (tmp_path / "docs" / "drift" / "index.html").read_text()
