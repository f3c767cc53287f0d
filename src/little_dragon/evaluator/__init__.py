"""Kernel evaluator: decode -> apply -> post-process/verify -> build -> correctness -> timing -> reward.

``Evaluator(target).evaluate_batch([EvalRequest(workload, script), ...])`` is the API RL, sealed evaluation
and the optimizer call; ``dragon evaluate`` is its CLI.  See pool.py (orchestration), worker.py (one
evaluation inside a sandboxed worker), numerics.py (correctness gate), outcome.py (categories, reward).
"""
from __future__ import annotations

from little_dragon.evaluator.config import EvaluatorConfig
from little_dragon.evaluator.outcome import CATEGORIES, EvalResult, shaped_reward

__all__ = ["CATEGORIES", "EvalRequest", "EvalResult", "Evaluator", "EvaluatorConfig", "shaped_reward"]


def __getattr__(name: str):  # the pool pulls in pebble and TVM: only on use
    if name in ("Evaluator", "EvalRequest"):
        from little_dragon.evaluator import pool

        return getattr(pool, name)
    raise AttributeError(name)
