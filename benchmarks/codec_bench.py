"""Codec benchmark: encode/decode throughput (traces/s on one core) and token ratios vs. JSON and str(trace).

    .venv/bin/python benchmarks/codec_bench.py [--db DIR ...] [--seeds 2] [--repeat 3]

Without --db it samples post-processed traces from the design spaces of the corpus workloads (llvm, CUDA,
tensor cores); with --db it reads MetaSchedule JSON databases (e.g. artifacts/harvest/*/db/*).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _samples(args) -> list[dict]:
    from little_dragon.codec import canonical_json

    out = []
    if args.db:
        from tvm.s_tir import Schedule, Trace

        from little_dragon.codec.roundtrip import read_database
        from little_dragon.tvmx.build import import_tensor_intrinsics

        import_tensor_intrinsics()
        for d in args.db:
            for name, mod, records in read_database(d):
                for _, trace_json, target in records:
                    sch = Schedule(mod, debug_mask=0)
                    Trace.apply_json_to_schedule(trace_json, sch)
                    out.append({"group": json.loads(target)["kind"], "json": trace_json, "str": str(sch.trace)})
        return out
    from little_dragon.codec.corpus import sample_traces

    for s in sample_traces(seeds=range(args.seeds)):
        group = "cuda-tc" if "_tc" in s.workload else s.target
        out.append({"group": group, "json": canonical_json(s.trace.as_json()), "str": str(s.trace)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", nargs="*", help="MetaSchedule JSON database dirs (default: sample design spaces)")
    ap.add_argument("--seeds", type=int, default=2, help="samples per design space")
    ap.add_argument("--repeat", type=int, default=3, help="timing repeats (best is reported)")
    args = ap.parse_args()

    from little_dragon.codec import decode, encode
    from little_dragon.codec.tokens import count_tokens, json_text, summarize

    samples = _samples(args)
    texts = [encode(s["json"]) for s in samples]
    decode(texts[0])  # warm the parser and TVM
    enc_s = min(_time(lambda: [encode(s["json"]) for s in samples]) for _ in range(args.repeat))
    dec_s = min(_time(lambda: [decode(t) for t in texts]) for _ in range(args.repeat))
    n = len(samples)
    print(f"traces: {n}   median instructions: {statistics.median(len(s['json'][0]) for s in samples):.0f}")
    print(f"encode: {n / enc_s:8.0f} traces/s per core   decode: {n / dec_s:8.0f} traces/s per core "
          "(single process)")
    print()
    groups = sorted({s["group"] for s in samples}) + ["all"]
    header = f"{'group':8} {'n':>4} | {'tokenizer':9} {'codec':>6} {'JSON':>7} {'str':>7} | " \
             f"{'codec/JSON':>10} {'codec/str':>9}"
    print(header)
    print("-" * len(header))
    for g in groups:
        idx = [i for i, s in enumerate(samples) if g == "all" or s["group"] == g]
        rows = [{"codec": texts[i], "json": json_text(samples[i]["json"]), "str": samples[i]["str"]} for i in idx]
        summ = summarize(count_tokens(rows))
        for tok in ("smollm2", "bpe"):
            print(f"{g:8} {len(idx):>4} | {tok:9} {summ[f'median_tokens.{tok}.codec']:>6.0f} "
                  f"{summ[f'median_tokens.{tok}.json']:>7.0f} {summ[f'median_tokens.{tok}.str']:>7.0f} | "
                  f"{summ[f'ratio.{tok}.codec_over_json.median']:>10.3f} "
                  f"{summ[f'ratio.{tok}.codec_over_str.median']:>9.3f}")
    print("\ntargets (issue 3): codec/JSON <= 0.125, codec/str <= 0.400 (medians)")
    return 0


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
