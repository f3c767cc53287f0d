"""What one evaluation produces: its category, the numbers, and the shaped reward computed from them."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from little_dragon.evaluator.config import RewardConfig

CATEGORIES = ("decode_error", "apply_error", "verify_error", "build_error", "runtime_error", "timeout",
              "wrong_result", "no_op", "correct")
FAILURES = CATEGORIES[:-1]
CHECKED_ONLY = {"verify": "verified", "build": "built"}   # Evaluator(stop_after=...): passed, not run

# a crash or a kill is charged to the stage the worker was in (see worker.PHASES)
CATEGORY_OF_PHASE = {"start": "runtime_error", "apply": "apply_error", "verify": "verify_error",
                     "build": "build_error", "reference": "runtime_error", "run": "runtime_error",
                     "baseline": "runtime_error"}


@dataclasses.dataclass
class EvalResult:
    category: str
    message: str = ""
    latency_us: float | None = None
    baseline_us: float | None = None
    baseline_kind: str | None = None
    speedup: float | None = None
    reward: float = 0.0
    mode: str = "construction"           # or "refinement": speedup against reference_us
    copy: bool = False                   # a kernel the prompt had: the given script's, or the default one an
                                         # empty script gets (correct, copy_reward, no speed bonus)
    kernel_hash: str | None = None       # hash of the built kernel's generated code (replay.code_hash)
    reference_us: float | None = None    # latency of the script being refined
    spread: float | None = None          # (max - min) / median of the timed repeats
    implausible: bool = False            # faster than the roofline bound: not rewarded for speed
    roofline_bound_us: float | None = None
    max_abs_err: float | None = None
    input_seed: int | None = None        # seed of the fresh random inputs of the correctness run
    phase: str | None = None             # where a failure happened
    cached: bool = False
    eval_s: float = 0.0                  # wall time of this evaluation as seen by the caller
    phase_s: dict[str, float] = dataclasses.field(default_factory=dict)
    target: dict[str, Any] | None = None
    device: str | None = None
    workload_hash: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():  # JSON has no NaN/inf
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


def speed_bonus_log(speedup: float, noise_floor: float) -> float:
    """log(speedup) with the timing noise floor taken out: a gain or loss within the floor is no change."""
    x = math.log(speedup)
    return math.copysign(max(abs(x) - noise_floor, 0.0), x)


def shaped_reward(category: str, speedup: float | None, implausible: bool, cfg: RewardConfig, *,
                  copy: bool = False, kind: str = "llvm") -> float:
    """Correct kernels: base + a bounded bonus in log(speedup); copies of the given script: ``copy_reward``;
    failures (``no_op`` the mildest): the category's penalty.

    Ordering (tests/evaluator/test_reward_order.py): faster correct > slower correct > copy > no_op > the
    other failures by severity.  ``tanh`` keeps the bonus in (-w, +w) with w < base, so the slowest correct
    kernel (> base - w) still outranks a copy, and no single lucky measurement dominates a batch's advantage
    estimate; the bonus counts only log-speedup beyond the target's timing noise floor."""
    if category != "correct":
        return float(cfg.penalties.get(category, min(cfg.penalties.values(), default=-1.0)))
    if copy:
        return float(cfg.copy_reward)
    if implausible:
        return float(cfg.implausible_reward)
    if speedup is None or not math.isfinite(speedup) or speedup <= 0:
        return float(cfg.correct_base)
    x = speed_bonus_log(speedup, cfg.noise_floor.get(kind, 0.0))
    return float(cfg.correct_base + cfg.speedup_weight * math.tanh(x / cfg.speedup_log_scale))
