"""The SFT validity passes under constrained decoding (issue 16: ``generation.constrained``).

``training`` sits below ``generation`` in the layer order, so ``training.sft.train_sft`` cannot import the
constraint; it takes a ``training.callbacks.ValiditySampler`` instead, and the stage's CLI
(``dragon train sft``, which the Prefect flow runs in-process too) passes ``ConstrainedValiditySampler()``
when ``generation.constrained`` is true.  Every validity pass (untrained, periodic, final, greedy) then
samples as ``generation.sample.LocalGenerator`` does: ``generate_constrained`` with the processor of
``constrained.logits_processor_factory(tokenizer)``, and its metrics end with ``_constrained``.

**First pass only** (``max_resamples=0``, unlike the sealed evaluation's ``generation.constrained_resamples``):
the pass measures the model, one sample per counted attempt.  Resampling an attempt whose line failed its
check would spend more samples on the attempts the model got wrong and hide those failures; here such an
attempt keeps its checked lines and the line TVM refused, so the validity check counts it invalid.  An
attempt that ran out of tokens mid-line keeps its complete (checked) lines, as in the sealed evaluation (a
line the grammar allowed but the codec did not decode, a constraint bug counted in ``stats.rejected_decode``,
is dropped the same way).
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class ConstrainedValiditySampler:
    """A ``training.callbacks.ValiditySampler``: one constrained attempt per prompt, first pass only.
    ``stats`` is the last pass's ``constrained.ConstraintStats`` (lines checked, rejected, truncated)."""

    name = "constrained"

    def __init__(self) -> None:
        self.stats: Any = None

    def __call__(self, model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, temperature: float,
                 batch_size: int) -> list[str]:
        from little_dragon.generation.constrained import generate_constrained, logits_processor_factory

        res = generate_constrained(model, tokenizer, prompts, 1, max_new_tokens, temperature,
                                   batch_size=batch_size, max_resamples=0,  # first pass only: the module docstring says why
                                   hook=logits_processor_factory(tokenizer))
        self.stats = res.stats
        log.info("constrained validity pass: %d attempts, %d lines checked, %d rejected at a line check, "
                 "%d at the end-of-script check, %d cut at the token budget, %.1f s", len(prompts), res.stats.lines,
                 res.stats.rejected_apply + res.stats.rejected_decode, res.stats.rejected_end, res.stats.truncated,
                 res.first_seconds)
        return [attempts[0] for attempts in res.first_scripts]
