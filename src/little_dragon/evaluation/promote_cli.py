"""``dragon registry promote``: the promotion gate (the pipeline's last stage)."""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("registry", help="model registry: the promotion gate")
    cmds = p.add_subparsers(dest="registry_command", required=True, metavar="CMD")
    r = cmds.add_parser("promote", help="move @champion to the evaluated candidate only when it is not worse")
    r.add_argument("--eval", default="artifacts/eval/sft", help="the candidate's evaluation folder (dragon eval run)")
    r.add_argument("--model-name", help="registered model (default: project.model_name)")
    r.add_argument("--dry-run", action="store_true", help="decide and print, change nothing")
    r.add_argument("--decision", help="also write the decision here (JSON)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a promotion field")
    r.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from little_dragon import atomic
    from little_dragon.config import load_section, parse_overrides
    from little_dragon.evaluation.promotion import promote

    cfg = load_section("promotion", overrides=parse_overrides(args.set) or None)
    name = args.model_name or load_section("project").model_name
    def evaluate_champion(uri: str) -> None:
        """The champion under the candidate's protocol: the same evaluation, into <eval>/../champion."""
        from pathlib import Path

        from little_dragon.evaluation.cli import load_configs
        from little_dragon.evaluation.stage import evaluate_model

        summary = json.loads((Path(args.eval) / "summary.json").read_text())
        ecfg, gen, ev, timing = load_configs(target=summary["target"])
        evaluate_model(uri, Path(args.eval).parent / "champion", ecfg, gen, ev, timing, name="champion")

    d = promote(args.eval, name, cfg, dry_run=args.dry_run, evaluate_champion=evaluate_champion)
    out = {"promoted": d.promoted, "candidate": d.candidate, "champion_before": d.champion, "reason": d.reason}
    if args.decision:
        atomic.write_json(args.decision, {**out, "evidence": d.evidence}, indent=1, default=str)
    print(json.dumps(out))
    return 0
