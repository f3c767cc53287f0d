"""When and how DeepSpeed is used: its JSON config from configs/deepspeed, and single-rank launch variables.

No ``optimizer`` block in the configs: the trainer's torch AdamW is used, so neither the GPU image (no
nvcc needed for FusedAdam) nor a CPU run (DeepSpeedCPUAdam) compiles ops before the first step.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from little_dragon.config import PROJECT_ROOT
from little_dragon.training.config import SFTConfig

DEEPSPEED_DIR = PROJECT_ROOT / "configs" / "deepspeed"


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def use_deepspeed(cfg: SFTConfig) -> bool:
    """``auto``: on whenever a GPU is present; on CPU plain training measured faster (sft_bench.py)."""
    return cfg.deepspeed == "on" or (cfg.deepspeed == "auto" and gpu_count() > 0)


def deepspeed_config_path(cfg: SFTConfig) -> Path:
    if cfg.deepspeed_config:
        p = Path(cfg.deepspeed_config)
        p = p if p.is_absolute() else PROJECT_ROOT / p
    else:
        p = DEEPSPEED_DIR / ("zero3.json" if cfg.model.kind == "local" else "zero2.json")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: DeepSpeed config not found (sft.deepspeed_config)")
    json.loads(p.read_text())  # a broken JSON fails here, naming the file, not deep inside DeepSpeed
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_launch_env() -> dict[str, str]:
    """Single-rank variables when not started by a launcher (``accelerate launch`` / ``deepspeed`` set them).

    Without them DeepSpeed falls back to MPI discovery (mpi4py) and fails."""
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        return {}
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": os.environ.get("MASTER_PORT") or str(_free_port())}
    os.environ.update(env)
    return env


def process_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def describe(cfg: SFTConfig) -> dict[str, Any]:
    return {"deepspeed": use_deepspeed(cfg), "gpus": gpu_count(),
            "world_size": int(os.environ.get("WORLD_SIZE", "1"))}
