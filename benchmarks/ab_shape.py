"""The tokens/s ratio of a constrained-vs-free A/B split into its two factors, from ``constrained_bench.py --ab --out``
files: the batch's shape (sampled tokens per decoding step, free over constrained: a batch decodes until its longest
attempt ends, so fewer tokens a step cost the same steps) and the per-step cost (ms a step, constrained over free).
Their product is the ratio of sampled tokens/s without the prefill.  A constraint that cost nothing a step would
still pay the shape factor.

Prints one markdown row per constrained arm of each file; ``--plot`` writes the two factors as bars, with the issue's
1.5x target.  Where the bench recorded the batch's rows at every step (``rows_per_step``, since session 29), it also
prints, for the arms that decode chunks of rows (``+norefill``), when each chunk's rows (prompts) ended, and the steps
the same rows would take if a row that ended were replaced at once by the next prompt's (``refill_steps``: list
scheduling, the later chunks' rows entering longest first) -- what the engine's refill does to the shape, with every row
as long as it was.

    python benchmarks/ab_shape.py results/constrained-decoding/cpu-s25/ab/new1.json \\
        results/constrained-decoding/h200-s26/ab-6059714/constrained_ab_cuda.json --plot out.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

TARGET = 1.5  # issue 16: constrained tokens/s at most 1.5x slower than free


def split(ab: dict) -> list[dict]:
    """One row per constrained arm of an ``--ab`` result, against its free arm on the same engine."""
    arms = ab["arms"]
    rows = []
    for name, arm in arms.items():
        if not name.startswith("constrained"):
            continue
        engine = name.partition("+")[2].split("+")[0]
        # against the free arm on the same engine (chunks of rows: +norefill)
        free = (arms.get(f"free+{engine}+norefill") if "+norefill" in name else None) or arms.get(f"free+{engine}") \
            or arms.get("free")
        if free is None:
            continue
        shape = (free["generated_tokens"] / free["steps"]) / (arm["generated_tokens"] / arm["steps"])
        # tokens drawn and taken back: refused lines' (retries) and refused lazy line starts' (``lazy_refused``)
        taken = sum((arm.get("stats") or {}).get(k, 0) for k in ("retried_tokens", "lazy_refused"))
        per_step = arm["ms_per_step"] / free["ms_per_step"]
        extra = {}
        # rows' ends read off the rows alive a step: chunks only (refilled rows enter mid-call)
        if "+norefill" in name and arm.get("rows_per_step") and free.get("rows_per_step"):
            extra = {"free_refill": refill_steps(free["rows_per_step"]), "refill": refill_steps(arm["rows_per_step"]),
                     "free_rows_ended": rows_ended(free["rows_per_step"]), "rows_ended": rows_ended(arm["rows_per_step"])}
            extra["refill_shape"] = ((free["generated_tokens"] / extra["free_refill"])
                                     / (arm["generated_tokens"] / extra["refill"]))
        rows.append({**extra, "arm": name, "device": ab.get("device", "?"), "prompts": ab.get("prompts"), "k": ab.get("k"),
                     "free": (free["steps"], free["generated_tokens"]), "constrained": (arm["steps"],
                                                                                        arm["generated_tokens"]),
                     "shape": shape, "per_step": per_step, "ratio": shape * per_step,
                     # the tokens line and end retries took back were sampled too: the ratio counting them
                     "taken_back": taken, "ratio_with_taken_back": (shape * per_step * arm["generated_tokens"]
                                                                    / max(arm["generated_tokens"] + taken, 1))})
    return rows


def rows_ended(calls: list[list[int]]) -> list[list[int]]:
    """Per engine call, the decoding step at which each of its rows ended (its last attempt), from the rows alive at
    every step: the rows of a call all start at its step 0; a row that ends before the first step counts 0."""
    out = []
    for alive in calls:
        if not alive:
            out.append([])
            continue
        ends, before = [], alive[0]
        for i, r in enumerate(alive):
            ends += [i] * (before - r)
            before = r
        out.append(ends + [len(alive)] * alive[-1])
    return out


def refill_steps(calls: list[list[int]]) -> int:
    """The decoding steps of the same rows on a batch of the first call's width where an ended row's place goes at once
    to the next row (the calls' rows in order; a call's rows as long as they were, its rows entering longest first)."""
    import heapq

    ended = rows_ended(calls)
    width = len(ended[0]) if ended else 0
    if not width:
        return 0
    free_at = [0] * width
    heapq.heapify(free_at)
    finish = 0
    for call in ended:
        for length in sorted(call, reverse=True):
            start = heapq.heappop(free_at)
            finish = max(finish, start + length)
            heapq.heappush(free_at, start + length)
    return finish


def main(args: argparse.Namespace) -> None:
    rows = []
    for f in args.files:
        for r in split(json.loads(Path(f).read_text())["ab"]):
            rows.append({**r, "file": f})
    print("| file | arm | device | prompts x k | free: steps, tokens, a step | constrained: steps, tokens, a step | "
          "shape | per step | tokens/s ratio | taken back | ratio counting them |")
    print("|---|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        (fs, ft), (cs, ct) = r["free"], r["constrained"]
        print(f"| {r['file']} | {r['arm']} | {r['device']} | {r['prompts']} x {r['k']} | {fs}, {ft}, {ft / fs:.1f} | "
              f"{cs}, {ct}, {ct / cs:.1f} | {r['shape']:.2f}x | {r['per_step']:.2f}x | {r['ratio']:.2f}x | "
              f"{r['taken_back']} | {r['ratio_with_taken_back']:.2f}x |")
    for r in (r for r in rows if "refill" in r):
        print(f"\n{r['file']} {r['arm']}: rows ended at steps (per engine call) free {r['free_rows_ended']}, constrained "
              f"{r['rows_ended']}; with rows refilled: free {r['free_refill']} steps, constrained {r['refill']}: shape "
              f"{r['refill_shape']:.2f}x (now {r['shape']:.2f}x)")
    if args.plot and rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        # which run (the file's folder: session and code) and the arm's modes past the common ones, on short lines
        labels = [f"{Path(r['file']).parent.name} ({r['device']})\n" + "\n+".join(r["arm"].split("+")) for r in rows]
        x = range(len(rows))
        fig, ax = plt.subplots(figsize=(2.4 + 2.2 * len(rows), 4))
        ax.bar([i - 0.2 for i in x], [r["shape"] for r in rows], 0.4, label="batch shape (a free constraint pays it)")
        ax.bar([i + 0.2 for i in x], [r["per_step"] for r in rows], 0.4, label="per decoding step")
        for i, r in zip(x, rows):
            ax.annotate(f"tokens/s {r['ratio']:.2f}x", (i, max(r["shape"], r["per_step"])), ha="center",
                        va="bottom", fontsize=8)
        ax.axhline(TARGET, color="black", linestyle="--", linewidth=1, label=f"target {TARGET}x (tokens/s)")
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.set_ylabel("constrained / free")
        ax.set_ylim(0, 1.25 * max(max(r["shape"], r["per_step"]) for r in rows))
        ax.set_title("Constrained decoding's tokens/s ratio = shape x per-step cost")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


def plot_rows(files: list[str], out: str) -> None:
    """The rows (prompts) in the batch at every decoding step of each arm that recorded them (``rows_per_step``, an arm's
    engine calls one after another): where the batch runs short, and how long its tail is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for f in files:
        for name, arm in json.loads(Path(f).read_text())["ab"]["arms"].items():
            rows = [r for call in arm.get("rows_per_step") or [] for r in call]
            if rows:
                ax.step(range(len(rows)), rows, where="post", label=f"{Path(f).parent.name}: {name} ({len(rows)} steps)")
    ax.set_xlabel("decoding step")
    ax.set_ylabel("rows (prompts) in the batch")
    ax.set_title("Batch occupancy per decoding step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="constrained_bench.py --ab --out JSON files")
    ap.add_argument("--plot", help="write the factors as a PNG here")
    ap.add_argument("--rows-plot", help="write the rows in the batch at every step (rows_per_step) as a PNG here")
    return ap


if __name__ == "__main__":
    parsed = parser().parse_args()
    main(parsed)
    if parsed.rows_plot:
        plot_rows(parsed.files, parsed.rows_plot)
