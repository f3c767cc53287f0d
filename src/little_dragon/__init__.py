"""Little Dragon: teach a small language model to write TVM MetaSchedule optimization scripts."""
from __future__ import annotations

import os as _os
from pathlib import Path as _Path

__version__ = "0.1.0"

_ROOT = _Path(__file__).resolve().parents[2]

# Embedded defaults: everything local to the project, nothing phones home (the machines have no internet).
# setdefault: an explicit environment (a team MLflow/Prefect server, CI) always wins.
for _k, _v in {
    "PREFECT_HOME": str(_ROOT / ".prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "GX_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "MLFLOW_ENABLE_TELEMETRY": "false",
    "DO_NOT_TRACK": "true",
}.items():
    _os.environ.setdefault(_k, _v)
