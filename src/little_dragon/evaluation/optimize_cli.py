"""``dragon optimize KERNEL.py``: the champion writes k scripts for your kernel; the best verified one is kept."""
from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("optimize", help="optimize a TVMScript kernel (file or workload id) with a model")
    p.add_argument("kernel", help="a TVMScript file (one PrimFunc) or a workload id from the store")
    p.add_argument("--target", default="llvm", help="llvm | cuda | a target JSON (default llvm)")
    p.add_argument("--attempts", type=int, default=8, help="k scripts to write and verify")
    p.add_argument("--model", default=None, help="model source (default: models:/<project.model_name>@champion)")
    p.add_argument("--out", help="where the best script and scheduled module go (default: beside the kernel)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from little_dragon.config import load_section
    from little_dragon.evaluation.optimize import check_target, load_kernel, optimize, table

    check_target(args.target)      # one-line errors before any model is loaded
    load_kernel(args.kernel)
    model = args.model or f"models:/{load_section('project').model_name}@{load_section('promotion').alias}"
    res = optimize(args.kernel, model, args.target, args.attempts, load_section("generation"),
                   load_section("evaluator"), load_section("timing"), out_dir=args.out)
    print(table(res))
    return 0
