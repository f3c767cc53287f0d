"""``generation`` section of params.yaml: how attempts are sampled (evaluation, ``dragon optimize``)."""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = field(0, help="Longest script generated, in tokens. 0: the model's own budget, which "
                                        "`dragon train sft` saves with it (its longest training script x1.25, "
                                        "generation_config.json max_new_tokens: tensor-core schedules are 1,081-1,594 "
                                        "SmolLM2 tokens), 1024 for a model without one (script_budget.py). The SFT "
                                        "validity passes use sft.validity_max_new_tokens.")
    temperature: float = field(0.7, help="Sampling temperature of the k attempts (0: greedy, one distinct "
                                         "attempt repeated k times).")
    batch_size: int = field(32, help="Sequences per generate() call (prompts x attempts); the KV cache of a "
                                     "batch is what bounds memory.")
    cache_implementation: str = field("shared_prefix", help="KV cache of local generation: dynamic, static (preallocated; "
                                                      "transformers then compiles the decoding step on a GPU, a "
                                                      "one-off compile per batch shape), or continuous (transformers' "
                                                      "continuous batching, generate_batch: a paged KV cache, no "
                                                      "padding, a finished attempt leaves the batch at once and the k "
                                                      "attempts of a prompt fork its prompt's cache; no logits "
                                                      "processors, so not with constrained decoding), or "
                                                      "shared_prefix (generation/shared_prefix.py: one cache row "
                                                      "per prompt, read once by its k attempts, whose tokens are "
                                                      "interleaved after it; rows leave when their attempts end; "
                                                      "constrained decoding runs on it through its per-attempt "
                                                      "processor hook). "
                                                      "benchmarks/generation_speed.py compares them.")
    constrained: bool = field(False, help="Constrained decoding (generation/constrained.py): only scripts the "
                                          "codec grammar accepts; needs that module. Also the SFT stage's "
                                          "validity passes (first pass only, metrics *_constrained).")
    constrained_resamples: int = field(2, help="Constrained decoding: an attempt whose line failed to apply is "
                                               "generated again at most this many times (counted; 0: keep it).")
    constrained_line_retries: int = field(4, help="Constrained decoding on the shared_prefix engine: a line TVM refuses "
                                                  "is taken back and drawn again inside its attempt, at most this many "
                                                  "times an attempt (counted; 0: the attempt ends at that line and is "
                                                  "resampled whole, constrained_resamples).")
    constrained_finish_back: int = field(24, help="Constrained decoding: an attempt that stops short of a finished "
                                                  "kernel (a line or its end refused with its retries spent, or cut "
                                                  "at max_new_tokens) ends at the longest prefix of its checked lines, "
                                                  "at most this many lines shorter, that the target's post-processors "
                                                  "finish, and `post *`; a block left unbound under a tiling "
                                                  "annotation is tried without it (counted; 0: a refused attempt keeps "
                                                  "its refused line, a cut one is finished at its last line only; the "
                                                  "SFT validity passes, which measure the model, use 0).")
    constrained_processes: int = field(-1, help="Constrained decoding on the shared_prefix engine: the constraint's "
                                                "per-step work (line grammars, TVM states, masks) in this many "
                                                "processes of their own, an engine call's attempts dealt out among "
                                                "them, a prompt's in groups (generation/constraint_process.py; the same attempts as 0: "
                                                "one thread beside the model's loop). Each process starts its own "
                                                "TVM workers and keeps to its share of the cores. -1: by the "
                                                "machine (constraint_process.auto_processes: 4 beside a model on "
                                                "an accelerator of a host with 16 or more cores, else 0).")
    dtype: str = field("auto", help="Weights dtype for generation: auto (bfloat16 on a GPU, float32 on CPU), "
                                    "float32, bfloat16, float16.")
    device: str = field("auto", help="auto (cuda when available, else cpu), cpu, cuda, cuda:N.")
    cpu_threads: int = field(0, help="torch threads on CPU; 0: the cores other processes leave free when the "
                                     "model loads (config.free_cpu_cores: one on a busy 2-core machine, where two "
                                     "threads wait for each other).")
    seed: int = field(0, help="Seed of the sampling RNG (the same seed gives the same attempts) where the caller "
                              "brings none: `dragon optimize`. The sealed evaluation samples with evaluation.seed "
                              "(part of its protocol).")
    request_timeout_s: float = field(120.0, help="OpenAI-compatible endpoints: timeout of one chat request.")
    few_shot: int = field(3, help="OpenAI-compatible endpoints: training examples in the system prompt.")
