"""Why VerifyGPUCode refused the scripts of a constrained A/B (results/constrained-decoding.md, session 18).

The end check says only "post-processor VerifyGPUCode rejects the schedule".  For each such attempt of an arm of a
``constrained_bench.py --ab`` output, this applies the script's lines (without `post *`) to a fresh schedule of its
workload and reads, per kernel block, the threads per block (threadIdx x*y*z of the loops bound above it) against
MetaSchedule's bounds on that block (``meta_schedule.thread_extent_low_inclusive`` / ``_high_inclusive``, the
`minthreads` / `maxthreads` annotations VerifyGPUCode's thread-extent check reads) and the target's 1024.  Runs on a
CPU (no GPU needed: the schedule and its IR only).

    python benchmarks/verify_gpu_code_reasons.py --ab results/constrained-decoding/h200-s18/ab-8c4d5b1/constrained_ab_cuda.json \\
        --rows .devcarry/cudads/datasets/validation.jsonl --prompts 16 --seed 0
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

LOW, HIGH = "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive"
BELOW, ABOVE, OTHER = "threads below minthreads", "threads above maxthreads or 1024", "other"


def thread_counts(mod: Any) -> list[tuple[int, int | None, int | None]]:
    """(threads per block, its low bound, its high bound) of every block under thread-bound loops of ``mod``."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    out: list[tuple[int, int | None, int | None]] = []

    def walk(stmt: Any, env: dict[str, int], bounds: dict[str, int]) -> None:
        if isinstance(stmt, tirx.For):
            if stmt.thread_binding is not None:
                tag = stmt.thread_binding.thread_tag
                env = {**env, tag: env.get(tag, 1) * int(stmt.extent)}
            walk(stmt.body, env, bounds)
        elif isinstance(stmt, SBlockRealize):
            ann = stmt.block.annotations
            bounds = {**bounds, **{k: int(ann[k]) for k in (LOW, HIGH) if k in ann}}
            threads = env.get("threadIdx.x", 1) * env.get("threadIdx.y", 1) * env.get("threadIdx.z", 1)
            if any(t.startswith("threadIdx") for t in env):
                out.append((threads, bounds.get(LOW), bounds.get(HIGH)))
            walk(stmt.block.body, env, bounds)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                walk(s, env, bounds)
        else:
            for attr in ("body", "then_case", "else_case"):
                child = getattr(stmt, attr, None)
                if child is not None:
                    walk(child, env, bounds)

    for _, f in mod.functions.items():
        walk(f.body, {}, {})
    return out


def reason(threads: list[tuple[int, int | None, int | None]]) -> str:
    for n, low, high in threads:
        if low is not None and n < low:
            return BELOW
        if (high is not None and n > high) or n > 1024:
            return ABOVE
    return OTHER  # shared memory, vector width, ...


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ab", required=True, help="a constrained_bench.py --ab JSON output")
    ap.add_argument("--rows", required=True, help="the rows it ran on (validation.jsonl of the CUDA split)")
    ap.add_argument("--prompts", type=int, required=True, help="its --prompts")
    ap.add_argument("--seed", type=int, default=0, help="its --seed")
    ap.add_argument("--out", help="write the counts as JSON here")
    args = ap.parse_args(argv)

    from constrained_bench import _rows

    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrained import workload_of_prompt
    from little_dragon.generation.schedule_worker import fresh_schedule

    rows = _rows(args.rows, args.prompts, args.seed)
    result: dict[str, Any] = {}
    for arm, a in json.loads(Path(args.ab).read_text())["ab"]["arms"].items():
        per = (a.get("first_pass") or {}).get("per_attempt") or []
        counts: collections.Counter = collections.Counter()
        for p in per:
            if "VerifyGPUCode" not in p["error"]:
                continue
            wl = workload_of_prompt(rows[p["prompt"]]["prompt"])
            sch = fresh_schedule(wl.mod)
            check_module_script(p["script"].replace("post *\n", ""), wl.mod, wl.post_context, schedule=sch)
            counts[reason(thread_counts(sch.mod))] += 1
        result[arm] = {"attempts": len(per), "verify_gpu_code_refused": sum(counts.values()), **counts}
    print("| arm | attempts | refused by VerifyGPUCode | threads below minthreads | above maxthreads/1024 | other |")
    print("|---|---:|---:|---:|---:|---:|")
    for arm, r in result.items():
        print(f"| {arm} | {r['attempts']} | {r['verify_gpu_code_refused']} | {r.get(BELOW, 0)} | {r.get(ABOVE, 0)} | "
              f"{r.get(OTHER, 0)} |")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
