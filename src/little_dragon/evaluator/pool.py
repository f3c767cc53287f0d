"""The evaluator: a persistent pebble pool of sandboxed workers, the result cache and the batch API.

``Evaluator(target).evaluate_batch(requests)`` takes scripts in and gives categorised, rewarded results
out, in order.  Decoding happens here (cheap, pure Python; a decode error never costs a worker); the rest
runs in workers (worker.py).  Workers fork from a forkserver that has TVM imported already, so a worker
killed by a timeout or a crash is replaced in well under a second, and a caller that has initialised
CUDA (an RL trainer) never forks its CUDA state into them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Sequence

from pebble import ProcessExpired, ProcessPool

from little_dragon.evaluator import worker
from little_dragon.evaluator.cache import ResultCache, baseline_key, result_key
from little_dragon.evaluator.config import EvaluatorConfig
from little_dragon.evaluator.outcome import CATEGORY_OF_PHASE, EvalResult, shaped_reward
from little_dragon.evaluator.script import ScriptDecodeError, canonical_trace, decode_script_lines
from little_dragon.tvmx import target as tgt
from little_dragon.tvmx.timing import TimingConfig

log = logging.getLogger(__name__)

EVALUATOR_VERSION = "2"           # bump when a change makes cached results stale (2: MetaSchedule-order replay, no_op)
DETERMINISTIC = {"decode_error", "apply_error", "verify_error", "build_error", "runtime_error",
                 "wrong_result", "no_op", "correct"}
STOP_AFTER = ("time", "build", "verify")


@dataclasses.dataclass
class EvalRequest:
    workload: Any                      # an IRModule / PrimFunc, or its TVMScript text
    script: str                        # the model's script
    reference_script: str | None = None  # refinement: speed is measured against this script's latency


@dataclasses.dataclass
class _Workload:
    key: str          # decimal tvm_ffi.structural_hash (the workload store's structural_hash)
    script: str       # TVMScript the workers parse
    flops: float      # of one call (roofline guard)
    nbytes: float     # arguments' bytes (roofline guard)


def _project_path(p: str) -> Path:
    """params.yaml paths are relative to the project root (where DVC runs stages)."""
    from little_dragon.config import PROJECT_ROOT

    path = Path(p).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit code {code}"


class Evaluator:
    """One target, one device, one pool. Use as a context manager (or call ``close``).

    ``stop_after`` checks scripts without a device: ``"verify"`` (decode, apply, post-process/verify;
    category ``verified``) or ``"build"`` (and generate code, CUDA included: category ``built``), how CI
    judges CUDA records on a machine without a GPU."""

    def __init__(self, target: dict | str = "llvm", cfg: EvaluatorConfig | None = None,
                 timing_cfg: TimingConfig | None = None, *, test_hooks: bool = False,
                 stop_after: str = "time") -> None:
        if stop_after not in STOP_AFTER:
            raise ValueError(f"stop_after must be one of {STOP_AFTER}, not {stop_after!r}")
        self.stop_after = stop_after
        self.cfg = cfg or EvaluatorConfig()
        self.timing_cfg = timing_cfg or TimingConfig()
        self.target = tgt.normalize(target)
        self.kind = self.target["kind"]
        self.test_hooks = test_hooks
        self.pool_size = self.cfg.pool_size or os.cpu_count() or 1
        cache_path = _project_path(self.cfg.cache_path) if self.cfg.cache_path and stop_after == "time" else None
        self.cache = ResultCache(cache_path) if cache_path else None
        self._phase_dir = tempfile.mkdtemp(prefix="dragon-eval-phases-")
        self._baselines: dict[str, dict] = {}
        self._workloads: dict[int, _Workload] = {}
        self._pool: Any = None
        self._start_pool()
        # first task: starts the workers and names the device (part of the cache key)
        self.device = self._pool.schedule(worker.describe_device, timeout=600).result()
        # backstop over the in-worker watchdogs: lock waiting and a lazy intrinsic import are not budgeted
        self._task_timeout = (self.cfg.build_timeout_s + 3 * self.cfg.run_timeout_s
                              + self.pool_size * self.cfg.run_timeout_s + 180.0)

    def _start_pool(self) -> None:
        if self.kind == "llvm":
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["little_dragon.evaluator.worker", "tvm", "tvm.s_tir.meta_schedule",
                                        "little_dragon.evaluator.numerics"])
        else:
            # a process forked after the CUDA driver is initialised gets CUDA_ERROR_NOT_INITIALIZED (seen
            # on the H200 with the forkserver preloading TVM): GPU workers start fresh (spawn) and stay alive
            ctx = multiprocessing.get_context("spawn")
        self._pool = ProcessPool(
            max_workers=self.pool_size, max_tasks=self.cfg.worker_max_tasks, context=ctx,
            initializer=worker.init_worker,
            initargs=(self.cfg, self.timing_cfg, self.target, self._phase_dir, self.test_hooks))

    def _ensure_pool(self) -> None:
        """A new pool where pebble's broke.  pebble gives up on its whole pool when a worker ends abnormally while
        no task runs (between tasks: a GPU worker whose buffers throw from a destructor, a worker the OOM killer took;
        ``BrokenProcessPool``, then ``RuntimeError`` for every later task), and a worker that dies holding the pool's
        channel lock stalls the others until they end the same way.  The judge must outlive that."""
        if self._pool is not None and not self._pool.active:
            log.warning("evaluator: the worker pool broke (a worker ended outside a task); starting a new one")
            try:
                self._pool.stop()
                self._pool.join(timeout=10)
            except Exception:  # noqa: BLE001 - the broken pool's own cleanup; the new one is what matters
                pass
            self._start_pool()

    def _schedule(self, fn: Any, task: dict) -> Any:
        """``fn(task)`` on the pool, on a new one if pebble's broke (also between ``_ensure_pool`` and now: a worker of
        the last batch may end while this one is being sent)."""
        self._ensure_pool()
        try:
            return self._pool.schedule(fn, args=(task,), timeout=self._task_timeout)
        except RuntimeError:  # pebble's "Unexpected error within the Pool": it broke just now
            self._ensure_pool()
            return self._pool.schedule(fn, args=(task,), timeout=self._task_timeout)

    @property
    def protocol(self) -> str:
        """What makes a cached result stale: the timing protocol, tolerances, the roofline guard."""
        c = dataclasses.asdict(self.cfg)
        return hashlib.sha1(json.dumps(
            [EVALUATOR_VERSION, dataclasses.asdict(self.timing_cfg), c["tolerances"], c["roofline_peaks"],
             c["roofline_slack"], c["remeasure_implausible"]], sort_keys=True).encode()).hexdigest()[:12]

    def roofline_bound_s(self, w: "_Workload") -> float:
        from little_dragon.evaluator.roofline import bound_seconds

        peak = self.cfg.roofline_peaks.get(self.kind)
        return bound_seconds(w.flops, w.nbytes, peak) if peak else 0.0

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join(timeout=30)
            self._pool.stop()
            self._pool = None
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        shutil.rmtree(self._phase_dir, ignore_errors=True)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- API
    def evaluate(self, workload: Any, script: str, reference_script: str | None = None) -> EvalResult:
        return self.evaluate_batch([EvalRequest(workload, script, reference_script)])[0]

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[EvalResult]:
        """Scripts in, results out, in order. Only a bad *workload* raises (the caller's input)."""
        t0 = time.perf_counter()
        workloads = [self._workload(r.workload) for r in requests]
        # refinement: the scripts being refined are scored first (cached, so paid once)
        refs = {(w.key, r.reference_script): (w, r.reference_script)
                for w, r in zip(workloads, requests) if r.reference_script is not None}
        ref_raw = {k: v[0] for k, v in zip(refs, self._raw_batch(list(refs.values())))}
        raws = self._raw_batch([(w, r.script) for w, r in zip(workloads, requests)])
        if self.stop_after == "time":
            self._fill_baselines(workloads, raws)
        elapsed = time.perf_counter() - t0
        out = []
        for w, r, (raw, cached, eval_s) in zip(workloads, requests, raws):
            ref = ref_raw.get((w.key, r.reference_script)) if r.reference_script is not None else None
            out.append(self._result(w, raw, cached, eval_s, ref))
        log.debug("batch of %d in %.2fs", len(requests), elapsed)
        return out

    # ---------------------------------------------------------------- internals
    def _workload(self, workload: Any) -> _Workload:
        import tvm

        from little_dragon.workloads.store import structural_hash

        if isinstance(workload, str):
            from tvm.script import from_source

            try:
                workload = from_source(workload)
            except Exception as e:  # noqa: BLE001
                raise ValueError(f"workload TVMScript does not parse: {str(e)[-500:]}") from None
        if isinstance(workload, tvm.tirx.PrimFunc):
            workload = tvm.IRModule({"main": workload})
        if not isinstance(workload, tvm.IRModule) or "main" not in [g.name_hint for g in workload.get_global_vars()]:
            raise ValueError("a workload is an IRModule with one PrimFunc named 'main'")
        h = structural_hash(workload)
        w = self._workloads.get(h)
        if w is None:
            from little_dragon.evaluator.roofline import workload_flops_bytes

            w = self._workloads[h] = _Workload(str(h), workload.script(), *workload_flops_bytes(workload))
        return w

    def _raw_batch(self, items: list[tuple[_Workload, str]]) -> list[tuple[dict, bool, float]]:
        """(raw result, from cache, seconds) per (workload, script); identical scripts evaluated once."""
        slots: list[Any] = []
        pending: dict[str, tuple[Any, float, str, _Workload, dict]] = {}
        for w, script in items:
            t0 = time.perf_counter()
            hook, lines = None, None
            if self.test_hooks and script.startswith(worker.TEST_HOOK_PREFIX):
                hook = script[len(worker.TEST_HOOK_PREFIX):].strip()
                canonical = script
            else:
                try:
                    trace, lines = decode_script_lines(script)
                    canonical = canonical_trace(trace)
                except ScriptDecodeError as e:
                    slots.append(({"category": "decode_error", "phase": "decode", "message": str(e)}, False,
                                  time.perf_counter() - t0))
                    continue
                except Exception as e:  # noqa: BLE001  a codec bug must not take the caller down
                    slots.append(({"category": "decode_error", "phase": "decode",
                                   "message": f"decoder failed: {type(e).__name__}: {e}"}, False,
                                  time.perf_counter() - t0))
                    continue
            key = result_key(w.key, canonical, self.target, self.device, self.protocol)
            if hook is None and self.cache is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    slots.append((hit, True, time.perf_counter() - t0))
                    continue
            if key not in pending:
                task = {"workload_key": w.key, "workload_script": w.script, "trace_text": canonical, "hook": hook,
                        "bound_s": self.roofline_bound_s(w), "roofline_slack": self.cfg.roofline_slack,
                        "script": script if hook is None else "", "lines": lines if hook is None else None,
                        "stop_after": self.stop_after}
                pending[key] = (self._schedule(worker.evaluate, task), t0, canonical, w, task)
            slots.append(key)
        done: dict[str, tuple[dict, float]] = {}
        futures = {key: fut for key, (fut, *_) in pending.items()}
        for again in (False, True):
            aborted = []
            for key, fut in futures.items():
                raw = self._collect(fut)
                if raw.get("broken_pool") and not again:  # not this script's doing: once more, on a new pool
                    aborted.append(key)
                    continue
                t0, canonical, w, _ = pending[key][1:]
                done[key] = (raw, time.perf_counter() - t0)
                if self.cache is not None and raw.get("category") in DETERMINISTIC and not raw.get("crashed") \
                        and not canonical.startswith(worker.TEST_HOOK_PREFIX):
                    self.cache.put(key, w.key, self.target, self.device, canonical, raw)
            if not aborted:
                break
            # every aborted script at once, on a new pool: their builds run in parallel again
            futures = {key: self._schedule(worker.evaluate, pending[key][4]) for key in aborted}
        return [s if not isinstance(s, str) else (done[s][0], False, done[s][1]) for s in slots]

    def _collect(self, fut: Any) -> dict:
        try:
            return fut.result()
        except BrokenProcessPool:
            return {"category": "runtime_error", "phase": None, "crashed": True, "broken_pool": True,
                    "message": "the evaluator's worker pool broke while this script waited (a worker ended outside a "
                               "task); evaluated again on a new pool, it broke that one too"}
        except FutureTimeout:
            return {"category": "timeout", "phase": None, "crashed": True,
                    "message": f"evaluation exceeded the pool's backstop of {self._task_timeout:.0f} s; worker killed"}
        except ProcessExpired as e:
            left = self._left_result(e.pid)
            if left is not None:  # it left on purpose after a GPU run-time error (worker.py): its own verdict
                left["crashed"] = True
                left["message"] = (left.get("message") or "") + "; worker replaced (its device context is not " \
                    "trusted after a run-time error)"
                return left
            phase = self._phase_of(e.pid)
            if e.exitcode == -signal.SIGALRM:
                budget = self.cfg.build_timeout_s if phase in ("apply", "verify", "build") else self.cfg.run_timeout_s
                return {"category": "timeout", "phase": phase, "crashed": True,
                        "message": f"{phase} exceeded its {budget:g} s budget; worker killed and replaced"}
            return {"category": CATEGORY_OF_PHASE.get(phase, "runtime_error"), "phase": phase, "crashed": True,
                    "message": f"worker died ({_signal_name(e.exitcode)}) during {phase}; replaced"}
        except Exception as e:  # noqa: BLE001  an evaluator bug: reported as a failure, never raised
            log.exception("evaluator internal error")
            return {"category": "runtime_error", "phase": None, "crashed": True,
                    "message": f"evaluator internal error: {type(e).__name__}: {e}"}

    def _left_result(self, pid: int | None) -> dict | None:
        """The result a worker wrote before leaving (``worker._leave``), or None; the phase file goes too."""
        if pid is None:
            return None
        path = Path(worker.result_path(self._phase_dir, pid))
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        path.unlink(missing_ok=True)
        (Path(self._phase_dir) / str(pid)).unlink(missing_ok=True)
        return raw if isinstance(raw, dict) else None

    def _phase_of(self, pid: int | None) -> str:
        if pid is None:
            return "start"
        p = Path(self._phase_dir) / str(pid)
        try:
            phase = p.read_text().strip() or "start"
        except OSError:
            phase = "start"
        p.unlink(missing_ok=True)
        return phase

    def _fill_baselines(self, workloads: list[_Workload], raws: list[tuple[dict, bool, float]]) -> None:
        need = {w.key: w for w, (raw, _, _) in zip(workloads, raws) if raw.get("category") == "correct"}
        futures = {}
        for key, w in need.items():
            if key in self._baselines:
                continue
            bkey = baseline_key(key, self.target, self.device, self.protocol)
            hit = self.cache.get_baseline(bkey) if self.cache is not None else None
            if hit is not None:
                self._baselines[key] = hit
                continue
            task = {"workload_key": key, "workload_script": w.script}
            futures[key] = (bkey, self._schedule(worker.measure_workload_baseline, task))
        for key, (bkey, fut) in futures.items():
            try:
                b = fut.result()
            except ProcessExpired as e:  # a crash, or a worker that left after a GPU error (its verdict kept)
                b = self._left_result(e.pid) or {"error": f"{type(e).__name__}: {e}"}
            except Exception as e:  # noqa: BLE001  timeout of the baseline itself
                b = {"error": f"{type(e).__name__}: {e}"}
            self._baselines[key] = b
            if "error" not in b and self.cache is not None:
                self.cache.put_baseline(bkey, key, self.target, self.device, b)

    def _result(self, w: _Workload, raw: dict, cached: bool, eval_s: float, ref_raw: dict | None) -> EvalResult:
        b = self._baselines.get(w.key) or {}
        res = EvalResult(category=raw["category"], message=raw.get("message", ""), latency_us=raw.get("latency_us"),
                         spread=raw.get("spread"), implausible=bool(raw.get("implausible", False)),
                         roofline_bound_us=raw.get("roofline_bound_us"), max_abs_err=raw.get("max_abs_err"),
                         input_seed=raw.get("input_seed"), phase=raw.get("phase"), cached=cached, eval_s=eval_s,
                         phase_s=dict(raw.get("phase_s", {})), target=self.target, device=self.device,
                         workload_hash=w.key, baseline_us=b.get("us"), baseline_kind=b.get("kind"))
        res.kernel_hash = raw.get("kernel_hash")
        if ref_raw is not None:
            res.mode = "refinement"
        if res.category in ("correct", "built"):
            # a kernel the prompt already had: the given script's (refinement; however the text was shuffled)
            # or the empty script's default one: correct, never an improvement
            res.copy = bool(raw.get("default_kernel")) or (
                ref_raw is not None and bool(res.kernel_hash) and res.kernel_hash == ref_raw.get("kernel_hash"))
            if ref_raw is not None:
                res.reference_us = ref_raw.get("latency_us") if ref_raw.get("category") == "correct" else None
                base = res.reference_us
                if base is None:
                    res.message = (res.message + "; " if res.message else "") + \
                        f"reference script is not correct ({ref_raw.get('category')}): no speedup"
            else:
                base = res.baseline_us
                if base is None and b.get("error"):
                    res.message = (res.message + "; " if res.message else "") + f"baseline failed: {b['error']}"
            if base and res.latency_us:
                res.speedup = base / res.latency_us
        res.reward = shaped_reward(res.category, res.speedup, res.implausible, self.cfg.reward, copy=res.copy,
                                   kind=self.kind)
        return res
