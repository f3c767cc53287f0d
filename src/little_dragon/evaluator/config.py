"""The ``evaluator`` section of params.yaml: pool, timeouts, cache, tolerances, reward weights, roofline peaks."""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float = field(1e-3, help="Relative tolerance: |out - ref| may grow with rtol * |ref|.")
    atol: float = field(1e-4, help="Absolute tolerance, scaled by max(1, max|ref|) of that output.")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    correct_base: float = field(1.0, help="Reward of a numerically correct kernel at speedup 1.")
    speedup_weight: float = field(0.9, help="Amplitude of the bounded speedup bonus (keep < correct_base).")
    speedup_log_scale: float = field(1.3863, help="log-speedup that gives tanh(1)=0.76 of the bonus (ln 4).")
    penalties: dict[str, float] = field(default_factory=lambda: {
        "decode_error": -1.0, "apply_error": -0.8, "wrong_result": -0.8, "verify_error": -0.6,
        "build_error": -0.6, "runtime_error": -0.5, "timeout": -0.5, "no_op": -0.3},
        help="Reward of each failure category (no_op, a script that schedules nothing, is the mildest: it "
             "breaks nothing, but must never pay like a kernel).")
    copy_reward: float = field(0.0, help="Reward of a refinement that returns the given script's kernel: "
                                        "correct, but below every correct kernel that changed something "
                                        "(> correct_base - speedup_weight) and above every failure.")
    noise_floor: dict[str, float] = field(default_factory=lambda: {"llvm": 0.15, "cuda": 0.02},
                                          help="Timing noise floor by target kind, in |log speedup|: gains "
                                               "within it earn no bonus (measured spread: H200 ~0.0005-0.002, "
                                               "2-core CPU 0.07-0.37 under load).")
    implausible_reward: float = field(1.0, help="Reward of a correct kernel whose speed beats the roofline: "
                                               "correctness counts, the speed claim does not.")


@dataclasses.dataclass(frozen=True)
class RooflinePeak:
    tflops: float = field(1.0, help="Peak arithmetic throughput of the device, TFLOP/s.")
    gbps: float = field(1000.0, help="Peak bandwidth, GB/s (warm-cache bandwidth: timing reruns on hot data).")


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    pool_size: int = field(0, help="Worker processes (0: one per CPU core). Builds run in parallel.")
    worker_max_tasks: int = field(500, help="Recycle a worker after this many evaluations (0: never).")
    build_timeout_s: float = field(60.0, help="Apply + post-process + build budget per script, seconds.")
    run_timeout_s: float = field(60.0, help="Correctness + timing budget per script, seconds (device lock "
                                            "waiting excluded).")
    memory_limit_gb: float = field(8.0, help="Address-space limit of a worker (RLIMIT_AS; 0: none). Not "
                                             "applied on CUDA, whose driver reserves huge virtual ranges.")
    preload_tensor_intrinsics: str = field("auto", help="Import tvm.s_tir.tensor_intrin (13-70 s) when a "
                                           "worker starts: always | never | auto (on CUDA targets; on llvm "
                                           "lazily when a trace tensorizes).")
    cache_path: str = field("artifacts/evaluator/cache.sqlite", help="sqlite result cache ('' disables).")
    remeasure_implausible: bool = field(True, help="Re-check and re-time a kernel faster than the roofline.")
    roofline_slack: float = field(1.0, help="A latency below roofline_bound / slack is implausible.")
    roofline_peaks: dict[str, RooflinePeak] = field(default_factory=lambda: {
        "llvm": RooflinePeak(tflops=0.43, gbps=550.0), "cuda": RooflinePeak(tflops=1170.9, gbps=20000.0)},
        help="Device peaks by target kind: measured with benchmarks/device_peaks.py (x1.5 margin); where each "
             "number came from is noted in params.yaml.")
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: {
        "float64": Tolerance(1e-7, 1e-9), "float32": Tolerance(1e-3, 1e-4),
        "float16": Tolerance(2e-2, 2e-2), "bfloat16": Tolerance(5e-2, 5e-2)},
        help="Tolerances by output dtype; integer and bool outputs compare exactly.")
    reward: RewardConfig = field(default_factory=RewardConfig, help="Shaped reward weights.")
