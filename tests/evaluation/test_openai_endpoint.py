"""The general-purpose-LLM baseline path: the same evaluation through a real OpenAI-compatible HTTP endpoint
(a loopback server that serves our own trained tiny model)."""
from __future__ import annotations

import dataclasses

from chat_server import ChatServer


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
