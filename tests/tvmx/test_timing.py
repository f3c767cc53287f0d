"""The shared timing protocol: real TVM timing, and the per-device lock that keeps measurements apart."""
from __future__ import annotations

import multiprocessing
import time


from little_dragon.tvmx.timing import Latency, TimingConfig, device_lock


def _hold(q, tag: str) -> None:
    import tvm

    with device_lock(tvm.cpu(0)):
        q.put((tag, "enter", time.monotonic()))
        time.sleep(0.4)
        q.put((tag, "exit", time.monotonic()))


def test_device_lock_serialises_measurements_across_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAGON_MEASURE_LOCK_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(q, t)) for t in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    ev = sorted((q.get(timeout=5) for _ in range(4)), key=lambda e: e[2])
    # enter/exit pairs never interleave
    assert [e[1] for e in ev] == ["enter", "exit", "enter", "exit"]
    assert ev[0][0] == ev[1][0] and ev[2][0] == ev[3][0]


def test_measure_times_a_real_kernel_with_the_protocol():
    import tvm
    from tvm import te

    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.timing import measure

    a = te.placeholder((256, 256), name="A")
    b = te.compute((256, 256), lambda i, j: a[i, j] * 2.0, name="B")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b]).with_attr("global_symbol", "main")})
    target = {"kind": "llvm", "num-cores": 2}
    lat = measure(fast_build(mod, tvm.target.Target(target)), mod["main"], target,
                  TimingConfig(number=2, repeat=4, min_repeat_ms=1))
    assert isinstance(lat, Latency) and len(lat.samples) == 4
    assert 0 < lat.median_us < 1e5 and lat.spread >= 0
