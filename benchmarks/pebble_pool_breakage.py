"""When pebble gives up on a process pool (results/evaluator-fault-recovery.md), measured with real workers.

Two cases, each on a fresh ``pebble.ProcessPool`` of 2 spawned workers, printed as a table:

- ``dies holding the channel lock``: a task takes the lock pebble's workers share to fetch tasks and send results
  (as a worker does while it unpickles a task or pickles a result), then ends its process; 4 more tasks follow.
- ``ends between tasks``: a task answers, then its worker ends 0.3 s later while the pool is idle; 1 more task.

For each: what the following tasks got (their results, or the error) and after how many seconds.  The evaluator and
the sandbox start a new pool in both cases (``evaluator.pool.Evaluator._ensure_pool``, ``sandbox.WorkerPool._ensure``).

    python benchmarks/pebble_pool_breakage.py
"""
from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout


def die_holding_lock() -> None:
    from pebble.pool.channel import WorkerChannel

    channel = next(o for o in gc.get_objects() if isinstance(o, WorkerChannel))
    channel.mutex.acquire()  # the reader and the writer lock, as pebble's task_transaction holds them
    os._exit(75)


def answer_then_end(value: int) -> int:
    threading.Timer(0.3, os._exit, (75,)).start()
    return value


def echo(value: int) -> int:
    return value


def _after(pool: object, n: int, wait_s: float) -> tuple[str, float]:
    t0 = time.perf_counter()
    got = []
    for i in range(n):
        try:
            got.append(str(pool.schedule(echo, args=(i,)).result(timeout=wait_s)))
        except FutureTimeout:
            got.append("no answer")
        except Exception as e:  # noqa: BLE001 - what pebble raises is the measurement
            got.append(f"{type(e).__name__}: {e}")
    return "; ".join(dict.fromkeys(got)), time.perf_counter() - t0


def main() -> int:
    from pebble import ProcessExpired, ProcessPool

    ctx = multiprocessing.get_context("spawn")
    rows = []
    pool = ProcessPool(max_workers=2, context=ctx)
    pool.schedule(echo, args=(0,)).result()
    try:
        pool.schedule(die_holding_lock).result(timeout=30)
    except ProcessExpired as e:
        first = f"ProcessExpired (exit code {e.exitcode})"
    got, s = _after(pool, 4, 300)
    rows.append(("dies holding the channel lock", first, got, s, pool.active))
    pool.stop()

    pool = ProcessPool(max_workers=2, context=ctx)
    first = str(pool.schedule(answer_then_end, args=(7,)).result())
    time.sleep(2)
    got, s = _after(pool, 1, 60)
    rows.append(("ends between tasks", first, got, s, pool.active))
    pool.stop()

    print("| case | the task itself | the tasks after it | seconds | pool active after |")
    print("|---|---|---|---:|---|")
    for case, first, got, s, active in rows:
        print(f"| {case} | {first} | {got} | {s:.1f} | {active} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
