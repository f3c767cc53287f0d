"""The trained model as an MLflow transformers model, registered as a new version of the project model."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

# Explicit requirements: MLflow's inferred list adds torchvision, which does not install here.
_REQUIREMENTS = ("torch", "transformers", "tokenizers", "safetensors", "accelerate")


def pip_requirements() -> list[str]:
    out = []
    for dist in _REQUIREMENTS:
        try:
            version = importlib.metadata.version(dist).split("+")[0]  # drop local tags such as +cpu
            out.append(f"{dist}=={version}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def log_and_register(mlflow: Any, model_dir: str | Path, registered_name: str,
                     artifact_name: str = "model") -> dict[str, Any]:
    """Log the saved checkpoint in ``model_dir`` to the active run and register it; no alias is set.

    The checkpoint is read back from disk (what was saved is what gets registered) with any DeepSpeed
    ZeRO-3 loading hook switched off, so rank 0 holds one whole copy.  MLflow's own local-checkpoint path
    breaks on transformers 5 (pipeline class lookup), hence the components dict."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    info = mlflow.transformers.log_model(transformers_model={"model": model, "tokenizer": tokenizer},
                                         name=artifact_name, task="text-generation",
                                         pip_requirements=pip_requirements())
    version = mlflow.register_model(info.model_uri, registered_name)
    return {"model_uri": info.model_uri, "registered_model": registered_name, "version": int(version.version),
            "registry_uri": f"models:/{registered_name}/{version.version}"}


def load_registered(uri: str) -> tuple[Any, Any]:
    """Model and tokenizer of a registered version (``models:/NAME/VERSION``)."""
    import mlflow

    components = mlflow.transformers.load_model(uri, return_type="components")
    return components["model"], components["tokenizer"]
