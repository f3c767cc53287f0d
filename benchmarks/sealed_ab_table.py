"""Table and plot of a sealed-set A/B kept as raw evaluation folders (``dragon eval run --out`` copies).

Layout read: ``ROOT/<code>/<arm>-seed<i>/{attempts.parquet,summary.json}`` (``code``: the code the arms ran,
e.g. before/after; ``arm``: free, constrained, constrained-r2).  Prints one markdown row per (code, arm): attempts,
decode rate, apply rate, correct per attempt (all, construction, refinement), the geomean speedup of correct attempts
(mean over seeds) and the categories; writes ``ROOT/correct_per_attempt.png``.

    python benchmarks/sealed_ab_table.py results/constrained-decoding/sealed-cpu-s16
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

APPLIED = ("correct", "wrong_result", "build_error", "runtime_error", "timeout", "verify_error", "no_op")


def collect(root: Path) -> list[dict]:
    import pandas as pd

    groups: dict[tuple[str, str], list[Path]] = {}
    for d in sorted(root.glob("*/*-seed*")):
        m = re.fullmatch(r"(.+)-seed\d+", d.name)
        if m and (d / "attempts.parquet").exists():
            groups.setdefault((d.parent.name, m.group(1)), []).append(d)
    rows = []
    for (code, arm), dirs in groups.items():
        a = pd.concat([pd.read_parquet(d / "attempts.parquet") for d in dirs])
        a = a[a.method == "model"]
        speed = [json.loads((d / "summary.json").read_text())["geomean_speedup"] for d in dirs]
        task = {t: ((g.category == "correct").sum(), len(g)) for t, g in a.groupby("task")}
        rows.append({"code": code, "arm": arm, "seeds": len(dirs), "attempts": len(a),
                     "decode": float((a.category != "decode_error").mean()), "apply": float(a.category.isin(APPLIED).mean()),
                     "correct": float((a.category == "correct").mean()), "n_correct": int((a.category == "correct").sum()),
                     "tasks": task, "speedup": sum(s for s in speed if s) / max(1, len([s for s in speed if s])),
                     "categories": a.category.value_counts().to_dict()})
    return rows


def plot(rows: list[dict], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    codes = sorted({r["code"] for r in rows}, key=lambda c: (c != "before", c))
    known = {"free": "free", "constrained": "constrained\n(first pass)", "constrained-r2": "constrained\n(2 resamples)"}
    present = {r["arm"] for r in rows}
    arms = [a for a in known if a in present] + sorted(present - set(known))   # other arms by name, after these
    fig, ax = plt.subplots(figsize=(max(7.0, 1.4 * len(arms)), 3.6))
    width = 0.8 / len(codes)
    for i, code in enumerate(codes):
        vals = [next((r["correct"] for r in rows if r["code"] == code and r["arm"] == arm), None) for arm in arms]
        xs = [x + i * width for x, v in zip(range(len(arms)), vals) if v is not None]  # an arm this code did not run:
        vals = [v for v in vals if v is not None]                                     # no bar (not a 0% one)
        bars = ax.bar(xs, vals, width, label=code)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in vals], fontsize=8)
    ax.set_xticks([x + width * (len(codes) - 1) / 2 for x in range(len(arms))],
                  [known.get(a, a.replace("+", "\n+")) for a in arms], fontsize=8)
    ax.set_ylabel("correct per attempt")
    ax.set_ylim(0, 1)
    ax.legend(title="constraint code")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--title", default="Sealed set, tiny model, llvm (28 prompts x 4 attempts x 3 seeds)",
                    help="the plot's title (what was evaluated, on what)")
    args = ap.parse_args(argv)
    rows = collect(args.root)
    if not rows:
        print(f"{args.root}: no <code>/<arm>-seed<i>/attempts.parquet", file=sys.stderr)
        return 2
    print("| code | arm | attempts | decode | apply | correct per attempt | construction | refinement | "
          "geomean speedup (correct) | categories |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(rows, key=lambda r: (r["code"] != "before", r["code"], r["arm"])):
        t = r["tasks"]
        print(f"| {r['code']} | {r['arm']} | {r['attempts']} | {r['decode']:.1%} | {r['apply']:.1%} | "
              f"{r['correct']:.1%} ({r['n_correct']}) | {t['construction'][0]}/{t['construction'][1]} | "
              f"{t['refinement'][0]}/{t['refinement'][1]} | {r['speedup']:.2f} | "
              + ", ".join(f"{k} {v}" for k, v in sorted(r["categories"].items(), key=lambda kv: -kv[1])) + " |")
    plot(rows, args.root / "correct_per_attempt.png", args.title)
    print(f"plot: {args.root / 'correct_per_attempt.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
