"""The Evaluator after a GPU kernel's illegal address (results/evaluator-fault-recovery.md).

A CUDA kernel that writes out of bounds leaves its worker's CUDA context broken (a sticky error: every later call
on it fails, and the kernel's buffers throw the same error from their destructors, ending the process wherever they
are freed).  This runs, on one GPU, a batch of valid schedules of a matmul with real illegal-address kernels among
them (the worker's test hook ``illegal-address``: a kernel writing 2^36 floats past its buffer) through a pool of
two workers, and prints per request its category, message and seconds, then the whole batch's wall time.

Arms: ``leave`` (the Evaluator as shipped: after a run-time error on a GPU the worker hands its result over and
leaves, ``evaluator.worker._leave``) and ``stay`` (the workers keep going after such an error, as before that
rule; run in a child process under ``--stay-timeout`` seconds, since that is the arm that may hang).

    PYTHONPATH=src python3 benchmarks/evaluator_fault_recovery.py --out results/x.json      # a GPU machine
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _init_staying(*args: Any) -> None:
    """The pool initializer of the ``stay`` arm: the shipped one, then no worker ever leaves."""
    from little_dragon.evaluator import worker

    worker.init_worker(*args)
    worker._device_state_lost = lambda hook: False


def _matmul(n: int) -> Any:
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _bound(mod: Any, threads: int) -> str:
    """A plain valid CUDA schedule: the output's loops fused and split over blocks of ``threads`` threads."""
    from tvm.s_tir import Schedule

    from little_dragon.codec import canonical_json
    from little_dragon.evaluator.script import encode_script

    sch = Schedule(mod)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    bx, tx = sch.split(sch.fuse(i, j), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return encode_script(canonical_json(sch.trace.as_json(remove_postproc=False)))


def run_arm(arm: str, n: int) -> dict[str, Any]:
    from little_dragon.evaluator import worker
    from little_dragon.evaluator.config import EvaluatorConfig
    from little_dragon.evaluator.pool import EvalRequest, Evaluator
    from little_dragon.tvmx.target import CUDA_H200
    from little_dragon.tvmx.timing import TimingConfig

    if arm == "stay":
        worker.init_worker = _init_staying  # read by Evaluator when it builds its pool (spawned workers re-import it)
    mod = _matmul(n)
    hook = worker.TEST_HOOK_PREFIX + " illegal-address"
    names = ["valid 64", "illegal-address", "valid 128", "valid 256", "illegal-address", "valid 512", "valid 32",
             "valid 1024"]
    scripts = {"valid 64": _bound(mod, 64), "valid 128": _bound(mod, 128), "valid 256": _bound(mod, 256),
               "valid 512": _bound(mod, 512), "valid 32": _bound(mod, 32), "valid 1024": _bound(mod, 1024)}
    cfg = EvaluatorConfig(pool_size=2, cache_path="", build_timeout_s=60.0, run_timeout_s=30.0)
    t0 = time.perf_counter()
    with Evaluator(CUDA_H200, cfg, TimingConfig(number=3, repeat=3, min_repeat_ms=10), test_hooks=True) as ev:
        started = time.perf_counter() - t0
        t1 = time.perf_counter()
        out = ev.evaluate_batch([EvalRequest(mod, hook if name == "illegal-address" else scripts[name])
                                 for name in names])
        batch_s = time.perf_counter() - t1
    rows = [{"request": name, "category": r.category, "eval_s": round(r.eval_s, 2), "message": r.message[:300]}
            for name, r in zip(names, out)]
    return {"arm": arm, "device": ev.device, "pool_start_s": round(started, 1), "batch_s": round(batch_s, 1),
            "rows": rows, "valid_correct": sum(r["category"] == "correct" for r in rows if r["request"] != "illegal-address"),
            "valid": sum(r["request"] != "illegal-address" for r in rows)}


def _table(res: dict[str, Any]) -> str:
    lines = [f"arm {res['arm']} on {res.get('device', '?')}: batch {res.get('batch_s', '-')} s, valid schedules correct "
             f"{res.get('valid_correct', '-')}/{res.get('valid', '-')}",
             "| request | category | eval s | message |", "|---|---|---:|---|"]
    for r in res.get("rows", []):
        lines.append(f"| {r['request']} | {r['category']} | {r['eval_s']} | {r['message'][:120]} |")
    if res.get("error"):
        lines.append(f"(no result: {res['error']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=["leave", "stay"], help="run one arm here and print its JSON (internal)")
    ap.add_argument("--n", type=int, default=256, help="matmul size")
    ap.add_argument("--stay-timeout", type=float, default=150.0, help="seconds before the stay arm counts as hung")
    ap.add_argument("--out", help="write both arms' JSON here")
    args = ap.parse_args(argv)
    if args.arm:
        print("RESULT " + json.dumps(run_arm(args.arm, args.n)), flush=True)
        return 0
    results = []
    for arm, limit in (("leave", 600.0), ("stay", args.stay_timeout)):
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, __file__, "--arm", arm, "--n", str(args.n)], capture_output=True,
                               text=True, timeout=limit)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            res = json.loads(line[7:]) if line else {"arm": arm, "error": f"exit {p.returncode}: {p.stderr[-800:]}"}
        except subprocess.TimeoutExpired:
            res = {"arm": arm, "error": f"no answer in {limit:.0f} s (hung)"}
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(_table(res), f"\n(wall {res['wall_s']} s)\n", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
