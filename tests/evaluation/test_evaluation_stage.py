"""The evaluation stage end to end on the tiny real harvest: real TVM evaluator, real MLflow registry,
two tiny models; then compare, the promotion gate and ``dragon optimize`` on the same registry."""
from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest

from chat_server import ChatServer
from conftest import MODEL_NAME
from test_optimize import KERNEL


def test_stage_produces_every_metric(evaluations):
    from little_dragon.evaluation.metrics import categories

    res = evaluations["trained"]
    m = res.metrics
    # the model and every baseline at equal k, per task and slice (plus "all")
    assert {"model", "random", "metaschedule_k", "metaschedule_full", "given"} <= set(m)
    for task in ("construction", "refinement"):
        block = m["model"][task]["all"]
        assert block["attempts"] == 3 * block["prompts"]
        for key in ("correct_rate", "decode_rate", "apply_rate", "best_of_k_correct_rate", "geomean_speedup",
                    "geomean_speedup_vs_baseline", "geomean_speedup_vs_metaschedule", "best_of_k_geomean_speedup",
                    "wall_s_per_attempt", *(f"count_{c}" for c in categories())):
            assert key in block, (task, key)
        assert sum(block[f"count_{c}"] for c in categories()) == block["attempts"]
    # slices reported apart (the tiny split has refinement prompts in the held-out family only)
    assert set(m["model"]["construction"]) >= {"all", "sealed", "heldout_family"}
    assert set(m["model"]["refinement"]) >= {"all", "heldout_family"}
    assert {"improved_rate", "copy_rate", "best_of_k_improved_rate"} <= set(m["model"]["refinement"]["all"])
    # the trained test model writes correct kernels; the random baseline got its k valid samples
    assert m["model"]["construction"]["all"]["correct_rate"] + m["model"]["refinement"]["all"]["correct_rate"] > 0
    rnd = m["random"]["construction"]["all"]
    assert rnd["attempts"] == 3 * rnd["prompts"] and rnd["correct_rate"] > 0
    assert m["metaschedule_full"]["construction"]["all"]["correct_rate"] == 1.0  # harvested best: valid, correct
    given = m["given"]["refinement"]["all"]
    assert given["correct_rate"] == 1.0 and given["geomean_speedup"] == pytest.approx(1.0)
    # a copy of the given script is never an improvement
    att = res.attempts
    assert not (att["copy"] & att["improved"]).any()
    # outputs, report, figures
    for f in ("attempts.parquet", "per_prompt.parquet", "metrics.json", "summary.json"):
        assert (res.out_dir / f).is_file()
    assert res.report.is_file() and "Baselines at equal budget" in res.report.read_text()
    for png in ("fig3_speedup_by_family.png", "fig4_latency_vs_time.png"):
        assert (res.report.parent / png).stat().st_size > 1000
    assert res.summary["generation_attempts_per_s"] > 0 and "random" in res.summary["verdict_vs_random"]


def test_metrics_logged_to_mlflow_and_version_tagged(evaluations):
    import mlflow

    s = evaluations["trained"].summary
    run = mlflow.get_run(s["mlflow_run_id"])
    assert "model.construction.all.correct_rate" in run.data.metrics
    assert "random.construction.sealed.correct_rate" in run.data.metrics
    assert run.data.tags["sealed.protocol"] == s["protocol"]
    v = mlflow.MlflowClient().get_model_version(MODEL_NAME, str(s["version"]))
    assert v.tags["sealed.eval_run_id"] == s["mlflow_run_id"]
    assert float(v.tags["sealed.correct_rate"]) == pytest.approx(s["correct_rate"], rel=1e-5)
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(s["mlflow_run_id"], "report")}
    assert "report/report.md" in arts


def test_compare_counts_the_two_models(evaluations):
    from little_dragon.evaluation.compare import compare_dirs

    cmp = compare_dirs(evaluations["trained"].out_dir, evaluations["untrained"].out_dir)
    s = cmp.sentence()
    assert s.startswith(f"{MODEL_NAME}/v2 beats {MODEL_NAME}/v1 on ")
    # the barely trained model solves nothing, so it wins nothing; every prompt is counted once
    for task, c in cmp.tasks.items():
        assert c.b_wins == 0
        assert c.total == evaluations["trained"].metrics["model"][task]["all"]["prompts"]
    assert sum(c.a_wins for c in cmp.tasks.values()) >= 1


def test_compare_names_one_model_by_its_folders(evaluations, tmp_path):
    """One model evaluated twice (e.g. constrained and free decoding): the sentence names the two folders,
    not the same label twice."""
    import shutil

    from little_dragon.evaluation.compare import compare_dirs

    a, b = tmp_path / "constrained", tmp_path / "free"
    for d in (a, b):
        shutil.copytree(evaluations["trained"].out_dir, d)
    s = compare_dirs(a, b).sentence()
    assert s.startswith(f"{MODEL_NAME}/v2 (constrained) beats {MODEL_NAME}/v2 (free) on "), s


