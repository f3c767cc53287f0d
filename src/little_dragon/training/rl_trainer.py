"""GRPO with dynamic retention, on TRL's own hooks (no fork of the trainer).

TRL 1.16 has no zero-variance filtering (rl-notes §1): a group whose completions all earn the same reward
(solved, or hopeless) has advantage 0 and is pure cost, mostly evaluator time.  ``Retention`` keeps the
active prompt set: a prompt whose groups keep coming back identical (``retire_after`` in a row) is retired,
and every ``reprobe_every`` steps the retired ones return for one more try.  ``ActiveSetSampler`` replaces
TRL's ``RepeatSampler`` (same layout: each prompt ``num_generations`` times, the generation batch repeated
``num_iterations * steps_per_generation`` times) but draws lazily from the active set, so a retirement
takes effect at the next generation batch (the dataloader prefetches one).  The trainer also splits each
step's time into generation, reward and update, and checkpoints the retention state with the model.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections import defaultdict
from typing import Any, Iterator

from torch.utils.data import Sampler
from trl import GRPOTrainer

log = logging.getLogger(__name__)

RETENTION_FILE = "retention.json"


class Retention:
    """The active prompt set and each prompt's run of identical-reward groups."""

    def __init__(self, prompt_ids: list[int], retire_after: int, reprobe_every: int, min_active: int = 1,
                 seed: int = 0):
        self.all = list(prompt_ids)
        self.retire_after = retire_after
        self.reprobe_every = reprobe_every
        self.min_active = max(1, min_active)
        self.active = set(self.all)
        self.retired: dict[int, int] = {}        # prompt id -> step it was retired at
        self.streak: dict[int, int] = defaultdict(int)
        self.visits: dict[int, int] = defaultdict(int)
        self.last_reprobe = 0
        self.events: list[dict[str, Any]] = []   # retirements and re-probes, for the record
        self.rng = random.Random(seed)
        self._queue: list[int] = []

    def draw(self, n: int) -> list[int]:
        """``n`` prompt ids from the active set: shuffled passes over it, so every active prompt comes up."""
        out: list[int] = []
        while len(out) < n:
            if not self._queue:
                self._queue = sorted(self.active) or sorted(self.all)
                self.rng.shuffle(self._queue)
            pid = self._queue.pop()
            if pid in self.active or not self.active:
                out.append(pid)
        return out

    def update(self, step: int, prompt_ids: list[int], rewards: list[float]) -> None:
        groups: dict[int, list[float]] = defaultdict(list)
        for pid, r in zip(prompt_ids, rewards):
            if r is not None and not math.isnan(r):
                groups[int(pid)].append(float(r))
        for pid, rs in groups.items():
            self.visits[pid] += 1
            if len(rs) > 1 and max(rs) - min(rs) > 1e-9:
                self.streak[pid] = 0
                continue
            self.streak[pid] += 1
            if self.streak[pid] >= self.retire_after and pid in self.active and len(self.active) > self.min_active:
                self.active.discard(pid)
                self.retired[pid] = step
                self.events.append({"step": step, "event": "retire", "prompt_id": pid, "reward": rs[0]})

    def maybe_reprobe(self, step: int) -> int:
        """Return retired prompts to the active set every ``reprobe_every`` steps (one more identical group
        retires them again)."""
        if not self.reprobe_every or not self.retired or step - self.last_reprobe < self.reprobe_every:
            return 0
        back = sorted(self.retired)
        for pid in back:
            self.active.add(pid)
            self.streak[pid] = max(0, self.retire_after - 1)
            self.events.append({"step": step, "event": "reprobe", "prompt_id": pid})
        self.retired.clear()
        self.last_reprobe = step
        return len(back)

    def state_dict(self) -> dict[str, Any]:
        st = self.rng.getstate()
        return {"active": sorted(self.active), "retired": {str(k): v for k, v in self.retired.items()},
                "streak": {str(k): v for k, v in self.streak.items()},
                "visits": {str(k): v for k, v in self.visits.items()}, "last_reprobe": self.last_reprobe,
                "events": self.events, "queue": self._queue, "rng": [st[0], list(st[1]), st[2]]}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.active = set(d["active"])
        self.retired = {int(k): v for k, v in d["retired"].items()}
        self.streak = defaultdict(int, {int(k): v for k, v in d["streak"].items()})
        self.visits = defaultdict(int, {int(k): v for k, v in d["visits"].items()})
        self.last_reprobe = d["last_reprobe"]
        self.events = list(d["events"])
        self._queue = list(d["queue"])
        self.rng.setstate((d["rng"][0], tuple(d["rng"][1]), d["rng"][2]))


