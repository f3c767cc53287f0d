"""The token budget of a generated script, and where a trained model carries it.

A model can be asked only for scripts as long as the budget lets it write.  MetaSchedule's tensor-core schedules are
long: in the H200 harvest's split, 49 of 801 completions are 1,081-1,594 SmolLM2 tokens (conv2d, dense, batch_matmul,
attention on float16), every other one at most ~420, none between 768 and 1,024.  The fixed budget of sessions before
40 (768 tokens for evaluation and RL, 1,024 in the device scripts) cut every tensor-core script: such an attempt could
only be finished short of its tensorization or fail (session 36's cut examples, session 40's 12 cut attempts of 128).

On disk: ``dragon train sft`` writes ``max_new_tokens`` into the saved model's ``generation_config.json``
(transformers' own field, which ``generate`` reads too): ``script_budget`` of the longest completion it trained or
validated on, counted in the model's own tokens.  A budget of 0 (``generation.max_new_tokens``,
``rl.max_completion_length``, the defaults) means that model's own (``resolve_budget``); a model without one gets
``FALLBACK``.  RL saves the policy with the SFT model's generation config, so an RL model keeps the budget it was
started with.

A foundation module (imports nothing from the project): training writes the budget, generation and RL read it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

MARGIN = 1.25   # over the longest script seen: a model may write a few lines more than its data (a lookup, a fetch)
ROUND = 64      # budgets in multiples of this many tokens
FALLBACK = 1024  # a model that carries no budget (a plain Hugging Face folder, an 8B base)


def script_budget(lengths: Iterable[int]) -> int:
    """The budget for scripts of ``lengths`` tokens: the longest times ``MARGIN``, rounded up to ``ROUND``."""
    longest = max(lengths, default=0)
    if longest <= 0:
        return FALLBACK
    return int(math.ceil(longest * MARGIN / ROUND) * ROUND)


def model_budget(model: Any) -> int | None:
    """The budget a model carries: ``generation_config.max_new_tokens`` of a loaded model, or of the
    ``generation_config.json`` in a model folder (a run folder's ``model/`` too); None when it has none."""
    if isinstance(model, (str, Path)):
        root = Path(model)
        for path in (root / "generation_config.json", root / "model" / "generation_config.json"):
            if path.is_file():
                try:
                    value = json.loads(path.read_text()).get("max_new_tokens")
                except (OSError, ValueError):
                    return None
                break
        else:
            return None
    else:
        value = getattr(getattr(model, "generation_config", None), "max_new_tokens", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def resolve_budget(requested: int, model: Any) -> int:
    """``requested`` when positive, else the model's own budget (``model_budget``), else ``FALLBACK``."""
    if requested > 0:
        return requested
    return model_budget(model) or FALLBACK