def test_promotion_gate_refuses_untrained_and_promotes_better(evaluations, eval_cfgs, tmp_path):
    from mlflow import MlflowClient

    from little_dragon.evaluation.eval_config import PromotionConfig
    from little_dragon.evaluation.promotion import promote

    cfg = PromotionConfig(history=str(tmp_path / "champion-history"), bootstrap_samples=300)
    un, tr = evaluations["untrained"].out_dir, evaluations["trained"].out_dir
    client = MlflowClient()
    d1 = promote(un, MODEL_NAME, cfg)                     # no champion: untrained writes no correct kernel
    assert not d1.promoted and "no champion yet" in d1.reason
    d2 = promote(tr, MODEL_NAME, cfg)
    assert d2.promoted, d2.reason
    assert str(client.get_model_version_by_alias(MODEL_NAME, "champion").version) == "2"
    d3 = promote(un, MODEL_NAME, cfg)                     # now against the champion: worse, refused
    assert not d3.promoted and d3.champion == f"{MODEL_NAME}/v2"
    assert str(client.get_model_version_by_alias(MODEL_NAME, "champion").version) == "2"
    assert d3.evidence["correctness_diff"]["diff"] < 0
    v1 = client.get_model_version(MODEL_NAME, "1")
    assert v1.tags["promotion.decision"] == "refused"
    hist = [json.loads(x) for x in (tmp_path / "champion-history.jsonl").read_text().splitlines()]
    assert [h["promoted"] for h in hist] == [False, True, False]
    assert (tmp_path / "champion-history.md").is_file() and (tmp_path / "champion-history.png").is_file()


def test_the_gate_compares_only_attempts_sampled_alike(evaluations, models, tmp_path):
    """A candidate whose attempts were sampled another way (here: constrained decoding) is not compared with the
    champion's evaluation: the champion is evaluated again with the candidate's decoding first (``evaluate_champion``
    gets its URI), else the gate refuses and says why.  The decoding of each evaluation is in its summary and tags."""
    import shutil

    from mlflow import MlflowClient

    from little_dragon.evaluation.eval_config import PromotionConfig
    from little_dragon.evaluation.promotion import promote
    from little_dragon.evaluation.prompts import decoding_protocol
    from little_dragon.generation.config import GenerationConfig

    cfg = PromotionConfig(history=str(tmp_path / "hist"), bootstrap_samples=300)
    tr, un = evaluations["trained"], evaluations["untrained"]
    assert promote(tr.out_dir, MODEL_NAME, cfg).reason != ""          # v2 is (or becomes) the champion
    champ = MlflowClient().get_model_version_by_alias(MODEL_NAME, "champion")
    assert champ.tags["sealed.decoding"] == tr.summary["decoding_protocol"]
    assert tr.summary["decoding"]["temperature"] == 0.0 and "constrained_line_retries" not in tr.summary["decoding"]
    # generation.max_new_tokens 0: the budget the model carries, recorded as the decoding's (what the gate compares)
    from little_dragon.script_budget import model_budget

    assert tr.summary["decoding"]["max_new_tokens"] == model_budget(models["trained"]) > 0
    assert un.summary["decoding"]["max_new_tokens"] == model_budget(models["untrained"])

    free, fid = decoding_protocol(GenerationConfig(constrained=False))
    con, cid = decoding_protocol(GenerationConfig(constrained=True))
    assert fid != cid and con["constrained"] and "constrained_line_retries" in con and "constrained_line_retries" not in free
    assert "constrained_finish_back" in con and "constrained_finish_back" not in free
    assert decoding_protocol(GenerationConfig(constrained=True, constrained_finish_back=0))[1] != cid  # ends differ
    cand = tmp_path / "untrained-constrained"
    shutil.copytree(un.out_dir, cand)
    summary = json.loads((cand / "summary.json").read_text())
    summary.update(decoding=con, decoding_protocol=cid)
    (cand / "summary.json").write_text(json.dumps(summary))
    asked: list[str] = []
    d = promote(cand, MODEL_NAME, cfg, dry_run=True, evaluate_champion=asked.append)
    assert asked == [f"models:/{MODEL_NAME}/{champ.version}"]
    assert not d.promoted and "decoding" in d.reason and cid in d.reason, d.reason
    # the same decoding as the champion's: compared (and refused on the evidence: the untrained model is worse)
    same = promote(un.out_dir, MODEL_NAME, cfg, dry_run=True, evaluate_champion=asked.append)
    assert len(asked) == 1 and "correctness_diff" in same.evidence, same.reason


