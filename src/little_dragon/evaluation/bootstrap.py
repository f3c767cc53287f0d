"""Paired bootstrap over prompts: is model A's per-prompt score different from B's on the same prompts?"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd


@dataclasses.dataclass
class Interval:
    diff: float      # mean(A - B) over prompts
    low: float
    high: float
    n: int           # paired prompts

    def as_dict(self) -> dict[str, float]:
        return {"diff": self.diff, "low": self.low, "high": self.high, "n": self.n}


def paired(a: pd.Series, b: pd.Series, samples: int = 1000, confidence: float = 0.9, seed: int = 0) -> Interval:
    """Bootstrap interval of ``mean(a - b)`` over the prompts both have (indexes are prompt ids)."""
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    d = (both["a"] - both["b"]).to_numpy(dtype=float)
    if len(d) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(samples, len(d)))].mean(axis=1)
    alpha = (1.0 - confidence) / 2
    return Interval(float(d.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)), len(d))
