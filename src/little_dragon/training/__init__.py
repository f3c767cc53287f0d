"""DeepSpeed SFT of the Little Dragon model (TRL), validity checks, MLflow logging and registration."""
import os

# No machine here reaches the Hugging Face hub: skip its look-ups (model cards, configs) instead of timing out.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
