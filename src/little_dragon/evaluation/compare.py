"""Two models on the same prompts: "A beats B on X/Y construction tasks and X/Y refinement prompts".

Per prompt, best of k: solving (a correct attempt) beats not solving; when both solve, the faster best
kernel wins unless the two are within ``tie_tolerance`` (timing noise); both unsolved is a tie.  Ties are
counted apart (the paper's 88/102 and 145/170 format).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from little_dragon.evaluation.metrics import best_per_prompt


@dataclasses.dataclass
class TaskCount:
    task: str
    a_wins: int
    b_wins: int
    ties: int

    @property
    def total(self) -> int:
        return self.a_wins + self.b_wins + self.ties


@dataclasses.dataclass
class Comparison:
    a: str
    b: str
    tasks: dict[str, TaskCount]

    def sentence(self) -> str:
        words = {"construction": "construction tasks", "refinement": "refinement prompts"}
        parts = [f"{c.a_wins}/{c.total} {words.get(t, t)}" for t, c in self.tasks.items()]
        ties = ", ".join(f"{c.ties} {t}" for t, c in self.tasks.items())
        losses = ", ".join(f"{c.b_wins} {t}" for t, c in self.tasks.items())
        return f"{self.a} beats {self.b} on {' and '.join(parts)} (ties: {ties}; {self.b} beats {self.a}: {losses})"

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "sentence": self.sentence(),
                **{t: dataclasses.asdict(c) | {"total": c.total} for t, c in self.tasks.items()}}


def outcome(a_solved: bool, a_best: float, b_solved: bool, b_best: float, tie_tolerance: float) -> int:
    """+1 A wins, -1 B wins, 0 tie."""
    if a_solved != b_solved:
        return 1 if a_solved else -1
    if not a_solved:
        return 0
    if not (math.isfinite(a_best) and math.isfinite(b_best)) or a_best <= 0 or b_best <= 0:
        return 0
    ratio = a_best / b_best
    if abs(math.log(ratio)) <= math.log1p(tie_tolerance):
        return 0
    return 1 if ratio > 1 else -1


def compare_attempts(a: pd.DataFrame, b: pd.DataFrame, name_a: str = "A", name_b: str = "B",
                     tie_tolerance: float = 0.02, method: str = "model") -> Comparison:
    pa = best_per_prompt(a[a["method"] == method]).set_index("prompt_id")
    pb = best_per_prompt(b[b["method"] == method]).set_index("prompt_id")
    both = pa.add_suffix("_a").join(pb.add_suffix("_b"), how="inner")
    tasks: dict[str, TaskCount] = {}
    for task in ("construction", "refinement"):
        t = both[both["task_a"] == task]
        if t.empty:
            continue
        res = [outcome(bool(r.solved_a), float(r.best_a), bool(r.solved_b), float(r.best_b), tie_tolerance)
               for r in t.itertuples()]
        tasks[task] = TaskCount(task, res.count(1), res.count(-1), res.count(0))
    return Comparison(name_a, name_b, tasks)


def compare_dirs(dir_a: str | Path, dir_b: str | Path, tie_tolerance: float = 0.02) -> Comparison:
    """Compare two evaluation output folders (each holds attempts.parquet from the same sealed protocol)."""
    import json

    from little_dragon.errors import UserError

    frames, names, protos = [], [], []
    for d in (Path(dir_a), Path(dir_b)):
        p = d / "attempts.parquet"
        if not p.is_file():
            raise UserError(f"{p}: not an evaluation folder (run `dragon eval run` first)")
        frames.append(pd.read_parquet(p))
        summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
        names.append(summary.get("model_label") or d.name)
        protos.append(summary.get("protocol"))
    if names[0] == names[1]:  # one model decoded two ways (constrained vs free): the folders tell them apart
        names = [f"{n} ({Path(d).name})" for n, d in zip(names, (dir_a, dir_b))]
    if protos[0] and protos[1] and protos[0] != protos[1]:
        raise UserError(f"{dir_a} and {dir_b} were evaluated under different protocols ({protos[0]} vs "
                        f"{protos[1]}: sealed set, target, k or prompt draw differ); re-evaluate one")
    return compare_attempts(frames[0], frames[1], names[0], names[1], tie_tolerance)
