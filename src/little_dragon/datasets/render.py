"""Prompts and token counts; prompts that do not fit the context are re-rendered or excluded, and counted."""
from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.datasets.prompts import prompt_for
from little_dragon.datasets.tokens import TokenCounter


@dataclasses.dataclass
class RenderCounts:
    full: int = 0
    compact: int = 0
    excluded_overlong: int = 0
    excluded_examples: list[str] = dataclasses.field(default_factory=list)


def fits(prompt_tokens: int, completion_tokens: int, context: int) -> bool:
    return prompt_tokens + completion_tokens + 1 <= context  # +1: the EOS the trainer appends


def render_examples(raw: pd.DataFrame, workloads: pd.DataFrame, counter: TokenCounter, cfg: DatasetsConfig
                    ) -> tuple[pd.DataFrame, RenderCounts]:
    """Add ``prompt``, ``kernel_rendering``, ``prompt_tokens``, ``completion_tokens``; drop what cannot fit."""
    counts = RenderCounts()
    if raw.empty:
        return raw.assign(prompt=[], kernel_rendering=[], prompt_tokens=[], completion_tokens=[]), counts
    script = dict(zip(workloads["workload_id"], workloads["tvmscript"]))
    df = raw.reset_index(drop=True).copy()

    def prompts(rendering: str, idx: Any) -> list[str]:
        sub = df.loc[idx]
        return [prompt_for(t, script[w], tg, st, rendering)  # type: ignore[arg-type]
                for t, w, tg, st in zip(sub["task"], sub["workload_id"], sub["target"], sub["start_script"])]

    df["prompt"] = prompts("full", df.index)
    df["kernel_rendering"] = "full"
    df["prompt_tokens"] = counter.count(df["prompt"].tolist())
    df["completion_tokens"] = counter.count(df["completion"].tolist())
    over = [i for i, p, c in zip(df.index, df["prompt_tokens"], df["completion_tokens"])
            if not fits(p, c, cfg.context_tokens)]
    if over and cfg.overlong == "compact":
        compact = prompts("compact", over)
        df.loc[over, "prompt"] = compact
        df.loc[over, "kernel_rendering"] = "compact"
        df.loc[over, "prompt_tokens"] = counter.count(compact)
    keep = [fits(p, c, cfg.context_tokens) for p, c in zip(df["prompt_tokens"], df["completion_tokens"])]
    dropped = df[[not k for k in keep]]
    counts.excluded_overlong = len(dropped)
    counts.excluded_examples = [f"{r.workload_id} {r.task} ({r.prompt_tokens}+{r.completion_tokens} tokens)"
                                for r in dropped.head(20).itertuples()]
    df = df[keep].reset_index(drop=True)
    counts.full = int((df["kernel_rendering"] == "full").sum())
    counts.compact = int((df["kernel_rendering"] == "compact").sum())
    return df, counts
