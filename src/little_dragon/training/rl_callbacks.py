"""RL callbacks: the ten-rollout probe curves (the paper's Fig 5/6: mean utility and correctness on fixed
retained training prompts, step 0 = the start model), and a wall-clock stop for fixed-length device calls."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from little_dragon import atomic
from little_dragon.training.reward import KernelReward
from little_dragon.training.screen import probe

log = logging.getLogger(__name__)


class ProbeCallback(TrainerCallback):
    """Every ``every`` steps (and at steps 0 and last), ``k`` rollouts per probe prompt, scored.

    The history is kept in ``history_path`` (JSON) so a resumed run continues its curves."""

    def __init__(self, prompts: list[dict[str, Any]], tokenizer: Any, reward: KernelReward, k: int, every: int,
                 max_new_tokens: int, temperature: float, batch_size: int, history_path: Path, mlflow: Any = None):
        self.prompts = prompts
        self.tokenizer = tokenizer
        self.reward = reward
        self.k = k
        self.every = every
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.batch_size = batch_size
        self.history_path = Path(history_path)
        self.mlflow = mlflow
        self.history: list[dict[str, Any]] = []
        if self.history_path.exists():
            self.history = json.loads(self.history_path.read_text())

    def run(self, model: Any, step: int) -> dict[str, Any] | None:
        if not self.prompts or any(h["step"] == step for h in self.history):
            return None
        res = probe(model, self.tokenizer, self.prompts, self.reward, self.k, self.max_new_tokens, self.temperature,
                    self.batch_size)
        entry = {"step": step, **res}
        self.history.append(entry)
        self.history.sort(key=lambda h: h["step"])
        atomic.write_json(self.history_path, self.history)
        log.info("probe at step %d: utility %.3f, correctness %.3f (%d rollouts)", step, res["utility"] or 0.0,
                 res["correctness"] or 0.0, res["scripts"])
        if self.mlflow is not None:
            self.mlflow.log_metrics({f"probe/{k}": float(v) for k, v in res.items()
                                     if isinstance(v, (int, float)) and v is not None}, step=step)
        return entry

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero and model is not None:
            self.run(model, state.global_step)  # step 0 = the start model (a resumed run: skipped if done)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero and model is not None and self.every and state.global_step % self.every == 0:
            self.run(model, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if state.is_world_process_zero and model is not None:
            self.run(model, state.global_step)


class WallClockStop(TrainerCallback):
    """Stop cleanly (save, final probe, register) once ``max_wall_s`` seconds have passed since ``t0``."""

    def __init__(self, max_wall_s: float, t0: float | None = None):
        self.max_wall_s = max_wall_s
        self.t0 = t0 if t0 is not None else time.perf_counter()
        self.stopped_at: int | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.max_wall_s > 0 and time.perf_counter() - self.t0 >= self.max_wall_s:
            control.should_training_stop = True
            control.should_save = True
            self.stopped_at = state.global_step
            log.info("wall-clock budget of %.0f s reached at step %d: stopping", self.max_wall_s, state.global_step)


def plot_probe_curves(history: list[dict[str, Any]], png: Path, title: str = "RL probe") -> None:
    """Mean utility and correctness (overall and per task) against the optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in ((axes[0], "utility", "mean utility (shaped reward)"),
                           (axes[1], "correctness", "correctness")):
        ax.plot(steps, [h.get(key) for h in history], marker="o", label="all", color="black")
        for task, style in (("construction", "--"), ("refinement", ":")):
            ys = [h.get(f"{key}_{task}") for h in history]
            if any(y is not None for y in ys):
                ax.plot(steps, ys, marker=".", linestyle=style, label=task)
        ax.set_xlabel("optimizer step (0 = start model)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    n = history[0].get("scripts") if history else 0
    fig.suptitle(f"{title}: {n} rollouts per probe")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
