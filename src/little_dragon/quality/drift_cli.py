"""``dragon quality drift``: the newest harvest batch against the training data (stage ``drift``).

Exit status 1 when the batch drifted and ``drift.enforce`` is on, with the failing expectation named and
what to do; the report (``monitoring/drift/README.md``), plot and metrics are written either way."""
from __future__ import annotations

import json
import sys


def add_parser(qsub) -> None:
    from little_dragon.config import add_set_option

    d = qsub.add_parser("drift", help="newest harvest vs training data: family mix, shapes, latency, codec "
                                      "lengths, failure rates (GX suite `drift` + report)")
    add_set_option(d, "drift")
    d.set_defaults(func=main)


def main(args) -> int:
    from little_dragon.config import load_section
    from little_dragon.quality.drift_stage import drift_stage

    cfg = load_section("drift", overrides=args.set)
    res = drift_stage(cfg, load_section("datasets"), load_section("quality"), load_section("harvest").target)
    if not res.success:
        print(f"dragon quality drift: {res.message}", file=sys.stderr)
        return 1
    if res.message:  # drifted, reported only
        print(f"dragon quality drift: warning: {res.message}", file=sys.stderr)
    print(json.dumps({"verdict": res.metrics["verdict"], "report": str(res.report),
                      "family_kl": res.metrics["family_kl"], "batch_workloads": res.metrics["batch_workloads"]}))
    return 0
