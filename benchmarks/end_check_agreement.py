"""Does the constraint's end-of-script check agree with MetaSchedule and with the judge?

``schedule_worker.finish_check`` on (a) every record of harvest databases, in the ``post *`` form the model writes,
split by MetaSchedule's verdict in tuning (built and ran: finite run_secs; failed: 1e10), and (b) the scripts of
evaluation runs (``attempts.parquet`` of ``dragon eval run``) that end in ``post *``, split by the judge's category.
Prints one table each; the reasons of the refusals, most frequent first.

    python benchmarks/end_check_agreement.py --harvest data/harvest/cuda-sm_90-6e5dd8 \
        [--attempts RUN/eval/attempts.parquet ...] [--per-workload N]

Real parts only: the harvest's MetaSchedule databases, TVM's post-processors and lowering (no GPU, no nvcc needed).
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path


def _post_star(trace_json: list) -> str | None:
    from little_dragon.codec import encode

    lines = encode(trace_json).splitlines()
    return "\n".join(lines[:lines.index("post")] + ["post *"]) + "\n" if "post" in lines else None


def main(args: argparse.Namespace) -> None:
    import pandas as pd

    from little_dragon.codec import PostprocContext
    from little_dragon.codec.roundtrip import RECORD_FILE, read_database
    from little_dragon.generation.schedule_worker import finish_check
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    contexts: dict[str, tuple] = {}
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for db in sorted(p for p in (Path(args.harvest) / "db").iterdir() if p.is_dir()):
        lines = (db / RECORD_FILE).read_text().splitlines()
        for _, mod, recs in read_database(db):
            target = recs[0][2] if recs else None
            contexts[db.name] = (mod, PostprocContext(mod, target)) if target else (mod, None)
            for n, trace_json, _ in recs[:args.per_workload or None]:
                text = _post_star(trace_json)
                if text is None:
                    counts[("no `post *` form", "-")] += 1
                    continue
                ran = all(float(x) < 1e9 for x in json.loads(lines[n])[1][1])
                why = finish_check(mod, contexts[db.name][1], text)
                verdict = "built and ran" if ran else "failed in tuning"
                counts[(verdict, "refuses" if why else "passes")] += 1
                if why:
                    reasons[(verdict, why[:110])] += 1
    print(f"\nharvest {args.harvest}: {sum(counts.values())} records, {time.perf_counter() - t0:.0f} s\n")
    print("| MetaSchedule's verdict in tuning | end check passes | end check refuses |\n|---|---:|---:|")
    for verdict in ("built and ran", "failed in tuning"):
        print(f"| {verdict} | {counts[(verdict, 'passes')]} | {counts[(verdict, 'refuses')]} |")
    for (verdict, why), k in reasons.most_common(8):
        print(f"- {k} x ({verdict}) {why}")

    for path in args.attempts:
        a = pd.read_parquet(path)
        a = a[(a.method == "model") & a.script.str.contains(r"post \*", regex=True)]
        by: collections.Counter = collections.Counter()
        for _, r in a.iterrows():
            if r.workload_id not in contexts:
                by[(r.category, "workload not in the harvest")] += 1
                continue
            mod, ctx = contexts[r.workload_id]
            why = finish_check(mod, ctx, r.script)
            by[(r.category, f"refuses ({why.split(':')[0]})" if why else "passes")] += 1
        print(f"\n{path}: the model's scripts ending in `post *`, by the judge's category\n")
        print("| judge's category | end check | scripts |\n|---|---|---:|")
        for (cat, verdict), k in sorted(by.items()):
            print(f"| {cat} | {verdict} | {k} |")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--harvest", required=True, help="A harvest folder (its db/ holds one MetaSchedule database "
                                                    "per workload).")
    p.add_argument("--attempts", nargs="*", default=[], help="attempts.parquet files of evaluation runs on workloads "
                                                             "of that harvest.")
    p.add_argument("--per-workload", type=int, default=0, help="Records per workload (0: all).")
    return p


if __name__ == "__main__":
    main(parser().parse_args())
