"""``dragon train sft``: the SFT stage from the command line (DVC runs this; ``train_sft`` does the work).

It reads ``generation.constrained`` too: when true it injects the constrained sampler into the SFT
validity passes (``validity_sampler``; training itself cannot import generation)."""
from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from little_dragon.training.callbacks import ValiditySampler


def add_parser(sub: argparse._SubParsersAction) -> None:
    from little_dragon.config import add_set_option

    p = sub.add_parser("train", help="train the model (sft, rl)")
    stages = p.add_subparsers(dest="train_stage", required=True, metavar="STAGE")
    s = stages.add_parser("sft", help="supervised fine-tuning on the construction + refinement sets")
    s.add_argument("--train", help="training set, prompt/completion JSONL (default: <params datasets.out_dir>/train.jsonl)")
    s.add_argument("--val", help="validation set, JSONL (default: <params datasets.out_dir>/validation.jsonl)")
    s.add_argument("--out", help="output folder: model/ and metrics.json (default: params sft.out_dir)")
    add_set_option(s, "sft")  # e.g. --set max_steps=10 --set model.kind=gguf
    s.set_defaults(func=main)
    r = stages.add_parser("rl", help="GRPO on the evaluator's measured reward, from the SFT model")
    r.add_argument("--train", help="prompt pool, the training set JSONL (default: <params datasets.out_dir>/train.jsonl)")
    r.add_argument("--model", default="artifacts/sft/model",
                   help="start model: a model dir (the sft stage's model/) or models:/NAME/VERSION")
    r.add_argument("--out", default="artifacts/rl", help="output folder: model/, screen.json, metrics.json, checkpoints/")
    r.add_argument("--plot", help="probe curves PNG (ten-rollout mean utility and correctness per step)")
    r.add_argument("--curves", help="probe curves as JSON rows (DVC plots)")
    add_set_option(r, "rl")  # e.g. --set max_steps=20 --set target='{"kind": "cuda", "arch": "sm_90"}'
    r.set_defaults(func=main_rl)


def main_rl(args: argparse.Namespace) -> int:
    from pathlib import Path

    from little_dragon.config import load_section
    from little_dragon.training.rl import train_rl

    cfg = load_section("rl", overrides=args.set)
    train = args.train or str(Path(load_section("datasets").out_dir) / "train.jsonl")
    if not os.path.exists(train):
        raise FileNotFoundError(f"{train}: RL prompt pool not found (run the dataset stage first)")
    metrics = train_rl(cfg, train, args.model, args.out, plot_png=args.plot, plot_json=args.curves)
    print(json.dumps({k: metrics.get(k) for k in ("steps", "probe_utility_start", "probe_utility_end",
                                                  "probe_correctness_start", "probe_correctness_end",
                                                  "reward_share", "registry")}, default=str))
    return 0


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from little_dragon.config import load_section
    from little_dragon.training.sft import train_sft

    cfg = load_section("sft", overrides=args.set)
    data_dir = Path(load_section("datasets").out_dir)
    train, val = args.train or str(data_dir / "train.jsonl"), args.val or str(data_dir / "validation.jsonl")
    for p in (train, val):
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p}: SFT input not found (run the dataset stage first)")
    sampler = validity_sampler(load_section("generation").constrained)
    metrics = train_sft(cfg, train, val, args.out or cfg.out_dir, validity_sampler=sampler)
    key = f"_{sampler.name}" if sampler is not None else ""
    print(json.dumps({k: metrics.get(k) for k in ("steps", "tokens_per_s", "eval_loss", f"validity_rate{key}",
                                                  f"validity_rate_untrained{key}", "registry")}, default=str))
    return 0


def validity_sampler(constrained: bool) -> ValiditySampler | None:
    """The SFT validity passes' sampler for ``generation.constrained`` (issue 16): None (free sampling) or
    ``generation.validity.ConstrainedValiditySampler``.  Injected here, above both layers: training cannot
    import generation (tests/test_layers.py)."""
    if not constrained:
        return None
    from little_dragon.generation.validity import ConstrainedValiditySampler

    return ConstrainedValiditySampler()
