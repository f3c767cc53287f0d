"""The end check's lowering with and without the passes it skips: the same verdicts, and how much faster.

``schedule_worker.finish_check`` lowers a finished kernel for its target to catch what the judge's build refuses, and
leaves out ``END_CHECK_SKIPPED_PASSES`` (rewrites for speed: common subexpressions, simplification after unrolling).
This runs the end check on real kernels with ``tvmx.build.lower_for_target`` wrapped: every kernel it lowers is lowered
with the full pipeline and with each variant's passes left out, in one run, and the table gives milliseconds a kernel
and how many verdicts (lowers, or which error it raises) differ from the full pipeline's.

Kernels: every record of MetaSchedule databases (``--harvest``, a folder of them; the end check as the acceptance runs
it: the lines before the record's `post` and `post *`), and the model's attempts of sealed evaluations (``--attempts``
files, their workloads' TVMScript from ``--workloads``; each distinct script once, every attempt the judge failed and
``--correct`` of the correct ones).

    python benchmarks/end_check_lowering.py --harvest data/harvest/cuda-sm_90-6e5dd8/db
    python benchmarks/end_check_lowering.py --attempts results/constrained-decoding/sealed-cpu-s*/*/*/attempts.parquet \\
        --workloads artifacts/sealed/workloads.parquet --target '{"kind": "llvm", "num-cores": 2}'
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path
from typing import Any, Iterator

FAILED = ("build_error", "runtime_error", "wrong_result", "timeout", "verify_error")


def harvest_kernels(folders: list[str]) -> Iterator[tuple[str, Any, str, str, str]]:
    """(where, module, target JSON, end-check text, what the record is) of every record of the databases in
    ``folders``."""
    from little_dragon.codec import encode
    from little_dragon.codec.roundtrip import read_database

    for folder in folders:
        for db in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
            for name, mod, recs in read_database(db):
                for i, trace_json, target in recs:
                    lines = encode(trace_json).splitlines()
                    text = "\n".join(lines[:lines.index("post")] + ["post *"] if "post" in lines else lines) + "\n"
                    yield f"{db.name} record {i}", mod, target, text, "record"


def attempt_kernels(files: list[str], workloads: str, target: str, correct: int) -> Iterator[tuple]:
    """The same for the model's attempts in sealed-evaluation ``files`` (``attempts.parquet``)."""
    import pandas as pd

    from little_dragon.workloads.store import module_from_script

    df = pd.concat([pd.read_parquet(f) for f in files])
    df = df[df.method == "model"].drop_duplicates(["workload_id", "script"])
    ok = df[df.category == "correct"]
    df = pd.concat([df[df.category.isin(FAILED)], ok.sample(min(len(ok), correct), random_state=0)])
    source = pd.read_parquet(workloads).set_index("workload_id")["tvmscript"]
    mods: dict[str, Any] = {}
    for r in df.itertuples():
        if r.workload_id not in mods:
            mods[r.workload_id] = module_from_script(source[r.workload_id], where=f"{workloads}:{r.workload_id}")
        lines = r.script.rstrip("\n").split("\n")
        keywords = [line.split(" ")[0] for line in lines]
        if "post" in keywords:
            lines = lines[:keywords.index("post")] + ["post *"]
        yield f"{r.workload_id} {r.prompt_id} attempt {r.attempt}", mods[r.workload_id], target, \
            "\n".join(lines) + "\n", r.category


