"""``dragon evaluate --workload W --script FILE [--target T]``: one script -> exactly one JSON object.

W is a workload id from the store or a TVMScript file.  Whatever the input (a broken script, a missing
file, an unknown workload), stdout gets one JSON object with ``category``, ``message``, ``latency_us``,
``baseline_us``, ``speedup`` and ``reward``; inputs the evaluator cannot even start on get the category
``input_error`` (exit 2), evaluator bugs ``internal_error`` (exit 1), never a traceback.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="score one optimisation script: correctness, latency, reward (JSON)")
    p.add_argument("--workload", required=True, help="workload id (w + 16 hex) or a TVMScript file")
    p.add_argument("--script", required=True, help="file with the script to evaluate ('-' for stdin)")
    p.add_argument("--target", default="llvm", help="llvm | cuda | a target dict as JSON (default llvm)")
    p.add_argument("--reference-script", help="refinement: speedup is against this script's latency")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    p.add_argument("--pool-size", type=int, default=1, help="worker processes (default 1 for one script)")
    p.set_defaults(func=main)


def _failure(category: str, message: str) -> dict[str, Any]:
    return {"category": category, "message": message, "latency_us": None, "baseline_us": None,
            "speedup": None, "reward": None}


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def run(args) -> tuple[dict[str, Any], int]:
    try:
        from little_dragon.config import load_section
        from little_dragon.tvmx import target as tgt

        cfg = load_section("evaluator")
        timing_cfg = load_section("timing")
        target = tgt.normalize(args.target)
        script = _read(args.script)
        reference = _read(args.reference_script) if args.reference_script else None
        from little_dragon.workloads.store import get_workload

        _, mod = get_workload(args.workload)
    except Exception as e:  # noqa: BLE001  anything about the inputs: report, do not trace back
        return _failure("input_error", f"{type(e).__name__}: {e}"), 2
    try:
        from little_dragon.evaluator.pool import Evaluator

        overrides = {"pool_size": max(1, args.pool_size)}
        if args.no_cache:
            overrides["cache_path"] = ""
        cfg = dataclasses.replace(cfg, **overrides)
        with Evaluator(target, cfg, timing_cfg) as ev:
            result = ev.evaluate(mod, script, reference)
        return result.as_dict(), 0
    except Exception as e:  # noqa: BLE001
        return _failure("internal_error", f"{type(e).__name__}: {e}"), 1


def main(args) -> int:
    out, code = run(args)
    print(json.dumps(out, sort_keys=True, default=str))
    sys.stdout.flush()
    return code
