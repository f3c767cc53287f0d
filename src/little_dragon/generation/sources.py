"""Model sources: one string names any model the project can generate with.

- ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``: a version in the MLflow Model Registry;
- a run's output folder (``artifacts/sft``: ``model/`` + ``metrics.json``, which names its registry version);
- a local Hugging Face folder (``config.json`` + tokenizer files);
- ``openai:BASE_URL#MODEL``: any OpenAI-compatible chat endpoint (generation/openai_chat.py).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from little_dragon.errors import UserError

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ModelSource:
    kind: str                       # registry | run | hf | openai
    spec: str                       # what the user wrote
    path: str | None = None         # hf / run: the HF folder
    registered_model: str | None = None
    version: int | None = None      # the registry version the source resolves to (tags land on it)

    @property
    def label(self) -> str:
        if self.registered_model and self.version is not None:
            return f"{self.registered_model}/v{self.version}"
        return Path(self.spec).name if self.kind in ("hf", "run") else self.spec


def _resolve_registry(spec: str) -> tuple[str, int]:
    from mlflow import MlflowClient

    from little_dragon import tracking

    tracking.setup("little-dragon/evaluate")
    body = spec[len("models:/"):]
    client = MlflowClient()
    try:
        if "@" in body:
            name, alias = body.split("@", 1)
            mv = client.get_model_version_by_alias(name, alias)
        else:
            name, version = body.rsplit("/", 1)
            mv = client.get_model_version(name, version)
    except Exception as e:  # noqa: BLE001  mlflow raises its own RestException for unknown names/aliases
        raise UserError(f"{spec}: no such model version in the registry at {tracking.tracking_uri()} "
                        f"({str(e).splitlines()[0][:200]})") from None
    return mv.name, int(mv.version)


def resolve(spec: str) -> ModelSource:
    """What ``spec`` names (no weights are loaded)."""
    if spec.startswith("models:/"):
        name, version = _resolve_registry(spec)
        return ModelSource("registry", spec, registered_model=name, version=version)
    if spec.startswith("openai:"):
        return ModelSource("openai", spec)
    p = Path(spec)
    if (p / "model" / "config.json").is_file():
        reg = {}
        m = p / "metrics.json"
        if m.is_file():
            reg = json.loads(m.read_text()).get("registry") or {}
        return ModelSource("run", spec, path=str(p / "model"), registered_model=reg.get("registered_model"),
                           version=reg.get("version"))
    if (p / "config.json").is_file():
        return ModelSource("hf", spec, path=str(p))
    raise UserError(f"{spec}: not a model source (models:/NAME@ALIAS, models:/NAME/VERSION, a run's output "
                    f"folder with model/, a Hugging Face folder with config.json, or openai:URL#MODEL)")


def load_weights(src: ModelSource, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """Model (on its device, eval mode) and tokenizer of a registry / run / HF source."""
    import torch

    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    if src.kind == "registry":
        from little_dragon.training.registry import load_registered

        model, tok = load_registered(f"models:/{src.registered_model}/{src.version}")
    elif src.kind in ("run", "hf"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(src.path)
        model = AutoModelForCausalLM.from_pretrained(src.path)
    else:
        raise ValueError(f"{src.spec}: {src.kind} sources have no local weights")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = model.to(device=dev, dtype=torch_dtype)
    model.eval()
    return model, tok