def run(kernels: Iterator[tuple], variants: dict[str, tuple[str, ...]], progress: int = 100) -> list[dict]:
    """One row per lowering the end check asked for: each variant's (verdict, seconds), the end check's verdict."""
    from little_dragon.codec import PostprocContext
    from little_dragon.generation import schedule_worker
    from little_dragon.tvmx import build

    full = build.lower_for_target
    rows: list[dict] = []

    def every_variant(mod: Any, target: Any, skip: tuple[str, ...] = ()) -> Any:
        row: dict[str, Any] = {}
        for name, passes in variants.items():
            t = time.perf_counter()
            try:
                full(mod, target, skip=passes)
                verdict = ""
            except Exception as e:  # noqa: BLE001 - TVM's verdict
                verdict = schedule_worker._last_line(e)
            row[name] = (verdict, time.perf_counter() - t)
        rows.append(row)
        return full(mod, target, skip=skip)  # the end check itself goes on as it would

    contexts: dict[tuple, Any] = {}
    build.lower_for_target = every_variant
    try:
        for n, (where, mod, target, text, what) in enumerate(kernels, 1):
            key = (id(mod), target)
            if key not in contexts:
                contexts[key] = PostprocContext(mod, target)
            before = len(rows)
            verdict = schedule_worker.finish_check(mod, contexts[key], text)
            for row in rows[before:]:
                row.update(where=where, what=what, end_check=verdict)
            if progress and n % progress == 0:
                print(f"{n} kernels, {len(rows)} lowerings", flush=True)
    finally:
        build.lower_for_target = full
    return rows


def table(rows: list[dict], variants: dict[str, tuple[str, ...]]) -> str:
    refused = [r for r in rows if r["full"][0]]
    out = [f"{len(rows)} lowerings; the full pipeline refuses {len(refused)} "
           f"(of kernels the judge called: {dict(collections.Counter(r['what'] for r in refused))})", "",
           "| variant | passes left out | ms a kernel | vs full | verdicts unlike full's | refusals kept |",
           "|---|---|---:|---:|---:|---:|"]
    base = sum(r["full"][1] for r in rows) / max(len(rows), 1)
    for name, passes in variants.items():
        ms = sum(r[name][1] for r in rows) / max(len(rows), 1)
        unlike = sum((r[name][0] == "") != (r["full"][0] == "") for r in rows)
        kept = sum(bool(r[name][0]) for r in refused)
        out.append(f"| {name} | {', '.join(passes) or '-'} | {1e3 * ms:.2f} | {ms / base:.2f}x | {unlike} | "
                   f"{kept}/{len(refused)} |")
    for name in variants:
        for r in rows:
            if (r[name][0] == "") != (r["full"][0] == ""):
                out.append(f"- {name}: {r['where']} ({r['what']}): full `{r['full'][0][:120]}`, "
                           f"{name} `{r[name][0][:120] or 'lowers'}`")
    return "\n".join(out)


def main(args: argparse.Namespace) -> None:
    from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()  # the CUDA records' tensor-core intrinsics
    variants = {"full": (), "end check": END_CHECK_SKIPPED_PASSES}
    for v in args.variant:
        name, _, passes = v.partition("=")
        variants[name] = tuple(p for p in passes.split(",") if p)
    kernels: list[Iterator] = []
    if args.harvest:
        kernels.append(harvest_kernels(args.harvest))
    if args.attempts:
        if not args.workloads:
            raise SystemExit("--attempts needs --workloads (the sealed set's workloads.parquet)")
        kernels.append(attempt_kernels(args.attempts, args.workloads, args.target, args.correct))
    rows = [row for ks in kernels for row in run(ks, variants)]
    print(table(rows, variants))
    if args.out:
        Path(args.out).write_text(json.dumps({"variants": variants, "rows": rows}, indent=1))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harvest", nargs="*", default=[], help="folders of MetaSchedule databases (a harvest's db/)")
    ap.add_argument("--attempts", nargs="*", default=[], help="sealed evaluations' attempts.parquet files")
    ap.add_argument("--workloads", help="--attempts: the sealed set's workloads.parquet (workload_id, tvmscript)")
    ap.add_argument("--target", default='{"kind": "llvm", "num-cores": 2}', help="--attempts: their target (JSON)")
    ap.add_argument("--correct", type=int, default=400, help="--attempts: how many correct attempts (all failed ones)")
    ap.add_argument("--variant", action="append", default=[], help="NAME=PASS,PASS: another set of passes to leave out")
    ap.add_argument("--out", help="every lowering's verdicts and times (JSON)")
    return ap


if __name__ == "__main__":
    main(parser().parse_args())
