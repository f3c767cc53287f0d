"""Crash containment for TVM work: long-lived worker processes, each the leader of its own process group.

TVM's builders and runners fork helper processes; a hang or a segfault anywhere in that tree must cost
one task, never the caller.  ``WorkerPool`` runs tasks in ``pebble`` worker processes (replaced when one
dies or times out) and, on a timeout or crash, kills the worker's whole process group so no orphaned
builder keeps a core busy.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import signal
import traceback
from typing import Any, Callable

import pebble

_PGID_FILE_ENV = "DRAGON_SANDBOX_PGID_DIR"


def _init_worker(initializer: Callable[[], None] | None) -> None:
    os.setsid()  # own process group: everything this worker forks can be killed as one
    _die_with_parent()
    if initializer is not None:
        initializer()


def _die_with_parent() -> None:
    """A worker outliving its caller (killed with SIGKILL, say) would keep tuning and writing: when the
    parent goes away, kill this worker's whole process group (TVM builder/runner children included)."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


@dataclasses.dataclass
class TaskOutcome:
    ok: bool
    value: Any = None
    kind: str = ""        # "" | "timeout" | "crash" | "error"
    message: str = ""


def _run_reporting_pgid(pgid_path: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    with open(pgid_path, "w") as f:
        f.write(str(os.getpgrp()))
    return fn(*args, **kwargs)


class WorkerPool:
    """``pebble.ProcessPool`` with process-group kill on timeout/crash and outcomes instead of exceptions."""

    def __init__(self, max_workers: int = 1, initializer: Callable[[], None] | None = None,
                 state_dir: str | None = None):
        import tempfile

        self._dir = state_dir or tempfile.mkdtemp(prefix="dragon-sandbox-")
        self._n = 0
        self._max_workers, self._initializer = max_workers, initializer
        self.pool = self._new_pool()

    def _new_pool(self) -> Any:
        return pebble.ProcessPool(max_workers=self._max_workers, initializer=_init_worker,
                                  initargs=(self._initializer,), context=multiprocessing.get_context("spawn"))

    def _ensure(self) -> None:
        """A new pebble pool where the old one broke: pebble gives up on its whole pool when a worker ends abnormally
        while no task runs (its process group killed from outside, say), and every later task would raise."""
        if not self.pool.active:
            try:
                self.pool.stop()
                self.pool.join(timeout=10)
            except Exception:  # noqa: BLE001 - the broken pool's own cleanup
                pass
            self.pool = self._new_pool()

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> TaskOutcome:
        """Run ``fn(*args, **kwargs)`` in a worker; block for its outcome."""
        return self.submit(fn, *args, timeout=timeout, **kwargs).outcome()

    def submit(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> "PendingTask":
        """Start ``fn(*args, **kwargs)`` in a worker and return at once; ``outcome()`` waits for it (the caller works
        meanwhile: the constraint's TVM work beside the model's forward pass)."""
        self._n += 1
        pgid_path = os.path.join(self._dir, f"task-{os.getpid()}-{id(self)}-{self._n}.pgid")
        self._ensure()
        fut = self.pool.schedule(_run_reporting_pgid, args=(pgid_path, fn, args, kwargs), timeout=timeout)
        return PendingTask(self, fut, pgid_path, timeout)

    @staticmethod
    def _kill_group(pgid_path: str) -> None:
        try:
            with open(pgid_path) as f:
                pgid = int(f.read().strip())
        except (OSError, ValueError):
            return
        if pgid > 1 and pgid != os.getpgrp():
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=10)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PendingTask:
    """A task ``WorkerPool.submit`` started; ``outcome()`` blocks for it, once (a timeout or crash kills its process
    group, as ``run`` does)."""

    def __init__(self, pool: WorkerPool, fut: Any, pgid_path: str, timeout: float | None):
        self._pool, self._fut, self._pgid_path, self._timeout = pool, fut, pgid_path, timeout
        self._outcome: TaskOutcome | None = None

    def outcome(self) -> TaskOutcome:
        if self._outcome is None:
            self._outcome = self._wait()
        return self._outcome

    def _wait(self) -> TaskOutcome:
        try:
            return TaskOutcome(True, self._fut.result())
        except concurrent.futures.TimeoutError:
            self._pool._kill_group(self._pgid_path)
            return TaskOutcome(False, kind="timeout", message=f"killed after {self._timeout:.0f} s")
        except pebble.ProcessExpired as e:
            self._pool._kill_group(self._pgid_path)
            return TaskOutcome(False, kind="crash", message=f"worker died: {e} (exit code {e.exitcode})")
        except Exception as e:  # noqa: BLE001 - the task's own exception, reported not raised
            tb = getattr(e, "traceback", None) or traceback.format_exc()
            return TaskOutcome(False, kind="error", message=f"{type(e).__name__}: {e}\n{tb}"[-6000:])
        finally:
            try:
                os.remove(self._pgid_path)
            except OSError:
                pass
