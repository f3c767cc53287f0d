"""Generation, dedup, stable ids, TVMScript round trip, profiles, the 50k scale and the CLI."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pandas as pd
import pytest
import tvm_ffi

from little_dragon.workloads import store
from little_dragon.workloads.config import WorkloadsConfig
from little_dragon.workloads.generate import PARQUET, SUMMARY, generate_rows, generate_workloads, spec_row
from little_dragon.workloads.profiles import CURATED, profile_specs
from little_dragon.workloads.spec import WorkloadSpec, build_module

DENSE = dict(m=8, n=16, k=32)
SMALL_CFG = WorkloadsConfig(profile="default", families=["dense", "softmax", "conv2d_nhwc", "attention_score"])


def test_ids_are_stable_and_well_formed():
    spec = WorkloadSpec.of("dense", "float16", DENSE, "test")
    a, b = spec_row(spec), spec_row(spec)
    assert a["workload_id"] == b["workload_id"] == store.id_of_hash(int(a["structural_hash"]))
    assert store.ID_PATTERN.match(a["workload_id"])
    # across processes: see test_cli_writes_parquet_and_logs_to_mlflow


def test_distinct_specs_get_distinct_ids():
    ids = {spec_row(WorkloadSpec.of("dense", dt, DENSE, "t"))["workload_id"] for dt in ("float32", "float16", "int8")}
    ids.add(spec_row(WorkloadSpec.of("dense", "float32", dict(m=8, n=16, k=48), "t"))["workload_id"])
    assert len(ids) == 4


def test_round_trip_script_module_hash():
    row = spec_row(WorkloadSpec.of("attention_score", "float16",
                                   dict(b=1, h=2, sq=4, skv=8, d=16, mask="causal"), "t"))
    assert "@T.prim_func(s_tir=True)" in row["tvmscript"] and "def main(" in row["tvmscript"]
    mod = store.module_from_script(row["tvmscript"], expected_hash=row["structural_hash"])
    assert store.workload_id_of(mod) == row["workload_id"]
    assert tvm_ffi.structural_equal(mod, store.module_from_script(mod.script()))
    with pytest.raises(store.WorkloadError, match="hashes to"):
        store.module_from_script(row["tvmscript"].replace("T.float32(0.25)", "T.float32(0.5)"),
                                 expected_hash=row["structural_hash"])


def test_dedup_same_spec_and_renamed_structural_twins(monkeypatch):
    # same spec listed twice (two sources) -> one row; the curated names differ but the kernel is the same
    twin = ("dense", "float32", dict(m=32, n=64, k=64))
    monkeypatch.setattr("little_dragon.workloads.profiles.CURATED", [twin, twin])
    rows, stats = generate_rows(WorkloadsConfig(profile="default"))
    assert len(rows) == 1
    # structurally identical kernels reached by different specs/names -> one row
    spec = WorkloadSpec.of("dense", "float32", DENSE, "a")
    mod = build_module(spec)
    import tvm

    renamed = tvm.IRModule({"main": mod["main"].with_attr("global_symbol", "main")})
    r1 = spec_row(spec)
    from little_dragon.workloads.generate import canonical_row

    r2 = canonical_row(renamed, family="graph:x", name="some_other_name", source="graph:x", flops=1.0)
    assert r1["workload_id"] == r2["workload_id"]
    seen: dict[str, dict] = {}
    for r in (r1, r2):
        seen.setdefault(r["workload_id"], r)
    assert len(seen) == 1 and seen[r1["workload_id"]]["name"] == r1["name"]


def test_generate_writes_store_and_summary(tmp_path):
    df = generate_workloads(SMALL_CFG, tmp_path)
    assert list(df.columns) == store.COLUMNS
    assert df["workload_id"].is_unique and len(df) == sum(1 for f, *_ in CURATED if f in SMALL_CFG.families)
    back = store.load_workloads(tmp_path / PARQUET)
    pd.testing.assert_frame_equal(df, back)
    summary = json.loads((tmp_path / SUMMARY).read_text())
    assert summary["workloads"] == len(df) and sum(summary["per_family"].values()) == len(df)
    for row in back.itertuples():
        mod = store.module_from_script(row.tvmscript, expected_hash=row.structural_hash)
        assert store.workload_id_of(mod) == row.workload_id
        assert row.flops > 0 and row.bytes > 0
    dense = back[back.family == "dense"].iloc[0]
    s = json.loads(dense.shapes)
    assert dense.flops == 2 * s["m"] * s["n"] * s["k"]
    in_b = {"float32": 4, "int8": 1}[dense["dtype"]]
    out_b = 4
    assert dense.bytes == (s["m"] * s["k"] + s["n"] * s["k"]) * in_b + s["m"] * s["n"] * out_b


def test_get_workload_by_id_and_by_unseen_file(tmp_path):
    df = generate_workloads(SMALL_CFG, tmp_path)
    wid = df.workload_id.iloc[0]
    row, mod = store.get_workload(wid, store=tmp_path / PARQUET)
    assert row["workload_id"] == wid and store.workload_id_of(mod) == wid
    # a kernel the store never saw, as a bare PrimFunc named differently
    other = build_module(WorkloadSpec.of("gemv", "float32", dict(n=24, k=40), "t"))
    text = other.script().replace("def main(", "def my_gemv(")
    f = tmp_path / "my_gemv.py"
    f.write_text(text)
    row2, mod2 = store.get_workload(str(f), store=tmp_path / PARQUET)
    assert row2["family"] == "external" and row2["name"] == "my_gemv"
    assert row2["workload_id"] == store.workload_id_of(other) and row2["flops"] == 2 * 24 * 40
    assert [g.name_hint for g in mod2.get_global_vars()] == ["main"]
    # a file holding a store kernel resolves to the store's row
    known = tmp_path / "known.py"
    known.write_text(df.tvmscript.iloc[1])
    assert store.get_workload(str(known), store=tmp_path / PARQUET)[0]["name"] == df.name.iloc[1]
    with pytest.raises(store.WorkloadError, match="no workload"):
        store.get_workload("w0000000000000000", store=tmp_path / PARQUET)


def test_profile_is_deterministic_and_seeded():
    cfg = WorkloadsConfig(profile="default", samples_per_family=3, families=["dense", "conv2d_nchw", "pool2d"])
    a, b = profile_specs(cfg), profile_specs(cfg)
    assert a == b and len(a) > 9
    c = profile_specs(WorkloadsConfig(profile="default", samples_per_family=3, seed=1,
                                      families=["dense", "conv2d_nchw", "pool2d"]))
    assert [s.key for s in a] != [s.key for s in c]
    rows_a, _ = generate_rows(dataclass_replace(cfg, samples_per_family=1))
    rows_b, _ = generate_rows(dataclass_replace(cfg, samples_per_family=1))
    assert [r["workload_id"] for r in rows_a] == [r["workload_id"] for r in rows_b]


def dataclass_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def test_default_profile_is_small_and_covers_families():
    specs = profile_specs(WorkloadsConfig())
    assert 16 <= len(specs) <= 24
    assert len({s.family for s in specs}) >= 12
    assert {s.dtype for s in specs} == {"float32", "float16", "int8"}
    assert max(s.flops() for s in specs) < 5e6  # small: tuning trials stay around a second on CPU


def test_large_profile_has_50k_distinct_workloads():
    """Enumerate the large profile (specs only) and structurally hash a random sample of it."""
    specs = profile_specs(WorkloadsConfig(profile="large", graph_models=[]))
    assert len(specs) >= 50_000
    assert len({s.key for s in specs}) == len(specs)
    sample = random.Random(0).sample(specs, 40)
    ids = {spec_row(s)["workload_id"] for s in sample}
    assert len(ids) == len(sample)


def test_cli_writes_parquet_and_logs_to_mlflow(tmp_path, monkeypatch):
    """The real `dragon workloads` entry point, in-process, logging to a real sqlite MLflow store."""
    from little_dragon import cli

    params = tmp_path / "params.yaml"
    params.write_text("workloads:\n  profile: default\n  families: [dense, softmax]\n  dtypes: [float32]\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("DRAGON_NO_MLFLOW", raising=False)
    out = tmp_path / "wl"
    assert cli.main(["--params", str(params), "workloads", "--out", str(out)]) == 0
    df = pd.read_parquet(out / PARQUET)
    assert sorted(df.family) == ["dense", "softmax"]
    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["little-dragon/workloads"])
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["metrics.workloads"] == 2 and run["metrics.count.dense"] == 1
    assert run["params.workloads.profile"] == "default"
    from little_dragon.tracking import dvc_hash

    assert run["tags.dvc_hash.out.workloads"] == dvc_hash(out / PARQUET)
    assert cli.main(["--params", str(params), "workloads", "--out", str(out), "--profile", "nope"]) == 2


@pytest.mark.slow
def test_ids_stable_across_processes(tmp_path):
    """A fresh interpreter (other Python hash seed) gives every default workload the same id."""
    here = generate_rows(WorkloadsConfig(families=["dense", "pool2d"]))[0]
    code = ("from little_dragon.workloads.generate import generate_rows; from little_dragon.workloads.config import "
            "WorkloadsConfig; print(*[r['workload_id'] for r in generate_rows(WorkloadsConfig(families=['dense', "
            "'pool2d']))[0]])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == [r["workload_id"] for r in here]


@pytest.mark.slow
def test_graph_extraction_tiny_gpt2_yields_fused_tasks(tmp_path):
    from little_dragon.workloads.graph import extract_model_tasks

    tasks = extract_model_tasks("gpt2-tiny")
    names = [n for n, _, _ in tasks]
    assert len(tasks) >= 6
    assert any("matmul" in n and "add" in n for n in names)  # fused Linear + bias
    assert any("softmax" in n for n in names) and any("layer_norm" in n for n in names)
    assert not any(n.startswith(("index_tensor", "reshape", "take")) for n in names)
    rows, stats = generate_rows(WorkloadsConfig(profile="default", families=["dense"], graph_models=["gpt2-tiny"]))
    graph = [r for r in rows if r["source"] == "graph:gpt2-tiny"]
    assert len(graph) >= 6 and all(r["family"] == "graph:gpt2-tiny" for r in graph)
    for r in graph:
        assert store.workload_id_of(store.module_from_script(r["tvmscript"], r["structural_hash"])) == r["workload_id"]
