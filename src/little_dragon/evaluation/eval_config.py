"""``evaluation`` and ``promotion`` sections of params.yaml."""
from __future__ import annotations

import dataclasses
from typing import Any

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    target: dict[str, Any] = field(default_factory=lambda: {"kind": "llvm", "num-cores": 2},
                                   help="TVM target the sealed set is evaluated on (only sealed prompts of "
                                        "this target are used); the GPU run sets cuda.")
    sealed_dir: str = field("artifacts/sealed", help="The sealed set (stage split); read only by this stage.")
    slices: list[str] = field(default_factory=lambda: ["sealed", "heldout_family"],
                              help="Which sealed slices to evaluate (reported separately): sealed workloads "
                                   "(test.jsonl) and held-out families (heldout_families.jsonl).")
    tasks: list[str] = field(default_factory=lambda: ["construction", "refinement"], help="Tasks evaluated.")
    attempts: int = field(4, help="k: attempts per prompt (the baselines get the same k).")
    max_prompts_per_task: int = field(6, help="Per task and slice, at most this many prompts (a seeded draw, "
                                              "one construction prompt per workload first); 0: all. 6 on the "
                                              "embedded default (24 prompts x k=4, scored with their baselines, "
                                              "twice: SFT and RL) keeps `make pipeline` near 30 min on 2 cores; "
                                              "the GPU run sets its own (scripts/device/eval_sealed.sh).")
    improvement_threshold: float = field(1.05, help="Refinement: an attempt improves on the given script when "
                                                    "its speedup over it is at least this.")
    random_baseline: bool = field(True, help="Random valid schedules from MetaSchedule's design space, k per "
                                             "construction prompt (space generator, random decisions, "
                                             "post-processors).")
    metaschedule_baseline: bool = field(True, help="MetaSchedule tuning at k trials and at the harvest's full "
                                                   "budget, from the harvest's measured candidates in trial order.")
    harvest_roots: list[str] = field(default_factory=lambda: ["artifacts/harvest", "data/harvest"],
                                     help="Where the harvests of the sealed workloads are (MetaSchedule baselines).")
    bootstrap_samples: int = field(1000, help="Bootstrap resamples over prompts for confidence intervals.")
    confidence: float = field(0.90, help="Two-sided level of the bootstrap confidence intervals.")
    seed: int = field(0, help="Seed of the prompt draw, the attempts' sampling and the random baseline.")
    report_dir: str = field("monitoring/evaluation", help="Reports and figures per evaluated model "
                                                          "(<report_dir>/<name>/).")


@dataclasses.dataclass(frozen=True)
class PromotionConfig:
    alias: str = field("champion", help="Registry alias the gate moves.")
    min_correctness: float = field(0.0, help="With no champion yet, a candidate needs per-attempt correctness "
                                             "above this (an untrained model writes no correct kernel).")
    speedup_tolerance: float = field(0.98, help="Equal correctness: the candidate's geomean speedup must be at "
                                                "least this times the champion's (timing noise).")
    bootstrap_samples: int = field(1000, help="Bootstrap resamples over prompts for the difference.")
    confidence: float = field(0.90, help="A candidate is refused when the upper bound of this two-sided "
                                         "interval of its correctness difference is below zero.")
    history: str = field("monitoring/champion-history", help="Decision log: <history>.jsonl, .md and .png.")
