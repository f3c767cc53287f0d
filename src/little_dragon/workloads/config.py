"""The ``workloads`` section of params.yaml.

A *profile* names a recipe of workload specs (see ``profiles.py``): ``default`` is a few small, fast-to-tune
kernels across every family; ``models`` adds every shape taken from the real model configurations;
``large`` adds seeded samples from each family's shape ranges (50,000+ distinct workloads).  Fields left
unset (``null``) take the profile's value, so params.yaml only needs what it changes.
"""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class WorkloadsConfig:
    profile: str = field("default", help="Workload recipe: default (small, ~20 kernels), models, or large (50k+).")
    seed: int = field(0, help="Seed of the sampled shape ranges; a fixed seed gives the same workloads.")
    families: list[str] = field(default_factory=list,
                                help="Kernel families to emit (empty: all). `dragon workloads --list` shows them.")
    dtypes: list[str] = field(default_factory=lambda: ["float32", "float16", "int8"],
                              help="Input dtypes to emit; a family skips the ones it has no meaning for.")
    samples_per_family: int | None = field(
        None, help="Sampled-range specs per family and dtype (null: the profile's number; 0 in default).")
    graph_models: list[str] | None = field(
        default_factory=list, help="Model graphs to extract fused tuning tasks from (null: the profile's list). "
                   "Known: gpt2-tiny, llama-tiny, bert-tiny, resnet-block.")
    graph_max_tasks: int = field(0, help="At most this many non-trivial tasks per model graph (0: all).")
    max_workloads: int = field(0, help="Cap on the number of distinct workloads written (0: no cap).")
    out_dir: str = field("artifacts/workloads", help="The store: <out_dir>/workloads.parquet (+ summary).")
