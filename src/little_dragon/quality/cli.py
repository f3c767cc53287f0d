"""``dragon quality check --suite workloads|harvest|examples``: a data-quality gate of the pipeline.

Exit status 1 when an expectation fails (the DVC stage fails), with every failed expectation and its
offending rows printed; Data Docs and the metrics file are written either way.
"""
from __future__ import annotations

import json
import logging
import sys

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    from little_dragon.quality.suites import SUITES

    p = sub.add_parser("quality", help="Great Expectations gates over workloads, harvest records and examples")
    qsub = p.add_subparsers(dest="quality_command", required=True, metavar="ACTION")
    c = qsub.add_parser("check", help="run one suite's checkpoints, build its Data Docs, fail on a violation")
    c.add_argument("--suite", required=True, choices=sorted(SUITES), help="which data to check")
    c.add_argument("--metrics", help="metrics JSON path (default: <quality.metrics_dir>/quality_<suite>.json)")
    c.set_defaults(func=main)


def main(args) -> int:
    from pathlib import Path

    from little_dragon import atomic, tracking
    from little_dragon.config import flat_params, load_section
    from little_dragon.quality.gate import build_frames, run_suite

    ds = load_section("datasets")
    qc = load_section("quality")
    metrics_path = Path(args.metrics or Path(qc.metrics_dir) / f"quality_{args.suite}.json")
    with tracking.stage_run(f"quality-{args.suite}", params={**flat_params(qc), "suite": args.suite},
                            tags={"suite": args.suite}) as mlf:
        frames = build_frames(args.suite, ds, qc)
        result = run_suite(args.suite, frames, ds, qc)
        metrics = result.metrics()
        atomic.write_json(metrics_path, metrics)
        if mlf is not None:
            mlf.log_metrics({"success": float(result.success), "expectations": metrics["expectations"],
                             "failed_expectations": metrics["failed"],
                             **{f"rows.{k}": v for k, v in result.rows.items()}})
            mlf.log_dict(metrics, f"quality_{args.suite}.json")
            if not result.success:
                mlf.set_tag("quality_failure", result.failure_message(qc.max_reported_rows)[:5000])
    if not result.success:
        print(f"dragon quality: {result.failure_message(qc.max_reported_rows)}", file=sys.stderr)
        return 1
    print(json.dumps({"suite": args.suite, "success": True, "expectations": metrics["expectations"],
                      "rows": result.rows, "data_docs": str(result.docs_index)}))
    return 0
