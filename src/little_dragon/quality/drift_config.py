"""params.yaml section ``drift``: how far the newest harvest may move from the training data."""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class DriftConfig:
    harvest_root: str = field("artifacts/harvest", help="Where the pipeline's own harvest lives; its target's "
                                                        "folder (harvest.target) is the newest batch.")
    train: str = field("artifacts/datasets/train.parquet", help="The training split the batch is compared with.")
    out_dir: str = field("monitoring/drift", help="Drift report (README.md, drift.png) and metrics (metrics.json).")
    enforce: bool = field(True, help="A drifted batch fails the stage (and the retraining flow); false only reports "
                                     "(set it to retrain on a change you intend, e.g. new families on purpose).")
    max_family_kl: float = field(
        0.5, help="Bound on KL(batch family mix || training family mix), nats. A family the model never saw makes "
                  "it infinite; 0.5 allows a reshuffle of known families (a 2:1 tilt of two families is ~0.06).")
    max_flops_out_of_range: float = field(
        0.25, help="Share of batch workloads allowed outside the training set's log2 FLOPs range widened by "
                   "flops_margin_log2 on each side (shapes the model never saw).")
    flops_margin_log2: float = field(2.0, help="Widening of the training FLOPs range, in powers of two (2: x4).")
    max_latency_kl: float = field(
        1.0, help="Bound on KL(batch || training) of the latency distribution (log10 us of valid candidates) over the "
                  "training deciles, 1% tail weight each side: a 0.4-decade shift of a 0.5-decade-wide spread gives "
                  "~0.1, a 10x shift > 3.")
    max_codec_length_ratio: float = field(
        2.0, help="Bound on the ratio of median codec lengths (lines of each workload's best script), both ways.")
    max_failure_rate_increase: float = field(
        0.2, help="The batch's failed-workload and invalid-candidate rates may exceed the training data's by this.")
    min_batch_workloads: int = field(1, help="Fewer batch workloads than this: the check is skipped (reported).")
