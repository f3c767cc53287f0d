"""The RL reward: the project's Evaluator (persistent sandboxed pool, sqlite cache, device lock, one timing
protocol) scoring every completion of a GRPO batch, with its shaped reward quantised against timing noise.

Reward ordering (evaluator.outcome.shaped_reward; checked through the real evaluator in tests/training/
test_rl_reward.py):

    fast correct  >  slow correct  >  copy (refinement returned unchanged)  >  no_op (schedules nothing)
      >  runtime_error = timeout  >  verify_error = build_error  >  apply_error = wrong_result  >  decode_error

A correct kernel earns ``correct_base + w * tanh(ln speedup / scale)`` (w < base), a copy the lowest
correct reward, every failure its category's penalty.  Nothing the trainer sees can raise out of here: a
crashed or hung evaluation is the failure category the evaluator assigns (worker killed and replaced), and
an evaluator that breaks as a whole is restarted once and otherwise scores the batch as ``runtime_error``.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import Counter
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

REFINEMENT = "refinement"


@dataclasses.dataclass
class Scored:
    """One completion's outcome as the trainer and the probes see it."""
    category: str
    reward: float             # quantised: what GRPO gets
    raw_reward: float         # the evaluator's shaped reward
    speedup: float | None = None
    copy: bool = False
    cached: bool = False
    implausible: bool = False
    message: str = ""

    @property
    def correct(self) -> bool:
        return self.category == "correct"


def categories() -> tuple[str, ...]:
    """The evaluator's categories (read from it, so a new one shows up in the metrics without a change here)."""
    from little_dragon.evaluator import outcome

    return tuple(outcome.CATEGORIES)


def quantise(result: Any, quantum: float, reward_cfg: Any) -> float:
    """The shaped reward with its speed bonus rounded to multiples of ``quantum``: timing noise below the
    quantum becomes an exact tie (zero advantage) instead of a gradient.  Failures, copies and implausible
    kernels carry fixed rewards and pass unchanged; a slow kernel is never rounded down onto the copy reward."""
    r = float(result.reward)
    if quantum <= 0 or result.category != "correct" or getattr(result, "copy", False) or result.implausible:
        return r
    base = float(reward_cfg.correct_base)
    q = base + quantum * round((r - base) / quantum)
    floor = base - float(reward_cfg.speedup_weight)  # the copy / worst-correct reward
    return r if q <= floor + 1e-9 else round(q, 10)


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


