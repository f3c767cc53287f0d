"""Prompt screening and probes: K rollouts per prompt from a policy, scored by the evaluator.

Screening keeps the prompts whose rollouts disagree (at least two distinct rewards, not all failing): a
group of identical rewards has zero advantage and teaches nothing.  The same rollout-and-score routine is
the probe of the RL curves (ten rollouts per prompt: mean utility = shaped reward, correctness)."""
from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from typing import Any, Sequence

from little_dragon.training.reward import KernelReward, Scored

log = logging.getLogger(__name__)


def rollouts(model: Any, tokenizer: Any, prompts: Sequence[dict[str, Any]], k: int, reward: KernelReward,
             max_new_tokens: int, temperature: float, batch_size: int) -> tuple[list[list[Scored | None]], dict]:
    """``k`` sampled scripts per prompt row, scored; also the seconds spent generating and scoring."""
    from little_dragon.training.callbacks import sample_scripts

    flat = [p for p in prompts for _ in range(k)]
    t0 = time.perf_counter()
    scripts = sample_scripts(model, tokenizer, [p["prompt"] for p in prompts], max_new_tokens, temperature,
                             batch_size, num_return_sequences=k)  # prompt-major: k per prompt, in order
    t1 = time.perf_counter()
    scored = reward.score(scripts, [p["tvmscript"] for p in flat], [p["task"] for p in flat],
                          [p.get("start_script") or "" for p in flat])
    t2 = time.perf_counter()
    groups = [scored[i * k:(i + 1) * k] for i in range(len(prompts))]
    return groups, {"generation_s": t1 - t0, "reward_s": t2 - t1, "scripts": len(flat)}


def group_stats(group: Sequence[Scored | None]) -> dict[str, Any]:
    done = [s for s in group if s is not None]
    rewards = [s.reward for s in done]
    return {"n": len(done),
            "mean_reward": statistics.fmean(rewards) if rewards else None,
            "std_reward": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "distinct_rewards": len(set(rewards)),
            "correct_rate": sum(s.correct for s in done) / len(done) if done else None,
            "categories": dict(Counter(s.category for s in done)),
            "copies": sum(s.copy for s in done)}


def screen_prompts(model: Any, tokenizer: Any, prompts: list[dict[str, Any]], reward: KernelReward, k: int,
                   min_distinct: int, min_keep: int, max_new_tokens: int, temperature: float,
                   batch_size: int) -> dict[str, Any]:
    """The screen: per-prompt statistics, which prompts are kept, and why."""
    groups, timing = rollouts(model, tokenizer, prompts, k, reward, max_new_tokens, temperature, batch_size)
    rows = []
    for p, g in zip(prompts, groups):
        st = group_stats(g)
        all_failed = st["n"] > 0 and not any(s is not None and s.correct for s in g)
        varied = st["distinct_rewards"] >= min_distinct
        keep = bool(st["n"]) and varied and not all_failed
        reason = "kept" if keep else ("no reward" if not st["n"] else "all failed" if all_failed and not varied
                                      else "all failed (varied penalties)" if all_failed else "identical rewards")
        rows.append({"prompt_id": p["prompt_id"], "workload_id": p["workload_id"], "task": p["task"],
                     "name": p.get("name"), **st, "kept": keep, "filled": False, "reason": reason})
    kept = [r for r in rows if r["kept"]]
    if len(kept) < min_keep:
        # a weak start model: fill with the most varied remaining prompts (then the most correct), marked
        rest = sorted((r for r in rows if not r["kept"] and r["n"]),
                      key=lambda r: (r["distinct_rewards"], r["std_reward"], r["correct_rate"] or 0.0,
                                     -r["prompt_id"]), reverse=True)
        for r in rest[:min_keep - len(kept)]:
            r["kept"], r["filled"] = True, True
    kept = [r for r in rows if r["kept"]]
    summary = {"candidates": len(rows), "kept": len(kept), "filled": sum(r["filled"] for r in rows),
               "rollouts_per_prompt": k, "min_distinct": min_distinct,
               "kept_by_task": dict(Counter(r["task"] for r in kept)),
               "candidates_by_task": dict(Counter(r["task"] for r in rows)),
               "correct_rate": _mean([r["correct_rate"] for r in rows]),
               "mean_reward": _mean([r["mean_reward"] for r in rows]), **timing}
    log.info("screen: kept %d of %d prompts (%d filled), %.0f s generating, %.0f s scoring", len(kept), len(rows),
             summary["filled"], timing["generation_s"], timing["reward_s"])
    return {"summary": summary, "prompts": rows}


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def probe(model: Any, tokenizer: Any, prompts: list[dict[str, Any]], reward: KernelReward, k: int,
          max_new_tokens: int, temperature: float, batch_size: int) -> dict[str, Any]:
    """Ten-rollout (``k``) mean utility and correctness, overall, per task and per prompt."""
    groups, timing = rollouts(model, tokenizer, prompts, k, reward, max_new_tokens, temperature, batch_size)
    per_prompt = {}
    by_task: dict[str, list[Scored]] = {}
    flat: list[Scored] = []
    for p, g in zip(prompts, groups):
        done = [s for s in g if s is not None]
        flat.extend(done)
        by_task.setdefault(p["task"], []).extend(done)
        per_prompt[str(p["prompt_id"])] = {"utility": _mean([s.reward for s in done]),
                                           "correct": _mean([float(s.correct) for s in done])}
    out: dict[str, Any] = {"utility": _mean([s.reward for s in flat]),
                           "correctness": _mean([float(s.correct) for s in flat]),
                           "copy_rate": _mean([float(s.copy) for s in flat]), "per_prompt": per_prompt, **timing}
    for t, ss in by_task.items():
        out[f"utility_{t}"] = _mean([s.reward for s in ss])
        out[f"correctness_{t}"] = _mean([float(s.correct) for s in ss])
    return out
