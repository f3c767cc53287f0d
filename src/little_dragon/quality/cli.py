"""``dragon quality check --suite workloads|harvest|examples``: a data-quality gate of the pipeline.

Exit status 1 when an expectation fails (the DVC stage fails), with every failed expectation and its
offending rows printed; Data Docs and the metrics file are written either way (``quality_stage``).
"""
from __future__ import annotations

import json
import sys


def add_parser(sub) -> None:
    from little_dragon.config import add_set_option
    from little_dragon.quality.suites import SUITES

    p = sub.add_parser("quality", help="Great Expectations gates over workloads, harvest records and examples")
    qsub = p.add_subparsers(dest="quality_command", required=True, metavar="ACTION")
    c = qsub.add_parser("check", help="run one suite's checkpoints, build its Data Docs, fail on a violation")
    c.add_argument("--suite", required=True, choices=sorted(SUITES), help="which data to check")
    c.add_argument("--metrics", help="metrics JSON path (default: <quality.metrics_dir>/quality_<suite>.json)")
    add_set_option(c, "quality")
    c.set_defaults(func=main)
    from little_dragon.quality.drift_cli import add_parser as add_drift_parser

    add_drift_parser(qsub)


def main(args) -> int:
    from little_dragon.config import load_section
    from little_dragon.quality.stage import quality_stage

    qc = load_section("quality", overrides=args.set)
    result = quality_stage(args.suite, load_section("datasets"), qc, args.metrics)
    if not result.success:
        print(f"dragon quality: {result.failure_message(qc.max_reported_rows)}", file=sys.stderr)
        return 1
    print(json.dumps({"suite": args.suite, "success": True, "expectations": len(result.outcomes),
                      "rows": result.rows, "data_docs": str(result.docs_index)}))
    return 0
