"""``dragon registry promote``: the promotion gate (the pipeline's last stage)."""
from __future__ import annotations

import argparse
import dataclasses
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("registry", help="model registry: the promotion gate")
    cmds = p.add_subparsers(dest="registry_command", required=True, metavar="CMD")
    r = cmds.add_parser("promote", help="move @champion to the evaluated candidate only when it is not worse")
    r.add_argument("--eval", action="append", default=None, metavar="DIR",
                   help="a candidate's evaluation folder (dragon eval run; default artifacts/eval/sft); repeat it to "
                        "gate several candidates in order, each against the champion the previous one left (the "
                        "pipeline gates the SFT model, then the RL model trained from it)")
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
    evals = args.eval or ["artifacts/eval/sft"]
    decisions = []
    for eval_dir in evals:
        def evaluate_champion(uri: str, eval_dir: str = eval_dir) -> None:
            """The champion under the candidate's protocol and decoding: the same evaluation, into <eval>/../champion."""
            from pathlib import Path

            from little_dragon.evaluation.cli import load_configs
            from little_dragon.evaluation.stage import evaluate_model

            summary = json.loads((Path(eval_dir) / "summary.json").read_text())
            ecfg, gen, ev, timing = load_configs(target=summary["target"])
            # sampled as the candidate's attempts were (its --gen-set overrides included)
            gen = dataclasses.replace(gen, **summary.get("decoding", {}))
            evaluate_model(uri, Path(eval_dir).parent / "champion", ecfg, gen, ev, timing, name="champion")

        d = promote(eval_dir, name, cfg, dry_run=args.dry_run, evaluate_champion=evaluate_champion)
        decisions.append({"eval": eval_dir, "promoted": d.promoted, "candidate": d.candidate,
                          "champion_before": d.champion, "reason": d.reason, "evidence": d.evidence})
        print(json.dumps({k: v for k, v in decisions[-1].items() if k != "evidence"}))
    if args.decision:
        # one candidate: its decision (the metrics file's shape since the gate exists); several: all of them
        out = decisions[0] if len(decisions) == 1 else {
            "promoted": any(d["promoted"] for d in decisions),
            "champion_after": next((d["candidate"] for d in reversed(decisions) if d["promoted"]),
                                   decisions[0]["champion_before"]),
            "decisions": decisions}
        atomic.write_json(args.decision, out, indent=1, default=str)
    return 0
