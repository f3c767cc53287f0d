"""The ``rl`` section of params.yaml: where the policy starts, how rewards are timed, screening, retention, GRPO.

Defaults are the CPU default (tiny model, llvm-timed rewards, a few minutes on 2 cores); the GPU recipe
overrides them with ``--set`` (scripts/device/rl_gpu.sh)."""
from __future__ import annotations

import dataclasses
from typing import Literal

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class RewardTimingConfig:
    """A cheaper timing protocol for training rewards. It is part of the evaluator's cache key and protocol,
    so the baseline and the refined (start) script are re-timed under the same protocol as the candidates:
    every speedup in a reward compares like with like."""
    number: int | None = field(None, help="Runs per timed repeat (null: the `timing` section's value).")
    repeat: int | None = field(None, help="Timed repeats (null: the `timing` section's value).")
    min_repeat_ms: int | None = field(None, help="Minimum duration of a repeat, ms (null: `timing`'s value).")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    target: dict | str = field(default_factory=lambda: {"kind": "llvm", "num-cores": 2},
                         help="Target the rewards are measured on (one Evaluator = one target; the harvest's llvm "
                              "target by default); training prompts of other target kinds are skipped. A name (llvm; "
                              "cuda = tvmx.target's H200 dict) replaces the dict: --set target=cuda.")
    reward_devices: str = field(
        "", help="CUDA_VISIBLE_DEVICES of the evaluator's workers, e.g. '1' on a 2-GPU host: the policy trains "
                 "on GPU 0, rewards are timed on GPU 1 (a quiet device, nothing else runs there). Empty: the "
                 "workers see what the trainer sees and time on its GPU 0 (the trainer blocks while they do).")
    eval_pool_size: int = field(1, help="Evaluator workers (0: one per core). 1 on the shared 2-core CPU: the "
                                        "trainer's own thread needs the other core.")
    reward_timing: RewardTimingConfig = field(default_factory=RewardTimingConfig,
                                              help="Timing protocol of training rewards (null fields: `timing`).")
    reward_quantum: dict[str, float] = field(
        default_factory=lambda: {"llvm": 0.1, "cuda": 0.01},
        help="Round rewards to multiples of this, by target kind, so timing noise becomes exact ties instead of "
             "advantages: the bonus' slope at speedup 1 is 0.65 per unit log-speedup, and the measured median "
             "spread is 0.07-0.37 on the 2-core CPU, 0.0005 on the H200 (results/evaluator-*). 0: no rounding.")
    max_prompts: int = field(24, help="Training prompts considered (unique workload, task, start script), "
                                      "drawn deterministically; 0: all.")
    # screening
    screen_rollouts: int = field(4, help="Rollouts per candidate prompt when screening (from the start model).")
    screen_min_distinct: int = field(2, help="A prompt is kept if its screening rollouts gave at least this many "
                                             "distinct (quantised) rewards and not all failed.")
    min_active_prompts: int = field(
        2, help="If screening keeps fewer prompts, the most varied remaining ones fill up to this many (marked "
                "'filled' in screen.json): a weak start model must still train.")
    # dynamic retention
    retire_after: int = field(2, help="Retire a prompt after this many consecutive groups with identical "
                                      "rewards (solved or hopeless: no gradient).")
    reprobe_every: int = field(4, help="Every this many optimizer steps, retired prompts return to the active "
                                       "set for one more try (0: never).")
    # GRPO (TRL GRPOConfig)
    max_steps: int = field(6, help="Optimizer steps.")
    prompts_per_step: int = field(2, help="Distinct prompts per optimizer step (per device).")
    num_generations: int = field(4, help="Completions per prompt (the GRPO group).")
    learning_rate: float = field(1e-4, help="Peak learning rate (SmolLM2: ~1e-6..5e-6).")
    lr_scheduler: str = field("constant", help="Transformers learning-rate schedule name.")
    beta: float = field(0.02, help="KL coefficient against the start model (TRL loads it as the reference; 0: none, "
                                   "and no KL is computed). The prompt pool is small and revisited often.")
    loss_type: str = field("dapo", help="TRL GRPO loss aggregation (grpo, dr_grpo, dapo, bnpo, ...).")
    epsilon: float = field(0.2, help="Lower clipping range of the policy ratio.")
    epsilon_high: float = field(0.28, help="Upper clipping range (DAPO clip-higher).")
    scale_rewards: Literal["group", "batch", "none"] = field(
        "batch", help="Advantage scaling. batch: a group of equally fast kernels differing only by timing noise is "
                      "not inflated to unit variance, as 'group' would do.")
    temperature: float = field(1.0, help="Sampling temperature of rollouts (screening and probes too).")
    max_completion_length: int = field(0, help="Generation budget per script, tokens (a cut script fails to "
                                               "decode, itself a signal). 0: the start model's own budget, saved "
                                               "with it by `dragon train sft` (its longest training script x1.25; "
                                               "script_budget.py), 1024 for a model without one.")
    max_prompt_length: int = field(3072, help="Prompts longer than this many tokens are skipped.")
    precision: Literal["auto", "fp32", "bf16"] = field("auto", help="auto: bf16 on a capable GPU, fp32 on CPU.")
    gradient_checkpointing: bool = field(False, help="Recompute activations (only for large models).")
    logging_steps: int = field(1, help="Log every this many steps (per-step metrics).")
    save_steps: int = field(2, help="Checkpoint every this many steps (a killed run resumes from the last).")
    save_total_limit: int = field(2, help="Checkpoints kept.")
    resume: bool = field(True, help="Resume from the last checkpoint in the output folder if there is one.")
    max_wall_s: float = field(0.0, help="Stop training cleanly after this many seconds (0: no limit); the "
                                        "final probe, save and registration still run.")
    # probes (the paper's ten-rollout curves)
    probe_prompts: int = field(3, help="Fixed retained training prompts probed (0: no probes).")
    probe_rollouts: int = field(10, help="Rollouts per probe prompt.")
    probe_every: int = field(3, help="Probe every this many optimizer steps (step 0 = the start model, and the "
                                     "last step).")
    generation_batch_size: int = field(16, help="Prompts generated together in screening and probes.")
    register: bool = field(True, help="Log the model to MLflow and register it as a new version (stage=rl).")
    cpu_threads: int = field(1, help="torch threads when training on CPU (0: torch's default).")
    seed: int = field(0, help="Seed of prompt draws, sampling and training.")