class ActiveSetSampler(Sampler):
    """RepeatSampler's layout over prompts drawn lazily from ``Retention`` (endless; the trainer stops at
    ``max_steps``)."""

    def __init__(self, retention: Retention, index_of: dict[int, int], num_generations: int, batch_prompts: int,
                 repeat_count: int):
        self.retention = retention
        self.index_of = index_of
        self.num_generations = num_generations
        self.batch_prompts = batch_prompts
        self.repeat_count = repeat_count

    def __iter__(self) -> Iterator[int]:
        while True:
            ids = self.retention.draw(self.batch_prompts)
            block = [self.index_of[pid] for pid in ids for _ in range(self.num_generations)]
            for _ in range(self.repeat_count):
                yield from block


class RetentionGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` + dynamic retention + per-step time split (generation / reward / update).

    The training dataset needs an integer ``prompt_id`` column (kept by TRL and passed to reward functions)."""

    def __init__(self, *args: Any, retention: Retention, **kwargs: Any):
        self.retention = retention
        self._t_gen = 0.0
        self._t_reward = 0.0
        super().__init__(*args, **kwargs)
        ids = self.train_dataset["prompt_id"]
        self._index_of = {int(pid): i for i, pid in enumerate(ids)}
        if set(self._index_of) != set(retention.all):
            raise ValueError("retention prompt ids do not match the training dataset's prompt_id column")

    # ------------------------------------------------------------------ sampling
    def _get_train_sampler(self, dataset: Any = None) -> Sampler:
        return ActiveSetSampler(self.retention, self._index_of, self.num_generations,
                                self.args.generation_batch_size // self.num_generations,
                                self.num_iterations * self.args.steps_per_generation)

    # ------------------------------------------------------------------ hooks
    def _generate(self, prompts: list) -> Any:
        t0 = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            self._t_gen += time.perf_counter() - t0

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        from accelerate.utils import gather_object

        t0 = time.perf_counter()
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._t_reward += time.perf_counter() - t0
        if self.model.training:
            # every rank holds all rewards now (gathered in rank order); gather the prompt ids the same way so
            # every rank updates an identical retention state and its sampler draws the same prompts
            pids = gather_object([int(x["prompt_id"]) for x in inputs])
            rewards = rewards_per_func.nansum(dim=1).tolist() if rewards_per_func.shape[1] > 1 \
                else rewards_per_func[:, 0].tolist()
            step = self.state.global_step
            self.retention.update(step, pids, rewards)
            back = self.retention.maybe_reprobe(step)
            m = self._metrics["train"]
            m["rl/active_prompts"].append(float(len(self.retention.active)))
            m["rl/retired_prompts"].append(float(len(self.retention.retired)))
            m["rl/reprobed_prompts"].append(float(back))
        return rewards_per_func

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        t0 = time.perf_counter()
        g0, r0 = self._t_gen, self._t_reward
        out = super().training_step(model, inputs, num_items_in_batch)
        total = time.perf_counter() - t0
        gen, rew = self._t_gen - g0, self._t_reward - r0
        m = self._metrics["train"]
        m["time/generation_s"].append(gen)
        m["time/reward_s"].append(rew)
        m["time/update_s"].append(max(0.0, total - gen - rew))
        m["time/reward_share"].append(rew / total if total > 0 else 0.0)
        return out

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            with open(os.path.join(folder, RETENTION_FILE), "w") as f:
                json.dump(self.retention.state_dict(), f)

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, RETENTION_FILE)
            if os.path.exists(path):
                with open(path) as f:
                    self.retention.load_state_dict(json.load(f))
                log.info("retention state restored from %s (%d active prompts)", path, len(self.retention.active))
