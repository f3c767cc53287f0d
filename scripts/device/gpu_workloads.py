"""The CUDA harvest's workload set: real model-layer shapes (profile `models`), a few per family, with
float16 where tensor cores apply. Deterministic; writes a workload store parquet.

    python scripts/device/gpu_workloads.py OUT.parquet [--per-family 3]
"""
from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict

import pandas as pd

from little_dragon.workloads.config import WorkloadsConfig
from little_dragon.workloads.generate import spec_row
from little_dragon.workloads.profiles import profile_specs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--per-family", type=int, default=3)
    ap.add_argument("--max-gflop", type=float, default=8.0, help="skip kernels above this (tuning time)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    specs = profile_specs(WorkloadsConfig(profile="models", graph_models=[]))
    by_family = defaultdict(list)
    for s in specs:
        if s.flops() <= args.max_gflop * 1e9 and s.dtype in ("float16", "float32"):
            by_family[s.family].append(s)
    rng = random.Random(args.seed)
    rows, seen = [], set()
    for fam in sorted(by_family):
        pool = by_family[fam]
        # prefer float16 first (tensor-core spaces), then float32, distinct shapes
        picks = [s for s in pool if s.dtype == "float16"]
        rng.shuffle(picks)
        rest = [s for s in pool if s.dtype == "float32"]
        rng.shuffle(rest)
        chosen = picks[: (args.per_family + 1) // 2] + rest[: args.per_family // 2]
        for s in chosen[: args.per_family]:
            row = spec_row(s)
            if row["workload_id"] not in seen:
                seen.add(row["workload_id"])
                rows.append(row)
    df = pd.DataFrame(rows)
    df.to_parquet(args.out, index=False)
    print(df.groupby(["family", "dtype"]).size().to_string())
    print(f"{len(df)} workloads, {df['family'].nunique()} families -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
