"""The evaluator inside RL: uncached scripts/s and cache hits on real policy rollouts, per timing protocol and
pool size (ratios side by side), and the GRPO step time split into generation, reward and update.

    .venv/bin/python benchmarks/rl_reward_bench.py --model artifacts/sft/model           # CPU, llvm
    .venv/bin/python benchmarks/rl_reward_bench.py --model M --target cuda --pool-sizes 4,8 \\
        --reward-devices 1                                                             # 2x H200 host

Part A samples ``--scripts`` completions from the model on training prompts (as one GRPO generation batch
would), then scores the same scripts under each (protocol, pool size) with a fresh cache: uncached
scripts/s, then again for the cache-hit time.  Part B runs ``--steps`` real GRPO steps (the rl stage's
function, MLflow off) and reports the per-step split.  One JSON summary on stdout (``--out`` too), a table
on stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _rollouts(model_dir: str, train: str, kind: str, n: int, max_new_tokens: int, seed: int) -> tuple[list, list]:
    import torch

    from little_dragon.training import data as sft_data
    from little_dragon.training.callbacks import sample_scripts
    from little_dragon.training.rl import load_start_model, prompt_pool

    torch.manual_seed(seed)
    model, tok, _, _ = load_start_model(model_dir)
    if torch.cuda.is_available():
        model.to("cuda:0")
    pool = prompt_pool(sft_data.read_rows(train), kind, 0, seed)
    per = 4  # a GRPO group's worth of completions per prompt
    prompts = [pool[i % len(pool)] for i in range(max(1, n // per))]
    t0 = time.perf_counter()
    scripts = sample_scripts(model, tok, [p["prompt"] for p in prompts], max_new_tokens, 1.0, 32,
                             num_return_sequences=per)
    gen_s = time.perf_counter() - t0
    rows = [p for p in prompts for _ in range(per)]
    return list(zip(scripts, rows)), [gen_s]


def _score_once(items: list, target: dict, pool_size: int, timing: object, cache: str) -> dict:
    from little_dragon.config import load_section
    from little_dragon.evaluator.pool import Evaluator
    from little_dragon.training.reward import KernelReward

    ecfg = dataclasses.replace(load_section("evaluator"), pool_size=pool_size, cache_path=cache)
    t0 = time.perf_counter()
    with KernelReward(lambda: Evaluator(target, ecfg, timing), ecfg.reward, 0.0) as kr:
        start_s = time.perf_counter() - t0
        args = ([s for s, _ in items], [r["tvmscript"] for _, r in items], [r["task"] for _, r in items],
                [r["start_script"] for _, r in items])
        t1 = time.perf_counter()
        first = kr.score(*args)
        cold = time.perf_counter() - t1
        t2 = time.perf_counter()
        kr.score(*args)
        warm = time.perf_counter() - t2
    done = [s for s in first if s is not None]
    distinct = len({(s, r["tvmscript"], r["start_script"]) for s, r in items})
    return {"pool_size": pool_size, "timing": dataclasses.asdict(timing), "pool_start_s": start_s,
            "scripts": len(items), "distinct": distinct, "cold_s": cold,
            "scripts_per_s": len(items) / cold, "distinct_per_s": distinct / cold,
            "cache_hit_ms": 1000 * warm / len(items),
            "correct_rate": sum(s.correct for s in done) / max(len(done), 1),
            "categories": {c: sum(s.category == c for s in done) for c in sorted({s.category for s in done})}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="artifacts/sft/model", help="start model dir (the sft stage's model/)")
    ap.add_argument("--train", default="artifacts/datasets/train.jsonl", help="prompt pool (training JSONL)")
    ap.add_argument("--target", default=None, help="target JSON or llvm|cuda (default: params rl.target)")
    ap.add_argument("--scripts", type=int, default=32, help="rollouts scored in part A")
    ap.add_argument("--max-new-tokens", type=int, default=768)
    ap.add_argument("--pool-sizes", default="1,2", help="evaluator pool sizes compared in part A")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps in part B (0: skip)")
    ap.add_argument("--reward-devices", default="", help="CUDA_VISIBLE_DEVICES of the evaluator workers")
    ap.add_argument("--set", action="append", default=[], help="rl section overrides for part B (KEY=VALUE)")
    ap.add_argument("--out", help="also write the JSON summary here")
    args = ap.parse_args()
    os.environ.setdefault("DRAGON_NO_MLFLOW", "1")

    from little_dragon.config import load_section
    from little_dragon.training.rl import place_reward_devices, reward_timing
    from little_dragon.tvmx import target as tgt

    rl = load_section("rl", overrides=args.set)
    target = tgt.normalize(args.target or rl.target)
    if args.target:
        rl = dataclasses.replace(rl, target=target)
    full, cheap = load_section("timing"), reward_timing(rl)
    if cheap == full:  # show what a cheaper training protocol buys even when params.yaml keeps the full one
        cheap = dataclasses.replace(full, repeat=3, min_repeat_ms=5)
    summary: dict = {"target": target, "model": args.model}
    items, gen = _rollouts(args.model, args.train, target["kind"], args.scripts, args.max_new_tokens, rl.seed)
    summary["generation_s"] = gen[0]
    place_reward_devices(args.reward_devices)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, timing) in enumerate((("full", full), ("reward", cheap))):
            for p in [int(x) for x in args.pool_sizes.split(",")]:
                r = _score_once(items, target, p, timing, str(Path(tmp) / f"cache-{i}-{p}.sqlite"))
                r["protocol"] = name
                rows.append(r)
    summary["throughput"] = rows

    if args.steps > 0:
        from little_dragon.training.rl import train_rl

        with tempfile.TemporaryDirectory() as tmp:
            cfg = dataclasses.replace(rl, max_steps=args.steps, register=False, resume=False,
                                      reward_devices=args.reward_devices or rl.reward_devices)
            ecfg = dataclasses.replace(load_section("evaluator"), cache_path=str(Path(tmp) / "cache.sqlite"))
            m = train_rl(cfg, args.train, args.model, Path(tmp) / "rl", evaluator_cfg=ecfg)
        steps = m["per_step"]
        split = {k: statistics.fmean(s.get(f"time/{k}", 0.0) for s in steps)
                 for k in ("generation_s", "reward_s", "update_s")}
        summary["grpo"] = {"steps": m["steps"], "per_step_s": split, "reward_share": m["reward_share"],
                           "completions_per_step": cfg.prompts_per_step * cfg.num_generations,
                           "evaluator": m["evaluator"], "screen_s": {k: m["screen"].get(k) for k in
                                                                     ("generation_s", "reward_s", "scripts")}}

    base = rows[0]["scripts_per_s"]
    print(f"{'protocol':8} {'pool':>4} {'scripts/s':>9} {'x full/1':>8} {'distinct/s':>10} {'hit ms':>7} "
          f"{'correct':>7} {'start s':>7}", file=sys.stderr)
    for r in rows:
        print(f"{r['protocol']:8} {r['pool_size']:>4} {r['scripts_per_s']:>9.2f} {r['scripts_per_s'] / base:>8.2f} "
              f"{r['distinct_per_s']:>10.2f} {r['cache_hit_ms']:>7.1f} {r['correct_rate']:>7.2f} "
              f"{r['pool_start_s']:>7.1f}", file=sys.stderr)
    if "grpo" in summary:
        g = summary["grpo"]
        ps = g["per_step_s"]
        tot = sum(ps.values())
        print(f"GRPO step ({g['completions_per_step']} completions): generation {ps['generation_s']:.1f} s "
              f"({ps['generation_s'] / tot:.0%}), reward {ps['reward_s']:.1f} s ({ps['reward_s'] / tot:.0%}), "
              f"update {ps['update_s']:.1f} s ({ps['update_s'] / tot:.0%}); evaluator "
              f"{g['evaluator']['uncached_scripts_per_s'] or 0:.2f} uncached scripts/s, "
              f"cache hits {g['evaluator']['cache_hit_rate'] or 0:.0%}", file=sys.stderr)
    text = json.dumps(summary, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
