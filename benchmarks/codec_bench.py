"""Codec benchmark: encode/decode throughput (traces/s per core) and token ratios per tokenizer.

    .venv/bin/python benchmarks/codec_bench.py --db DIR [DIR ...] [--repeat 3] [--tokenizers ...] [--md FILE]
    .venv/bin/python benchmarks/codec_bench.py --seeds 2          # design-space samples instead of databases

``--db`` takes MetaSchedule JSON database dirs or harvest dirs / roots (``<harvest>/db/<workload>/``), e.g.
``artifacts/harvest/llvm-2c-148a25 data/harvest/cuda-sm_90-6e5dd8 data/harvest-t64/cuda-sm_90-6e5dd8``.
Forms: ``codec`` (post-processing written out; decodes from the text alone), ``codec_post`` (``post *``:
re-derived from workload + target at decode), TVM's database JSON and ``str(trace)``.  Tokenizers: see
``little_dragon.codec.tokens`` (issue 3 judges on ``smollm2``, the model's own).  Databases are only read.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

TARGET_JSON, TARGET_STR = 1 / 8, 1 / 2.5


def _db_dirs(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if (p / "database_tuning_record.json").is_file():
            out.append(p)
        else:
            from little_dragon.codec.validate import database_dirs, expand_harvest_dirs

            out += [d for h in expand_harvest_dirs([p]) for d in database_dirs(h)]
    return out


def _samples(args) -> list[dict]:
    """{group, json, str, mod, target} per trace; str(trace) from TVM's own trace applied to the workload."""
    from little_dragon.codec import canonical_json

    out = []
    if args.db:
        from tvm.s_tir import Schedule, Trace

        from little_dragon.codec.roundtrip import read_database
        from little_dragon.tvmx.build import import_tensor_intrinsics

        import_tensor_intrinsics()
        for d in _db_dirs(args.db):
            for _name, mod, records in read_database(d):
                for _, trace_json, target in records:
                    sch = Schedule(mod, debug_mask=0)
                    Trace.apply_json_to_schedule(trace_json, sch)
                    out.append({"group": json.loads(target)["kind"], "json": trace_json, "str": str(sch.trace),
                                "mod": mod, "target": target})
        return out
    from little_dragon.codec.corpus import sample_traces, target_dict

    for s in sample_traces(seeds=range(args.seeds)):
        group = "cuda-tc" if "_tc" in s.workload else s.target
        out.append({"group": group, "json": canonical_json(s.trace.as_json()), "str": str(s.trace), "mod": s.mod,
                    "target": json.dumps(target_dict(s.target), sort_keys=True)})
    return out


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", nargs="*", help="database / harvest dirs (default: sample design spaces)")
    ap.add_argument("--seeds", type=int, default=2, help="samples per design space (without --db)")
    ap.add_argument("--repeat", type=int, default=3, help="timing repeats of the context-free codec (best)")
    ap.add_argument("--tokenizers", nargs="*", default=["smollm2", "smollm2_ext", "tiny", "bpe"],
                    help="smollm2 smollm2_ext tiny bpe (see little_dragon.codec.tokens)")
    ap.add_argument("--md", help="also write the table as markdown to this file")
    ap.add_argument("--time-sample", type=int, default=100, help="traces timed with `post *` (fresh contexts)")
    args = ap.parse_args()

    from little_dragon.codec import PostprocContext, decode, encode
    from little_dragon.codec.tokens import count_tokens, json_text, summarize

    samples = _samples(args)
    n = len(samples)
    texts = [encode(s["json"]) for s in samples]
    decode(texts[0])  # warm the parser
    enc_s = min(_time(lambda: [encode(s["json"]) for s in samples]) for _ in range(args.repeat))
    dec_s = min(_time(lambda: [decode(t) for t in texts]) for _ in range(args.repeat))
    # `post *` texts: one context per (workload, target), so post-processors are built once per workload
    shared: dict = {}
    posts = [encode(s["json"], shared.setdefault((id(s["mod"]), s["target"]), PostprocContext(s["mod"], s["target"])))
             for s in samples]
    derived = sum(t.endswith("post *\n") for t in posts)
    # timing: a fresh context per trace (nothing cached), so encode and decode each really apply the trace and
    # run the post-processors, as the evaluator does for one script; on an even sample of the traces
    timed = list(range(0, n, max(1, n // args.time_sample)))[: args.time_sample]
    for i in timed:  # build the post-processors outside the timing (once per workload in real use)
        shared[(id(samples[i]["mod"]), samples[i]["target"])].postprocs()
    enc_p = dec_p = 0.0
    for i in timed:
        s = samples[i]
        c = PostprocContext(s["mod"], s["target"])
        c._postprocs = shared[(id(s["mod"]), s["target"])].postprocs()
        enc_p += _time(lambda s=s, c=c: encode(s["json"], c))
        c._cache.clear()
        back: list = []
        dec_p += _time(lambda i=i, c=c, back=back: back.append(decode(posts[i], c)))
        if json.dumps(back[0]) != json.dumps(s["json"]):
            raise SystemExit(f"trace {i}: post * form does not decode to the record")

    lines = [f"traces: {n}   median instructions: {statistics.median(len(s['json'][0]) for s in samples):.0f}   "
             f"`post *` used: {derived}/{n}", "",
             "| form | encode traces/s | decode traces/s |", "|---|---|---|",
             f"| codec (context-free) | {n / enc_s:.0f} | {n / dec_s:.0f} |",
             f"| codec `post *` (applies the trace, runs the post-processors; {len(timed)} traces) | "
             f"{len(timed) / enc_p:.1f} | {len(timed) / dec_p:.1f} |",
             "", "one process, one core; `post *` times include applying the trace and TVM's post-processors", ""]
    header = ("| corpus | n | tokenizer | codec med / p90 | codec `post *` med / p90 | JSON med / p90 | "
              "str med / p90 | codec/JSON | `post *`/JSON | codec/str | `post *`/str |")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    groups = sorted({s["group"] for s in samples}) + ["all"]
    for g in groups:
        idx = [i for i, s in enumerate(samples) if g == "all" or s["group"] == g]
        rows = [{"codec": texts[i], "codec_post": posts[i], "json": json_text(samples[i]["json"]),
                 "str": samples[i]["str"]} for i in idx]
        summ = summarize(count_tokens(rows, tokenizers=args.tokenizers))
        for tok in args.tokenizers:
            def mp(form, summ=summ, tok=tok):
                return f"{summ[f'median_tokens.{tok}.{form}']:.0f} / {summ[f'p90_tokens.{tok}.{form}']:.0f}"

            lines.append(f"| {g} | {len(idx)} | {tok} | {mp('codec')} | {mp('codec_post')} | {mp('json')} | "
                         f"{mp('str')} | {summ[f'ratio.{tok}.codec_over_json.median']:.3f} | "
                         f"{summ[f'ratio.{tok}.codec_post_over_json.median']:.3f} | "
                         f"{summ[f'ratio.{tok}.codec_over_str.median']:.3f} | "
                         f"{summ[f'ratio.{tok}.codec_post_over_str.median']:.3f} |")
    lines += ["", f"targets (issue 3, medians of per-trace ratios, model tokenizer smollm2): codec/JSON <= "
                  f"{TARGET_JSON:.3f}, codec/str <= {TARGET_STR:.3f}"]
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
