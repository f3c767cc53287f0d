"""Score given scripts on their workloads with the project's Evaluator (the judge of the sealed evaluation): one row
per script in, one verdict per script out.  For paired re-scoring of an evaluation's attempts after a change to how
they end (results/constrained-decoding.md, session 21: the H200 attempts that ended as host code, scored again as the
constraint now ends them), on a machine with the target's device.

    python benchmarks/score_scripts.py --workloads artifacts/sealed/workloads.parquet --scripts rows.jsonl \
        --target cuda --out scored.jsonl

``--scripts``: JSON lines with ``workload_id`` and ``script`` (other keys are copied to the output).  ``--out``: the
same rows with the Evaluator's ``category``, ``message``, ``latency_us`` and ``speedup``; a table of categories is
printed.  Each script is scored once, in one batch (the Evaluator's pool builds in parallel, times one at a time).

Merging (no device needed): ``--merge SCORED --into ATTEMPTS --merged DIR`` writes DIR/attempts.parquet, the
evaluation's attempts with the rows of SCORED (matched by ``prompt_id`` and ``attempt``) taking their new script and
verdict, and DIR/summary.json with its correct rate and geomean speedup recomputed (``rescored`` says how many rows).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", help="a workloads parquet with workload_id and tvmscript")
    ap.add_argument("--scripts", help="JSON lines: workload_id, script (and anything else)")
    ap.add_argument("--target", default="llvm", help="llvm | cuda | a target as JSON")
    ap.add_argument("--out", help="JSON lines written: each row and its verdict")
    ap.add_argument("--merge", type=Path, help="scored JSON lines (--out of a run) to merge into --into")
    ap.add_argument("--into", type=Path, help="an evaluation's attempts.parquet")
    ap.add_argument("--merged", type=Path, help="folder written: attempts.parquet and summary.json")
    args = ap.parse_args(argv)
    if args.merge:
        if not (args.into and args.merged):
            ap.error("--merge needs --into and --merged")
        return merge(args.merge, args.into, args.merged)
    if not (args.workloads and args.scripts and args.out):
        ap.error("scoring needs --workloads, --scripts and --out")

    import pandas as pd

    from little_dragon import atomic
    from little_dragon.config import load_section
    from little_dragon.evaluator.pool import EvalRequest, Evaluator

    source = pd.read_parquet(args.workloads).set_index("workload_id")["tvmscript"]
    rows = [json.loads(line) for line in Path(args.scripts).read_text().splitlines() if line.strip()]
    missing = sorted({r["workload_id"] for r in rows} - set(source.index))
    if missing:
        print(f"{args.scripts}: workloads not in {args.workloads}: {missing[:5]}", file=sys.stderr)
        return 2
    with Evaluator(args.target, load_section("evaluator"), load_section("timing")) as ev:
        results = ev.evaluate_batch([EvalRequest(source[r["workload_id"]], r["script"]) for r in rows])
    out = []
    for r, res in zip(rows, results):
        d = res.as_dict()
        out.append({**r, **{k: d.get(k) for k in ("category", "message", "latency_us", "speedup")}})
    atomic.write_text(args.out, "".join(json.dumps(o, default=str) + "\n" for o in out))
    counts = collections.Counter(o["category"] for o in out)
    print("| category | scripts |\n|---|---:|")
    for k, v in counts.most_common():
        print(f"| {k} | {v} |")
    return 0


def merge(scored: Path, into: Path, out_dir: Path) -> int:
    import math

    import pandas as pd

    from little_dragon import atomic

    rows = [json.loads(line) for line in scored.read_text().splitlines() if line.strip()]
    a = pd.read_parquet(into)
    model = a.method == "model"
    for r in rows:
        hit = model & (a.prompt_id == r["prompt_id"]) & (a.attempt == r["attempt"])
        if hit.sum() != 1:
            print(f"{scored}: prompt {r['prompt_id']} attempt {r['attempt']}: {int(hit.sum())} rows in {into}",
                  file=sys.stderr)
            return 2
        a.loc[hit, ["script", "category", "message", "latency_us", "speedup"]] = [
            r["script"], r["category"], r["message"] or "", r["latency_us"], r["speedup"]]
    atomic.write_parquet(out_dir / "attempts.parquet", a)
    m = a[model]
    speed = [s for s, c in zip(m.speedup, m.category) if c == "correct" and s and s > 0]
    summary = {"attempts": int(len(m)), "correct_rate": float((m.category == "correct").mean()),
               "geomean_speedup": math.exp(sum(math.log(s) for s in speed) / len(speed)) if speed else None,
               "rescored": len(rows), "from": str(into), "scored": str(scored)}
    atomic.write_json(out_dir / "summary.json", summary)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