def test_promote_cli_gates_several_candidates_in_order(evaluations, tmp_path, monkeypatch):
    """``dragon registry promote --eval A --eval B`` (the pipeline: SFT, then RL): each candidate is gated
    against the champion the previous decision left; the decision file holds both."""
    import argparse

    from mlflow import MlflowClient

    from little_dragon.evaluation import promote_cli

    un, tr = evaluations["untrained"].out_dir, evaluations["trained"].out_dir
    out = tmp_path / "promotion.json"
    args = argparse.Namespace(eval=[str(tr), str(un)], model_name=MODEL_NAME, dry_run=False, decision=str(out),
                              set=[f'history="{tmp_path / "hist"}"', "bootstrap_samples=300"])
    assert promote_cli.main(args) == 0
    data = json.loads(out.read_text())
    first, second = data["decisions"]
    assert first["candidate"] == f"{MODEL_NAME}/v2" and second["candidate"] == f"{MODEL_NAME}/v1"
    assert second["champion_before"] == f"{MODEL_NAME}/v2"      # gated against what the first one left
    assert not second["promoted"] and data["champion_after"] == f"{MODEL_NAME}/v2"
    assert str(MlflowClient().get_model_version_by_alias(MODEL_NAME, "champion").version) == "2"
    last = json.loads((tmp_path / "hist.jsonl").read_text().splitlines()[-1])   # (a re-gated champion is not logged)
    assert last["candidate"] == f"{MODEL_NAME}/v1" and last["promoted"] is False


def test_decide_units():
    """The gate's rule on known per-prompt tables: significantly worse, tie-but-slower, better."""
    from little_dragon.evaluation.eval_config import PromotionConfig
    from little_dragon.evaluation.promotion import decide

    cfg = PromotionConfig(bootstrap_samples=500)

    def pp(rates, best):
        return pd.DataFrame({"prompt_id": [f"p{i}" for i in range(len(rates))], "correct_rate": rates,
                             "solved": [r > 0 for r in rates], "best": best, "attempts": 4})

    champ = pp([0.5] * 10, [2.0] * 10)
    assert not decide(pp([0.0] * 10, [math.nan] * 10), champ, cfg)[0]
    assert decide(pp([1.0] * 10, [2.0] * 10), champ, cfg)[0]
    ok, reason, _ = decide(pp([0.5] * 10, [1.5] * 10), champ, cfg)
    assert not ok and "speedup lower" in reason
    assert decide(pp([0.5] * 10, [2.0] * 10), champ, cfg)[0]  # equal: not worse
    assert not decide(pp([0.0] * 3, [math.nan] * 3), None, cfg)[0]


def test_chat_endpoint_generates_like_the_local_model_and_evaluates(models, eval_cfgs, tmp_path):
    from little_dragon.evaluation.prompts import load_prompts
    from little_dragon.evaluation.stage import evaluate_model
    from little_dragon.generation.sample import generate_attempts, open_generator
    from little_dragon.generation.sources import load_weights, resolve

    ev, gen_cfg, evaluator, timing = eval_cfgs
    greedy = dataclasses.replace(gen_cfg, temperature=0.0)
    src = resolve(str(models["trained"]))
    model, tok = load_weights(src, "cpu", "float32")
    prompts = [p.prompt for p in load_prompts(ev)][:3]
    local = generate_attempts(open_generator(src, greedy), prompts, 2)
    with ChatServer(model, tok, name="tiny-dragon") as server:
        chat = open_generator(f"openai:{server.url}#tiny-dragon", greedy)
        remote = generate_attempts(chat, prompts, 2)
        # greedy decoding through HTTP gives exactly the local model's scripts
        assert [[s.strip() for s in a] for a in remote.scripts] == [[s.strip() for s in a] for a in local.scripts]
        req = server.requests[0]
        assert req["n"] == 2 and req["messages"][0]["role"] == "system"
        assert "Codec language reference" in req["messages"][0]["content"]
        # the whole evaluation through the endpoint (no baselines: those do not depend on the model)
        small = dataclasses.replace(ev, attempts=1, max_prompts_per_task=1, random_baseline=False,
                                    metaschedule_baseline=False, report_dir=str(tmp_path / "reports"))
        res = evaluate_model(f"openai:{server.url}#tiny-dragon", tmp_path / "endpoint", small, greedy, evaluator,
                             timing)
    assert res.summary["model_label"].startswith("openai:")
    assert res.metrics["model"]["construction"]["all"]["attempts"] >= 1
    assert res.summary["version"] is None  # nothing to tag in the registry


def test_optimize_writes_best_script_and_scheduled_module(models, eval_cfgs, tmp_path):
    import tvm

    from little_dragon.evaluation.optimize import optimize, table

    _, gen, evaluator, timing = eval_cfgs
    kernel = tmp_path / "my_matmul.py"
    kernel.write_text(KERNEL)
    res = optimize(str(kernel), str(models["trained"]), "llvm", 3, gen, evaluator, timing)
    assert len(res.rows) == 3 and {r["attempt"] for r in res.rows} == {0, 1, 2}
    text = table(res)
    assert "category" in text and str(res.module_path) in text
    scheduled = tvm.script.from_source(res.module_path.read_text())  # the written module parses back
    assert "main" in [g.name_hint for g in scheduled.get_global_vars()]
    if res.best is None:
        assert "baseline schedule" in text and res.script_path is None
    else:
        assert res.script_path.read_text().strip() and res.rows[res.best]["category"] == "correct"
