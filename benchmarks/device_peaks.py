"""Measured peaks of this machine for the evaluator's roofline guard (params.yaml evaluator.roofline_peaks).

    python3 benchmarks/device_peaks.py --target llvm --out results/peaks_llvm.json
    python3 benchmarks/device_peaks.py --target cuda --out $OUT/peaks_cuda.json     # on the H200 (device tool)

Arithmetic: the best of several timed dense matmuls through torch (MKL/oneDNN on the CPU, cuBLAS on the
GPU), per dtype.  Bandwidth: copies (read + write bytes) and read-only reductions at sizes from
cache-resident ("warm": what the timing protocol sees, since it reruns a kernel on the same buffers) to
far beyond the last-level cache ("cold": DRAM / HBM).  CUDA times with CUDA events, the CPU with
perf_counter; every figure is the best repeat (a peak, not a typical value).  On llvm, when TVM is
importable, a TVM-built copy kernel timed by ``time_evaluator`` is measured too: torch's per-call overhead
(~1 us) hides the speed of L1/L2-resident copies, which is exactly what a small kernel sees.

The suggested roofline peak multiplies the best measured arithmetic rate (over the dtypes a TVM kernel of
ours can use on that target) and the best measured bandwidth by ``--margin``: library kernels reach
~80-95% of the hardware's limit and a short bench may miss turbo states, and a guard that flags a real
kernel would withhold a deserved reward, so the bound must err on the generous side.

Only torch, numpy and the standard library: the lent GPU machine has no project virtualenv.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

# dtypes a TVM kernel of our workloads may run at: float32 everywhere; float16 workloads compute in fp16
# with fp32 accumulation (tensor cores on the GPU, AVX-512-FP16 where LLVM uses it on the CPU)
CPU_DTYPES = ("float32", "float16", "bfloat16")
GPU_DTYPES = ("float32", "tf32", "float16", "bfloat16")
ROOFLINE_DTYPES = {"llvm": ("float32", "float16"), "cuda": ("float32", "tf32", "float16", "bfloat16")}


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm", help="which device to measure")
    ap.add_argument("--out", help="write the JSON here")
    ap.add_argument("--threads", type=int, default=0, help="llvm: torch threads (0: every core of this machine)")
    ap.add_argument("--matmul-size", type=int, default=0, help="square matmul size (0: 2048 CPU, 8192 GPU)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (the best is kept)")
    ap.add_argument("--margin", type=float, default=1.5,
                    help="suggested roofline peak = best measured x margin (see the module docstring)")


def _best(fn: Callable[[], float], repeats: int) -> float:
    """Smallest of ``repeats`` timings (seconds) after one warm-up call."""
    fn()
    return min(fn() for _ in range(repeats))


# ------------------------------------------------------------------------------------------------ CPU
def _cpu_timer(op: Callable[[], Any], inner: int) -> Callable[[], float]:
    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        return (time.perf_counter() - t0) / inner
    return run


def _inner_for(seconds_per_call: float, budget_s: float = 0.05) -> int:
    return max(1, min(100_000, int(budget_s / max(seconds_per_call, 1e-9))))


def cpu_matmul(n: int, dtype: str, repeats: int) -> dict[str, Any]:
    import torch

    dt = getattr(torch, dtype)
    a = torch.rand(n, n, dtype=torch.float32).to(dt)
    b = torch.rand(n, n, dtype=torch.float32).to(dt)
    c = torch.empty(n, n, dtype=dt)
    op = lambda: torch.mm(a, b, out=c)
    t = _best(_cpu_timer(op, 1), repeats)
    return {"dtype": dtype, "n": n, "seconds": t, "tflops": 2.0 * n ** 3 / t / 1e12}


def cpu_bandwidth(nbytes: int, repeats: int) -> dict[str, Any]:
    """Copy (read + write) and read-only sum bandwidth over fp32 buffers of ``nbytes`` each."""
    import torch

    n = max(1, nbytes // 4)
    src = torch.rand(n)
    dst = torch.empty(n)
    copy = lambda: dst.copy_(src)
    total = lambda: src.sum()
    t_copy = _best(_cpu_timer(copy, _inner_for(_cpu_timer(copy, 1)())), repeats)
    t_sum = _best(_cpu_timer(total, _inner_for(_cpu_timer(total, 1)())), repeats)
    return {"bytes": n * 4, "copy_gbps": 2 * n * 4 / t_copy / 1e9, "read_gbps": n * 4 / t_sum / 1e9,
            "copy_s": t_copy, "read_s": t_sum}


def tvm_copy_bandwidth(nbytes: int, threads: int, repeats: int) -> dict[str, Any] | None:
    """Copy bandwidth of a TVM-built, vectorised copy kernel timed by ``time_evaluator`` (the evaluator's
    own timing path: no Python call overhead per run, so cache-resident sizes show the caches' real speed).
    Built for the host CPU (``mcpu`` = the system's), serial and split over ``threads``; the best is kept.
    None when TVM is not importable (e.g. on the GPU image)."""
    try:
        import numpy as np
        import tvm
        from tvm import te
        from tvm.s_tir import Schedule
    except ImportError:
        return None
    n = max(64, nbytes // 4)
    n -= n % 64
    a_ph = te.placeholder((n,), "float32", name="A")
    b_ph = te.compute((n,), lambda i: a_ph[i], name="B")
    func = te.create_prim_func([a_ph, b_ph])
    target = tvm.target.Target({"kind": "llvm", "num-cores": threads,
                                "mcpu": tvm.target.codegen.llvm_get_system_cpu()})
    dev = tvm.cpu(0)
    a = tvm.runtime.tensor(np.random.rand(n).astype("float32"), dev)
    b = tvm.runtime.tensor(np.zeros(n, "float32"), dev)
    best = float("inf")
    for parallel in (False, True) if threads > 1 else (False,):
        sch = Schedule(tvm.IRModule({"main": func}))
        (i,) = sch.get_loops(sch.get_sblock("B"))
        outer, inner = sch.split(i, [None, 16])
        sch.vectorize(inner)
        if parallel:
            par, _ = sch.split(outer, [threads, None])
            sch.parallel(par)
        rt = tvm.tirx.build(sch.mod, target=target)
        once = rt.time_evaluator("main", dev, number=1, repeat=1)(a, b).mean
        number = _inner_for(once, 0.02)
        res = rt.time_evaluator("main", dev, number=number, repeat=repeats)(a, b)
        best = min(best, min(res.results))
    return {"copy_gbps": 2 * n * 4 / best / 1e9, "copy_s": best}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def cpu_cache_bytes() -> dict[str, int]:
    """Per-level data cache sizes from sysfs (index order: L1d, L1i, L2, L3)."""
    out: dict[str, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            p = os.path.join(base, d)
            kind, level, size = (_read(os.path.join(p, f)) for f in ("type", "level", "size"))
            if kind == "Instruction":
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            out[f"L{level}"] = int(size.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return out


def measure_llvm(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    n = args.matmul_size or 2048
    caches = cpu_cache_bytes()
    matmuls = []
    for dt in CPU_DTYPES:
        try:
            matmuls.append(cpu_matmul(n, dt, args.repeats))
        except (RuntimeError, TypeError) as e:  # a dtype this torch build cannot multiply on the CPU
            matmuls.append({"dtype": dt, "n": n, "error": str(e)[:200]})
    # warm: inside L1 / L2; cold: 4x the last-level cache (capped), so the copy streams from DRAM
    llc = max(caches.values()) if caches else 32 << 20
    sizes = [16 << 10, 256 << 10, 1 << 20, 8 << 20, min(4 * llc, 1 << 30)]
    bw = []
    for size in sizes:
        row = cpu_bandwidth(size, args.repeats)
        compiled = tvm_copy_bandwidth(size, threads, args.repeats)
        if compiled is not None:
            row.update(tvm_copy_gbps=compiled["copy_gbps"], tvm_copy_s=compiled["copy_s"])
        bw.append(row)
    return {"device": f"{cpu_model()} x{os.cpu_count()}", "threads": threads, "caches": caches,
            "torch": torch.__version__, "matmul": matmuls, "bandwidth": bw}


# ------------------------------------------------------------------------------------------------ CUDA
def _cuda_timer(op: Callable[[], Any], inner: int) -> Callable[[], float]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run() -> float:
        start.record()
        for _ in range(inner):
            op()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner
    return run


def cuda_matmul(n: int, dtype: str, repeats: int) -> dict[str, Any]:
    import torch

    tf32 = dtype == "tf32"
    dt = torch.float32 if tf32 else getattr(torch, dtype)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        c = torch.empty(n, n, device="cuda", dtype=dt)
        op = lambda: torch.mm(a, b, out=c)
        t = _best(_cuda_timer(op, 10), repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return {"dtype": dtype, "n": n, "seconds": t, "tflops": 2.0 * n ** 3 / t / 1e12}


def cuda_bandwidth(nbytes: int, repeats: int) -> dict[str, Any]:
    import torch

    n = max(1, nbytes // 4)
    src = torch.rand(n, device="cuda")
    dst = torch.empty(n, device="cuda")
    acc = torch.empty((), device="cuda")
    copy = lambda: dst.copy_(src)
    total = lambda: torch.sum(src, dim=0, out=acc)  # torch 2.11 has no out= without dim
    # enough back-to-back calls between two events that launch gaps do not dominate small copies
    inner = max(10, min(2000, (1 << 31) // max(nbytes, 1)))
    t_copy = _best(_cuda_timer(copy, inner), repeats)
    t_sum = _best(_cuda_timer(total, inner), repeats)
    return {"bytes": n * 4, "copy_gbps": 2 * n * 4 / t_copy / 1e9, "read_gbps": n * 4 / t_sum / 1e9,
            "copy_s": t_copy, "read_s": t_sum}


def measure_cuda(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--target cuda: torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    n = args.matmul_size or 8192
    matmuls = [cuda_matmul(n, dt, args.repeats) for dt in GPU_DTYPES]
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    # warm: well inside L2 (src + dst both resident); cold: far beyond it (HBM)
    sizes = [1 << 20, 4 << 20, max(1 << 20, l2 // 4), 1 << 30, 4 << 30]
    bw = [cuda_bandwidth(s, args.repeats) for s in sizes]
    return {"device": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
            "memory_gb": props.total_memory / 1e9, "l2_bytes": l2, "torch": torch.__version__,
            "cuda": torch.version.cuda, "matmul": matmuls, "bandwidth": bw}


# ------------------------------------------------------------------------------------------------ report
def summarise(target: str, m: dict[str, Any], margin: float) -> dict[str, Any]:
    ok = [r for r in m["matmul"] if "tflops" in r and r["dtype"] in ROOFLINE_DTYPES[target]]
    tflops = max(r["tflops"] for r in ok)
    rates = lambda b: [b["copy_gbps"], b["read_gbps"], b.get("tvm_copy_gbps", 0.0)]
    gbps = max(max(rates(b)) for b in m["bandwidth"])
    cold = m["bandwidth"][-1]
    return {"best_tflops": tflops, "best_tflops_dtype": max(ok, key=lambda r: r["tflops"])["dtype"],
            "warm_gbps": gbps, "cold_gbps": max(rates(cold)), "margin": margin,
            "roofline_peak": {"tflops": round(tflops * margin, 4), "gbps": round(gbps * margin, 1)}}


def print_table(target: str, m: dict[str, Any], s: dict[str, Any]) -> None:
    print(f"{target}: {m['device']}")
    print(f"{'matmul':<10}{'n':>7}{'TFLOP/s':>12}")
    for r in m["matmul"]:
        print(f"{r['dtype']:<10}{r['n']:>7}{r['tflops']:>12.4f}" if "tflops" in r
              else f"{r['dtype']:<10}{r['n']:>7}   error: {r['error'][:60]}")
    tvm_col = any("tvm_copy_gbps" in b for b in m["bandwidth"])
    print(f"{'buffer':>12}{'copy GB/s':>12}{'read GB/s':>12}" + (f"{'TVM copy GB/s':>16}" if tvm_col else ""))
    for b in m["bandwidth"]:
        size = b["bytes"]
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"{label:>12}{b['copy_gbps']:>12.1f}{b['read_gbps']:>12.1f}"
              + (f"{b.get('tvm_copy_gbps', float('nan')):>16.1f}" if tvm_col else ""))
    print(f"best {s['best_tflops']:.4f} TFLOP/s ({s['best_tflops_dtype']}), warm {s['warm_gbps']:.1f} GB/s, "
          f"cold {s['cold_gbps']:.1f} GB/s -> roofline_peaks.{target}: {json.dumps(s['roofline_peak'])} "
          f"(x{s['margin']})")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    m = measure_llvm(args) if args.target == "llvm" else measure_cuda(args)
    s = summarise(args.target, m, args.margin)
    result = {"target": args.target, "host": platform.node(), "python": sys.version.split()[0],
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "bench_seconds": time.perf_counter() - t0, **m, "summary": s}
    print_table(args.target, m, s)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = f"{args.out}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
        os.replace(tmp, args.out)  # atomic: a reader never sees half a file
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args(ap)
    return ap


if __name__ == "__main__":
    sys.exit(main(build_parser().parse_args()))