class KernelReward:
    """TRL reward function (``rewards/KernelReward/mean``) and the scorer of screening and probes.

    Needs the dataset columns ``tvmscript``, ``task`` and ``start_script`` (passed by TRL as keyword lists
    aligned with the completions).  ``make_evaluator`` builds (and rebuilds after a breakdown) the one
    Evaluator; it is started lazily on first use and closed by ``close``."""

    def __init__(self, make_evaluator: Callable[[], Any], reward_cfg: Any, quantum: float = 0.0):
        self.make_evaluator = make_evaluator
        self.reward_cfg = reward_cfg
        self.quantum = quantum
        self.evaluator: Any = None
        self._modules: dict[str, Any] = {}
        # cumulative counters: evaluator throughput inside RL (benchmarks/rl_reward_bench.py reads them)
        self.n_scripts = 0
        self.n_cached = 0
        self.seconds = 0.0
        self.restarts = 0
        self.last: dict[str, float] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Any:
        if self.evaluator is None:
            t0 = time.perf_counter()
            self.evaluator = self.make_evaluator()
            log.info("evaluator pool up in %.1f s (%s)", time.perf_counter() - t0,
                     getattr(self.evaluator, "device", "?"))
        return self.evaluator

    def close(self) -> None:
        if self.evaluator is not None:
            try:
                self.evaluator.close()
            finally:
                self.evaluator = None

    def __enter__(self) -> "KernelReward":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ scoring
    def _module(self, tvmscript: str) -> Any:
        mod = self._modules.get(tvmscript)
        if mod is None:
            from tvm.script import from_source

            mod = self._modules[tvmscript] = from_source(tvmscript)
        return mod

    def _evaluate(self, requests: list[Any]) -> list[Any]:
        """The evaluator's results; a broken evaluator is restarted once, then the batch is a runtime_error."""
        for attempt in (0, 1):
            try:
                return self.start().evaluate_batch(requests)
            except ValueError:
                raise  # a bad workload: the caller's input (scored row by row below)
            except Exception as e:  # noqa: BLE001  pool broken: never crash the trainer
                log.exception("evaluator failed on a batch of %d (attempt %d); restarting it", len(requests), attempt)
                self.restarts += 1
                try:
                    self.close()
                except Exception:  # noqa: BLE001
                    log.exception("closing the broken evaluator")
                self.evaluator = None
                last = e
        from little_dragon.evaluator.outcome import EvalResult

        pen = float(self.reward_cfg.penalties.get("runtime_error", -0.5))
        return [EvalResult(category="runtime_error", reward=pen, message=f"evaluator failed: {last!r}")
                for _ in requests]

    def score(self, scripts: Sequence[str], tvmscript: Sequence[str], task: Sequence[str],
              start_script: Sequence[str]) -> list[Scored | None]:
        """One ``Scored`` per script (``None`` where the *workload* itself is unusable: not the policy's fault)."""
        from little_dragon.evaluator.pool import EvalRequest

        t0 = time.perf_counter()
        reqs, where = [], []
        out: list[Scored | None] = [None] * len(scripts)
        for i, (s, w, t, ref) in enumerate(zip(scripts, tvmscript, task, start_script)):
            try:
                mod = self._module(w)
            except Exception as e:  # noqa: BLE001
                log.error("row %d: workload TVMScript does not parse (%s): no reward", i, str(e)[-200:])
                continue
            reqs.append(EvalRequest(mod, s, ref if t == REFINEMENT and ref else None))
            where.append(i)
        try:
            results = self._evaluate(reqs) if reqs else []
        except ValueError:  # one bad workload in the batch: score the rest one by one
            results = []
            for r in reqs:
                try:
                    results.extend(self._evaluate([r]))
                except ValueError as e:
                    log.error("workload refused by the evaluator: %s", e)
                    results.append(None)
        for i, r in zip(where, results):
            if r is None:
                continue
            out[i] = Scored(category=r.category, reward=quantise(r, self.quantum, self.reward_cfg),
                            raw_reward=float(r.reward), speedup=r.speedup, copy=bool(getattr(r, "copy", False)),
                            cached=bool(r.cached), implausible=bool(r.implausible), message=r.message[:300])
        dt = time.perf_counter() - t0
        done = [s for s in out if s is not None]
        self.n_scripts += len(done)
        self.n_cached += sum(s.cached for s in done)
        self.seconds += dt
        uncached = len(done) - sum(s.cached for s in done)
        self.last = {"eval_s": dt, "scripts": float(len(done)), "uncached": float(uncached),
                     "scripts_per_s_uncached": uncached / dt if uncached and dt > 0 else float("nan"),
                     "cache_hit_rate": (len(done) - uncached) / len(done) if done else float("nan")}
        return out

    def __call__(self, prompts: list[Any], completions: list[str], completion_ids: Any = None, *,
                 tvmscript: list[str], task: list[str], start_script: list[str],
                 log_metric: Callable[[str, float], None] | None = None,
                 log_extra: Callable[[str, list], None] | None = None, **_: Any) -> list[float | None]:
        scored = self.score(completions, tvmscript, task, start_script)
        if log_metric is not None:
            for k, v in batch_metrics(scored).items():
                log_metric(k, v)
            for k, v in self.last.items():
                log_metric(f"evaluator/{k}", v)
        if log_extra is not None:
            log_extra("category", [s.category if s else "no_workload" for s in scored])
            log_extra("speedup", [s.speedup if s and s.speedup else float("nan") for s in scored])
        return [s.reward if s is not None else None for s in scored]


def batch_metrics(scored: Sequence[Scored | None]) -> dict[str, float]:
    """Correctness, the category mix (every category, zeros included), copy and no-op rates, geomean speedup."""
    done = [s for s in scored if s is not None]
    if not done:
        return {}
    n = len(done)
    counts = Counter(s.category for s in done)
    out = {"kernel/correct_rate": counts["correct"] / n,
           "kernel/copy_rate": sum(s.copy for s in done) / n,
           "kernel/no_op_rate": counts.get("no_op", 0) / n,
           "kernel/implausible_rate": sum(s.implausible for s in done) / n,
           "kernel/geomean_speedup_correct": geomean([s.speedup for s in done if s.correct and not s.copy]),
           "kernel/raw_reward_mean": sum(s.raw_reward for s in done) / n}
    for c in categories():
        out[f"kernel/category/{c}"] = counts.get(c, 0) / n
    return out
