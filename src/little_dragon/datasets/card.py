"""The dataset card: a markdown summary and PNG plots of the built sets (monitoring/dataset-card/)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon import atomic
from little_dragon.datasets.config import DatasetsConfig
from little_dragon.datasets.prompts import construction_prompt, refinement_prompt

PLOTS = ("counts_by_family_task.png", "token_lengths.png", "speedups.png")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, dest: Path) -> None:
    """Lay ``fig`` out, write it to ``dest`` as PNG (atomically), close it."""
    fig.tight_layout()
    with atomic.atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def plot_counts(ex: pd.DataFrame, dest: Path) -> None:
    plt = _plt()
    table = ex.groupby(["family", "task"]).size().unstack(fill_value=0) if len(ex) else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(9, 0.35 * max(4, len(table)) + 1.5))
    if len(table):
        table.plot.barh(ax=ax, stacked=True)
    ax.set_xlabel("examples (all splits)")
    ax.set_title("Examples by family and task")
    _save(plt, fig, dest)


def plot_lengths(ex: pd.DataFrame, context: int, dest: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, col in zip(axes, ("prompt_tokens", "completion_tokens")):
        for task, sub in ex.groupby("task") if len(ex) else []:
            ax.hist(sub[col], bins=30, alpha=0.6, label=task)
        ax.axvline(context, color="red", linestyle="--", label=f"context {context}")
        ax.set_xlabel(col.replace("_", " "))
        ax.set_ylabel("examples")
        ax.legend(fontsize=8)
    fig.suptitle("Token lengths")
    _save(plt, fig, dest)


def plot_speedups(ex: pd.DataFrame, min_speedup: float, dest: Path) -> None:
    plt = _plt()
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ref = ex[ex["task"] == "refinement"]["speedup"].dropna() if len(ex) else pd.Series(dtype=float)
    con = ex[ex["task"] == "construction"]["speedup_vs_baseline"].dropna() if len(ex) else pd.Series(dtype=float)
    if len(ref):
        axes[0].hist(np.log2(ref), bins=30, color="tab:orange")
    axes[0].axvline(np.log2(min_speedup), color="red", linestyle="--", label=f"threshold {min_speedup}x")
    axes[0].set_xlabel("log2(start latency / completion latency)")
    axes[0].set_title("Refinement: speedup over the starting script")
    axes[0].legend(fontsize=8)
    con = con[con > 0]
    if len(con):
        axes[1].hist(np.log2(con), bins=30, color="tab:blue")
    axes[1].set_xlabel("log2(baseline latency / completion latency)")
    axes[1].set_title("Construction: speedup over the baseline")
    for ax in axes:
        ax.set_ylabel("examples")
    _save(plt, fig, dest)


def _frame_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join([df.index.name or "", *cols]) + " |", "|" + "---|" * (len(cols) + 1)]
    lines += ["| " + " | ".join([str(i), *map(str, row)]) + " |" for i, row in zip(df.index, df.values)]
    return "\n".join(lines)


def _table(counts: dict[str, Any]) -> str:
    return "\n".join(f"| {k} | {v} |" for k, v in counts.items())


def write_card(examples: pd.DataFrame, stats: dict[str, Any], cfg: DatasetsConfig, card_dir: str | os.PathLike
               ) -> Path:
    card_dir = Path(card_dir)
    card_dir.mkdir(parents=True, exist_ok=True)
    plot_counts(examples, card_dir / PLOTS[0])
    plot_lengths(examples, cfg.context_tokens, card_dir / PLOTS[1])
    plot_speedups(examples, cfg.refinement_min_speedup, card_dir / PLOTS[2])
    target = '{"kind":"llvm","num-cores":2}'
    fam = (examples.groupby(["family", "split"]).size().unstack(fill_value=0) if len(examples)
           else pd.DataFrame())
    text = f"""# Little Dragon SFT dataset card

Built by the `split` stage (`dragon datasets build`) from the workload store and every harvest under
{', '.join(f'`{r}`' for r in cfg.harvest_roots)} ({stats['targets']} target(s)).
Token counts are in the tokenizer `{stats['tokenizer']}`; the context is {cfg.context_tokens} tokens
(prompt + completion + EOS).

## Tasks and prompt template

- **construction**: the kernel and the target; the completion is the codec text of the best valid trace of the
  tuning run (plus up to {cfg.construction_per_workload - 1} more distinct traces within
  {cfg.construction_margin:.0%} of the best, as separate examples).
- **refinement**: the kernel, the target and a starting script from the same run (drawn evenly along the
  latency ranks {cfg.refinement_start_quantiles[0]}..{cfg.refinement_start_quantiles[1]}, 0 = best); the completion is
  a script at least {cfg.refinement_min_speedup}x faster, measured later in the run when possible.

Every completion decodes with the codec to exactly the harvested trace and re-encodes to the same text
(traces that do not are rejected and counted below).

```text
{construction_prompt('<canonical TVMScript of the kernel>', target)}<completion: codec text>
```

```text
{refinement_prompt('<canonical TVMScript of the kernel>', target, '<codec text of the starting script>')}<completion: codec text>
```

Prompts that do not fit ({cfg.overlong!r} policy): the kernel is re-rendered compactly (comments dropped,
one space per indent level) and the example is dropped, counted, only if it still does not fit. Nothing is
ever truncated. Rendering: {stats['rendering']}.

## Splits

Workloads are grouped by family and shape class (integer shape parameters bucketed to
round(log{cfg.shape_bucket_base:g}(value))); whole groups go to one split (seed {cfg.seed}): sealed
{cfg.sealed_fraction:.0%} and validation {cfg.validation_fraction:.0%} of the groups, the rest train. Families
{cfg.heldout_families} are held out whole (sealed slice `heldout_family`). The sealed set lives in
`{cfg.sealed_dir}` with a manifest of structural hashes; loaders refuse to read it
(`little_dragon.datasets.guard.assert_not_sealed`), and the build and the `examples` quality gate prove
that no sealed workload or group appears in train or validation.

| workloads per split | count |
|---|---|
{_table(stats['workloads'])}

| examples | count |
|---|---|
{_table(stats['examples'])}

Examples by family and split:

{_frame_table(fam) if len(fam) else '(none)'}

## Harvest to examples

| | count |
|---|---|
{_table(stats['harvest'])}
| excluded (over the context) | {stats['rendering']['excluded_overlong']} |

Tokens: {json.dumps(stats['tokens'])}. Refinement speedups: {json.dumps(stats['refinement_speedup'])}.

## Plots

![counts by family and task]({PLOTS[0]})

![token lengths]({PLOTS[1]})

![speedups]({PLOTS[2]})
"""
    atomic.write_text(card_dir / "README.md", text)
    return card_dir / "README.md"
