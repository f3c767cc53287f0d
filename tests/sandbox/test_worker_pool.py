"""The sandbox's worker pool with real pebble workers: outcomes instead of exceptions, and a pool that outlives
pebble giving up on its own."""
from __future__ import annotations

import os
import threading
import time

from little_dragon.sandbox import WorkerPool


def answer_then_end(value: int) -> int:
    """Answers, then ends this worker abnormally 0.3 s later, while the pool is idle."""
    threading.Timer(0.3, os._exit, (75,)).start()
    return value


def double(value: int) -> int:
    return 2 * value


def crash() -> None:
    os.abort()


def test_a_pool_broken_by_a_worker_ending_between_tasks_is_replaced(tmp_path):
    with WorkerPool(max_workers=1, state_dir=str(tmp_path)) as pool:
        assert pool.run(answer_then_end, 7, timeout=60).value == 7
        deadline = time.time() + 20
        while pool.pool.active and time.time() < deadline:
            time.sleep(0.2)
        assert not pool.pool.active  # pebble gave up on its pool: every task would raise from here on
        out = pool.run(double, 21, timeout=60)
        assert out.ok and out.value == 42, out
        assert pool.pool.active


def test_a_crash_is_an_outcome_and_the_next_task_runs(tmp_path):
    with WorkerPool(max_workers=1, state_dir=str(tmp_path)) as pool:
        out = pool.run(crash, timeout=60)
        assert not out.ok and out.kind == "crash" and "exit code -6" in out.message, out  # SIGABRT
        assert pool.run(double, 4, timeout=60).value == 8
