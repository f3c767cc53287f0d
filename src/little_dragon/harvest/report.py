"""A markdown report of finished harvests (per family: valid-candidate fraction, trials per minute, best
tuned vs baseline speedup), for the committed GPU evidence in ``results/``.

    python -m little_dragon.harvest.report DIR [DIR ...] --workloads W.parquet --out results/x.md [--json ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from little_dragon import atomic
from little_dragon.harvest.summary import family_summary, harvest_metrics


def report(dirs: list[Path], workloads: pd.DataFrame) -> tuple[str, dict]:
    lines, blob = [], {}
    for d in dirs:
        meta = json.loads((d / "meta.json").read_text())
        m = harvest_metrics(d, workloads)
        fs = family_summary(d, workloads)
        blob[str(d)] = {"meta": meta, **m}
        h = meta["harvest"]
        lines += [
            f"## `{d}`", "",
            f"target `{json.dumps(meta['target'], sort_keys=True)}`, TVM {meta.get('tvm_version', '?')}, "
            f"{h['trials_per_workload']} trials per workload ({h['trials_per_iter']} per iteration), "
            f"strategy {h['strategy']}, cost model {h['cost_model']}, {h['max_concurrent_workloads']} workloads "
            f"at once x {h['builder_workers']} build workers; timing: "
            f"{json.dumps(meta['timing'], sort_keys=True)}", "",
            f"- workloads: {m['workloads_ok']} tuned, {m['workloads_failed']} failed (error kept, harvest went on)",
            f"- measured candidates: {m['records']}, valid fraction {m['valid_fraction']:.3f}",
            f"- trials per minute (per workload, summed wall time): {m['trials_per_min']:.1f}",
            f"- median over families of the median best/baseline speedup: {m['speedup_median']:.2f}x", "",
            "| family | workloads | failed | trials | valid fraction | trials/min | speedup median | speedup max | baseline |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in fs.itertuples():
            lines.append(f"| {r.family} | {r.workloads} | {r.failed} | {r.trials} | {r.valid_fraction:.3f} | "
                         f"{r.trials_per_min:.1f} | {r.speedup_median:.2f} | {r.speedup_max:.2f} | {r.baseline_kind} |")
        lines.append("")
    return "\n".join(lines), blob


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--json")
    ap.add_argument("--title", default="Harvest report")
    args = ap.parse_args(argv)
    text, blob = report(args.dirs, pd.read_parquet(args.workloads))
    atomic.write_text(args.out, f"# {args.title}\n\n{text}")
    if args.json:
        atomic.write_json(args.json, blob)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
