"""Evaluator throughput: uncached scripts/s, p50/p95 per-script latency, cache-hit latency, fuzz robustness.

    .venv/bin/python benchmarks/evaluator_bench.py                 # CPU (llvm) default
    .venv/bin/python benchmarks/evaluator_bench.py --target cuda   # on the H200 (device tool)

Scripts are real MetaSchedule design-space samples (distinct random decisions, so none is a cache hit) of
small kernels, plus a large fuzz run of mutated scripts.  Prints one JSON summary (and a table on stderr)
with the phase that dominates (mean seconds per phase over the correct scripts).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def kernels():
    import tvm
    from tvm import te, topi

    def mm(n, m, k):
        A = te.placeholder((n, k), name="A")
        B = te.placeholder((k, m), name="B")
        r = te.reduce_axis((0, k), name="k")
        C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
        return te.create_prim_func([A, B, C])

    X = te.placeholder((128, 256), name="X")
    out = {"matmul_128": mm(128, 128, 128), "matmul_64x256x128": mm(64, 256, 128),
           "softmax_128x256": te.create_prim_func([X, topi.nn.softmax(X)])}
    return {k: tvm.IRModule({"main": f}) for k, f in out.items()}


def sample_scripts(mod, target, n: int, seed: int) -> list[str]:
    """n design-space samples with distinct decisions (MetaSchedule's own sampling)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.codec import canonical_json
    from little_dragon.tvmx.postprocs import light_tune_context
    from little_dragon.evaluator.script import encode_script

    kind = "llvm" if target["kind"] == "llvm" else "cuda"
    scripts: list[str] = []
    seen: set[str] = set()
    s = seed
    while len(scripts) < n and s < seed + 10 * n:
        sg = ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
        for sch in light_tune_context(mod, tvm.target.Target(target), sg, rand_state=s).generate_design_space():
            text = encode_script(canonical_json(sch.trace.as_json(remove_postproc=False)))
            if text not in seen:
                seen.add(text)
                scripts.append(text)
        s += 1
    return scripts[:n]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm", help="llvm | cuda | target JSON")
    ap.add_argument("--scripts", type=int, default=24, help="uncached real scripts per kernel")
    ap.add_argument("--fuzz", type=int, default=2000, help="mutated scripts in the robustness run")
    ap.add_argument("--pool-size", type=int, default=0, help="workers (0: params.yaml / CPU count)")
    ap.add_argument("--out", help="also write the JSON summary here")
    ap.add_argument("--max-memory-gb", type=float, default=10.0,
                    help="address-space limit of this process (0: none). Scripts are decoded in the caller; "
                         "a fuzzed count such as 'loops b5 399999999999999999999' made the codec grow this "
                         "process to 21 GB on the shared 24 GB machine before the limit existed")
    args = ap.parse_args()

    import dataclasses

    from little_dragon.config import load_section
    from little_dragon.evaluator.fuzz import mutants
    from little_dragon.evaluator.outcome import CATEGORIES
    from little_dragon.evaluator.pool import EvalRequest, Evaluator
    from little_dragon.tvmx import target as tgt

    target = tgt.normalize(args.target)
    cfg = load_section("evaluator")
    tmp = tempfile.mkdtemp(prefix="dragon-evalbench-")
    cfg = dataclasses.replace(cfg, cache_path=str(Path(tmp) / "cache.sqlite"),
                              pool_size=args.pool_size or cfg.pool_size)
    timing_cfg = load_section("timing")
    mods = kernels()
    t0 = time.perf_counter()
    scripts = {name: sample_scripts(mod, target, args.scripts, seed=1) for name, mod in mods.items()}
    gen_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    ev = Evaluator(target, cfg, timing_cfg)
    start_s = time.perf_counter() - t0
    if args.max_memory_gb > 0:  # after the pool started: its forkserver and workers keep their own limits
        import resource

        limit = int(args.max_memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    summary: dict = {"target": target, "device": ev.device, "pool_size": ev.pool_size,
                     "pool_start_s": start_s, "script_generation_s": gen_s,
                     "load_average_at_start": os.getloadavg()[0]}  # the machine is shared: say how busy
    try:
        reqs = [EvalRequest(mods[n], s) for n, ss in scripts.items() for s in ss]
        t0 = time.perf_counter()
        res = ev.evaluate_batch(reqs)
        wall = time.perf_counter() - t0
        per = [sum(r.phase_s.values()) for r in res if r.phase_s]  # service time inside a worker
        cats = {c: sum(r.category == c for r in res) for c in CATEGORIES}
        phases: dict[str, list[float]] = {}
        for r in res:
            if r.category == "correct":
                for k, v in r.phase_s.items():
                    phases.setdefault(k, []).append(v)
        phase_mean = {k: statistics.mean(v) for k, v in phases.items()}
        summary["uncached"] = {
            "scripts": len(res), "wall_s": wall, "scripts_per_s": len(res) / wall,
            "p50_s": pct(per, 0.5), "p95_s": pct(per, 0.95), "categories": cats,
            "p50_submit_to_result_s": pct([r.eval_s for r in res], 0.5),
            "phase_mean_s": phase_mean, "dominant_phase": max(phase_mean, key=phase_mean.get) if phase_mean else None,
            "speedup_median": statistics.median([r.speedup for r in res if r.speedup]) if any(r.speedup for r in res) else None,
            # roofline guard against the configured peaks: real kernels must not be flagged
            "implausible": sum(r.implausible for r in res),
            "min_latency_over_roofline_bound": min((r.latency_us / r.roofline_bound_us for r in res
                                                    if r.latency_us and r.roofline_bound_us), default=None),
            "spread_median": statistics.median([r.spread for r in res if r.spread is not None])
            if any(r.spread is not None for r in res) else None,
        }
        t0 = time.perf_counter()
        hits = ev.evaluate_batch(reqs)
        wall = time.perf_counter() - t0
        assert all(h.cached for h in hits if h.category != "timeout")
        summary["cache_hit"] = {"scripts": len(hits), "wall_s": wall, "per_script_ms": 1e3 * wall / len(hits),
                                "p95_ms": 1e3 * pct([h.eval_s for h in hits], 0.95)}

        if args.fuzz <= 0:
            return _report(summary, args)
        pool_scripts = [s for ss in scripts.values() for s in ss]
        fuzz = mutants(pool_scripts, args.fuzz, seed=11)
        # a mutant is scored on the workload of a random kernel (mutations may swap names across kernels)
        names = list(mods)
        freqs = [EvalRequest(mods[names[i % len(names)]], text) for i, (_, text) in enumerate(fuzz)]
        t0 = time.perf_counter()
        fres = ev.evaluate_batch(freqs)
        wall = time.perf_counter() - t0
        fc = {c: sum(r.category == c for r in fres) for c in CATEGORIES}
        assert sum(fc.values()) == len(fres), "uncategorised result"
        timeouts = [(kind, r) for (kind, _), r in zip(fuzz, fres) if r.category == "timeout"]
        summary["fuzz"] = {"scripts": len(fres), "wall_s": wall, "scripts_per_s": len(fres) / wall,
                           "categories": fc, "max_eval_s": max(r.eval_s for r in fres),
                           "timeouts": [{"mutation": k, "phase": r.phase, "message": r.message[:200]}
                                        for k, r in timeouts]}
    finally:
        ev.close()
    return _report(summary, args)


def _report(summary: dict, args: argparse.Namespace) -> int:
    summary["load_average_at_end"] = os.getloadavg()[0]
    print(json.dumps(summary, indent=2, default=str))
    u = summary["uncached"]
    print(f"{u['scripts']} uncached scripts: {u['scripts_per_s']:.2f} scripts/s, p50 {u['p50_s']:.2f} s, "
          f"p95 {u['p95_s']:.2f} s; dominant phase {u['dominant_phase']}; cache hit "
          f"{summary['cache_hit']['per_script_ms']:.2f} ms/script"
          + (f"; fuzz {summary['fuzz']['scripts_per_s']:.1f}/s" if "fuzz" in summary else ""), file=sys.stderr)
    if args.out:
        from little_dragon.atomic import write_json

        write_json(args.out, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
