"""``dragon eval run|compare``: sealed-set evaluation of any model, and two evaluations compared.

    dragon eval run --model artifacts/sft --out artifacts/eval/sft --metrics monitoring/metrics/evaluate.json
    dragon eval run --model models:/little-dragon@champion --out artifacts/eval/champion
    dragon eval run --model openai:http://127.0.0.1:8000/v1#my-model --out artifacts/eval/endpoint
    dragon eval compare artifacts/eval/rl artifacts/eval/sft
"""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="sealed-set evaluation (run), two evaluations compared (compare)")
    cmds = p.add_subparsers(dest="eval_command", required=True, metavar="CMD")
    r = cmds.add_parser("run", help="evaluate a model on the sealed set, with baselines at equal budget")
    r.add_argument("--model", default="artifacts/sft",
                   help="models:/NAME@ALIAS | models:/NAME/VERSION | a run's output folder | a Hugging Face "
                        "folder | openai:BASE_URL#MODEL (default: artifacts/sft)")
    r.add_argument("--out", required=True, help="output folder (attempts.parquet, per_prompt.parquet, metrics.json, "
                                                "summary.json)")
    r.add_argument("--name", help="report name: <evaluation.report_dir>/<name>/ (default: the --out folder's name)")
    r.add_argument("--target", help="override evaluation.target (llvm, cuda, or a target JSON)")
    r.add_argument("--metrics", help="also write the headline metrics here (the DVC metrics file)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override a field of the evaluation section, e.g. --set attempts=8")
    r.add_argument("--gen-set", action="append", default=[], metavar="KEY=JSON",
                   help="override a field of the generation section, e.g. --gen-set temperature=0")
    r.set_defaults(func=main_run)
    c = cmds.add_parser("compare", help='"A beats B on X/Y construction tasks and X/Y refinement prompts"')
    c.add_argument("a", help="evaluation folder of model A")
    c.add_argument("b", help="evaluation folder of model B")
    c.add_argument("--tie-tolerance", type=float, default=0.02, help="best speedups within this ratio tie")
    c.add_argument("--json", help="also write the counts here")
    c.set_defaults(func=main_compare)


def load_configs(eval_overrides: list[str] = (), gen_overrides: list[str] = (), target: str | None = None):
    from little_dragon.config import load_section, parse_overrides
    from little_dragon.tvmx import target as tgt

    import dataclasses

    from little_dragon.config import deep_merge

    ov = parse_overrides(list(eval_overrides))
    cfg = load_section("evaluation", overrides=ov or None)
    if target:
        # --target replaces the whole target (as `dragon harvest --target`): deep-merged into the llvm default,
        # `cuda` kept its "num-cores" and TVM refused the target on the H200; --set target.KEY still applies
        cfg = dataclasses.replace(cfg, target=deep_merge(tgt.normalize(target), ov.get("target") or {}))
    return (cfg, load_section("generation", overrides=parse_overrides(list(gen_overrides)) or None),
            load_section("evaluator"), load_section("timing"))


def main_run(args: argparse.Namespace) -> int:
    from little_dragon import atomic
    from little_dragon.evaluation.stage import evaluate_model, headline

    cfg, gen_cfg, ev_cfg, timing = load_configs(args.set, args.gen_set, args.target)
    res = evaluate_model(args.model, args.out, cfg, gen_cfg, ev_cfg, timing, name=args.name)
    if args.metrics:
        atomic.write_json(args.metrics, headline(res.metrics, res.summary), indent=1)
    print(json.dumps({k: res.summary.get(k) for k in ("model_label", "prompts", "attempts", "correct_rate",
                                                      "geomean_speedup", "generation_attempts_per_s",
                                                      "verdict_vs_random", "mlflow_run_id")}, default=str))
    print(f"report: {res.report}")
    return 0


def main_compare(args: argparse.Namespace) -> int:
    from little_dragon import atomic
    from little_dragon.evaluation.compare import compare_dirs

    cmp = compare_dirs(args.a, args.b, args.tie_tolerance)
    print(cmp.sentence())
    if args.json:
        atomic.write_json(args.json, cmp.as_dict(), indent=1)
    return 0
