"""The split stage on a real tiny harvest: sets, sealed manifest, faster refinements, token budgets."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dragon_testkit import datasets_cfg

pytestmark = pytest.mark.slow


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def _harvest_latencies(harvested: Path) -> dict[tuple[str, str], float]:
    """(workload_id, canonical trace JSON) -> best measured latency of that trace, from records.parquet."""
    from little_dragon.codec import canonical_json

    out: dict[tuple[str, str], float] = {}
    for rec_path in (harvested / "harvest").glob("*/records.parquet"):
        rec = pd.read_parquet(rec_path)
        for r in rec[rec["valid"]].itertuples():
            key = (r.workload_id, json.dumps(canonical_json(json.loads(r.trace_json))))
            out[key] = min(out.get(key, float("inf")), float(r.latency_us))
    return out


def test_build_writes_train_validation_and_a_sealed_set_with_manifest(built):
    from little_dragon.datasets.guard import SEALED_MARKER, read_manifest

    cfg, res = built
    out, sealed = Path(cfg.out_dir), Path(cfg.sealed_dir)
    train, val = _lines(out / "train.jsonl"), _lines(out / "validation.jsonl")
    test, heldout = _lines(sealed / "test.jsonl"), _lines(sealed / "heldout_families.jsonl")
    assert train and val and test and heldout, res.stats["examples"]
    for rows, split in ((train, "train"), (val, "validation"), (test, "sealed"), (heldout, "heldout_family")):
        assert {r["split"] for r in rows} == {split}
        for r in rows:
            assert isinstance(r["prompt"], str) and r["prompt"].endswith("### Script:\n")
            assert r["task"] in ("construction", "refinement") and r["completion"]
            assert json.loads(r["target"])["kind"] == "llvm" and r["workload_id"].startswith("w")
    assert {r["family"] for r in heldout} == {"softmax"}
    assert (sealed / SEALED_MARKER).is_file()
    manifest = read_manifest(sealed)
    sealed_hashes = {w["structural_hash"] for w in manifest["workloads"]}
    assert {r["structural_hash"] for r in test + heldout} <= sealed_hashes
    # the leakage property on the real output: no sealed kernel in train or validation
    assert not ({r["structural_hash"] for r in train + val} & sealed_hashes)
    assert not ({r["group"] for r in train + val} & {w["group"] for w in manifest["workloads"]})
    assert res.stats["examples"]["total"] == len(train) + len(val) + len(test) + len(heldout)
    assert pd.read_parquet(out / "train.parquet")["prompt"].tolist() == [r["prompt"] for r in train]


def test_completions_are_harvested_traces_and_refinements_really_are_faster(built, harvested):
    from little_dragon import codec

    cfg, res = built
    lat = _harvest_latencies(harvested)
    ex = res.examples
    assert (ex["task"] == "refinement").sum() > 0 and (ex["task"] == "construction").sum() > 0
    from little_dragon.workloads.store import load_workloads, module_from_script

    scripts = dict(zip(*[load_workloads(cfg.workloads)[c] for c in ("workload_id", "tvmscript")]))
    contexts = {}
    # the completions write the post-processing section as `post *` (re-derived on decode)
    assert ex["completion"].str.rstrip().str.endswith("post *").any()
    for r in ex.itertuples():
        ctx = contexts.get((r.workload_id, r.target))
        if ctx is None:
            ctx = contexts[(r.workload_id, r.target)] = codec.PostprocContext(
                module_from_script(scripts[r.workload_id]), r.target)
        done = lat[(r.workload_id, json.dumps(codec.decode(r.completion, ctx)))]
        assert done == pytest.approx(r.completion_latency_us)
        if r.task == "refinement":
            start = lat[(r.workload_id, json.dumps(codec.decode(r.start_script, ctx)))]
            assert start >= cfg.refinement_min_speedup * done, (r.workload_id, start, done)
            assert r.start_script.strip() in r.prompt and r.completion != r.start_script
    # the first construction example of a workload is its best valid trace
    for wid, g in ex[ex["task"] == "construction"].groupby("workload_id"):
        best = min(v for (w, _), v in lat.items() if w == wid)
        assert g["completion_latency_us"].min() == pytest.approx(best)
    # starting scripts spread over the latency range (not all the same script)
    ref = ex[ex["task"] == "refinement"]
    assert ref.groupby("workload_id")["start_script"].nunique().max() >= 2


def test_token_counts_are_real_and_overlong_prompts_are_compacted_or_excluded(built, harvested, token_counter,
                                                                               tmp_path):
    from little_dragon.datasets.build import build_datasets

    cfg, res = built
    ex = res.examples
    assert ex["prompt_tokens"].tolist() == token_counter.count(ex["prompt"].tolist())
    assert (ex["prompt_tokens"] + ex["completion_tokens"] + 1 <= cfg.context_tokens).all()
    assert set(ex["kernel_rendering"]) == {"full"}
    # a context that no full prompt fits: prompts are re-rendered compactly, or excluded and counted
    tight = int((ex["prompt_tokens"] + ex["completion_tokens"]).min())
    small = build_datasets(datasets_cfg(harvested, tmp_path / "a", context_tokens=tight), counter=token_counter)
    kept = small.examples
    assert set(kept["kernel_rendering"]) <= {"compact"} and len(kept) > 0
    assert (kept["prompt_tokens"] + kept["completion_tokens"] + 1 <= tight).all()
    assert small.stats["rendering"]["excluded_overlong"] == len(ex) - len(kept)
    assert small.stats["rendering"]["compact"] == len(kept)
    # the 'exclude' policy drops them all, counted
    none = build_datasets(datasets_cfg(harvested, tmp_path / "b", context_tokens=tight, overlong="exclude"),
                          counter=token_counter)
    assert len(none.examples) == 0 and none.stats["rendering"]["excluded_overlong"] == len(ex)


def test_build_is_deterministic_for_a_fixed_seed(built, harvested, token_counter, tmp_path):
    from little_dragon.datasets.build import build_datasets

    cfg, _ = built
    again = datasets_cfg(harvested, tmp_path)
    build_datasets(again, counter=token_counter)
    for rel in ("train.jsonl", "validation.jsonl"):
        assert (Path(again.out_dir) / rel).read_bytes() == (Path(cfg.out_dir) / rel).read_bytes()
    for rel in ("manifest.json", "test.jsonl", "heldout_families.jsonl"):
        assert (Path(again.sealed_dir) / rel).read_bytes() == (Path(cfg.sealed_dir) / rel).read_bytes()


def test_compact_kernel_rendering_is_the_same_kernel():
    from dragon_testkit import tiny_workloads_frame

    from little_dragon.datasets.prompts import render_kernel
    from little_dragon.workloads.store import module_from_script

    wl = tiny_workloads_frame()
    for r in wl.itertuples():
        compact = render_kernel(r.tvmscript, "compact")
        assert len(compact) < len(r.tvmscript) and "#" not in compact
        module_from_script(compact, expected_hash=r.structural_hash, where=r.name)


def test_cli_build_writes_card_metrics_and_logs_to_mlflow(harvested, token_counter, tmp_path, monkeypatch):
    import yaml

    from little_dragon.cli import main

    cfg = datasets_cfg(harvested, tmp_path)
    import dataclasses

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"datasets": dataclasses.asdict(cfg)}))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("DRAGON_NO_MLFLOW", raising=False)
    metrics = tmp_path / "metrics.json"
    assert main(["--params", str(params), "datasets", "build", "--metrics", str(metrics)]) == 0
    m = json.loads(metrics.read_text())
    card = Path(cfg.card_dir)
    text = (card / "README.md").read_text()
    assert "### Task: refinement" in text and "counts_by_family_task.png" in text
    for png in ("counts_by_family_task.png", "token_lengths.png", "speedups.png"):
        assert (card / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["little-dragon/split"])
    assert len(runs) == 1 and runs.iloc[0]["metrics.examples.total"] == m["examples"]["total"] > 0
