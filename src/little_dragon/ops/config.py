"""params.yaml section ``retraining``: the scheduled-retraining deployment and the local services."""
from __future__ import annotations

import dataclasses

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class RetrainingConfig:
    deployment: str = field("scheduled-retraining", help="Name of the Prefect deployment of the pipeline flow.")
    cron: str = field("0 3 * * 0", help="When the deployment runs (cron, UTC): Sundays 03:00, weekly retraining.")
    profile: str = field("default", help="The deployment's profile parameter: configs/profiles/<name>.yaml is laid "
                                         "over params.yaml before the run (default: params.yaml as is).")
    target: str = field("", help="The deployment's target parameter: llvm, cuda or a JSON TVM target (empty: "
                                 "params.yaml's harvest.target).")
    model: str = field("champion", help="The deployment's model parameter: champion (SFT warm-starts from the "
                                        "registry's @champion; params.yaml's model while there is none), tiny, gguf "
                                        "or a local model directory.")
    prefect_port: int = field(4200, help="Port of the Prefect server and UI (`dragon services up`, 127.0.0.1).")
    mlflow_port: int = field(5000, help="Port of the MLflow tracking server and UI (`dragon services up`, 127.0.0.1).")
    state_dir: str = field(".services", help="Where `dragon services` keeps its pid file and the servers' logs.")
