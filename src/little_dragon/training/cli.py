"""``dragon train sft``: the SFT stage from the command line (DVC runs this)."""
from __future__ import annotations

import argparse
import json
import os


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the model (sft)")
    stages = p.add_subparsers(dest="train_stage", required=True, metavar="STAGE")
    s = stages.add_parser("sft", help="supervised fine-tuning on the construction + refinement sets")
    s.add_argument("--train", default="artifacts/datasets/train.jsonl", help="training set (prompt/completion JSONL)")
    s.add_argument("--val", default="artifacts/datasets/validation.jsonl", help="validation set (JSONL)")
    s.add_argument("--out", default="artifacts/sft", help="output folder: model/ and metrics.json")
    s.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override a field of the sft section, e.g. --set max_steps=10 --set model.kind=gguf")
    s.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from little_dragon.config import load_section, read_params
    from little_dragon.training.sft import train_sft

    from little_dragon.cli import parse_overrides

    overrides = parse_overrides(args.set)
    raw = dict(read_params().get("sft") or {})
    for k, v in overrides.items():  # nested sections merge key by key
        raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) and isinstance(raw.get(k), dict) else v
    cfg = load_section("sft", overrides=raw)
    for p in (args.train, args.val):
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p}: SFT input not found (run the dataset stage first)")
    metrics = train_sft(cfg, args.train, args.val, args.out)
    print(json.dumps({k: metrics.get(k) for k in ("steps", "tokens_per_s", "eval_loss", "validity_rate",
                                                  "validity_rate_untrained", "registry")}, default=str))
    return 0
