"""The sealed prompts of one target: one per distinct (task, prompt), with what scoring it needs.

Construction: one prompt per sealed workload.  Refinement: one per distinct given script.  Per task and
slice a seeded draw keeps at most ``max_prompts_per_task`` (spread over workloads first), so a CPU run stays
small and the same prompts come back for every model (comparisons are paired).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from pathlib import Path
from typing import Any

from little_dragon.datasets.guard import read_manifest, read_sealed
from little_dragon.evaluation.eval_config import EvaluationConfig
from little_dragon.tvmx import target as tgt

SLICE_FILES = {"sealed": "test.jsonl", "heldout_family": "heldout_families.jsonl"}


@dataclasses.dataclass
class EvalPrompt:
    prompt_id: str            # stable across models: hash of (task, prompt text)
    task: str
    slice: str
    prompt: str
    workload_id: str
    family: str
    name: str
    target: str               # JSON of the target dict
    tvmscript: str
    given_script: str | None  # refinement: the script to improve on
    given_latency_us: float   # harvest latency of the given script (NaN for construction)
    best_latency_us: float    # best MetaSchedule latency in the harvest (full budget)
    baseline_us: float        # harvest baseline (unscheduled on llvm, default GPU schedule on cuda)


def _f(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def same_target(a: Any, b: Any) -> bool:
    """Same kind, and on CUDA the same arch (a sealed llvm row of another core count is still llvm)."""
    da, db = tgt.normalize(a), tgt.normalize(b)
    return da["kind"] == db["kind"] and da.get("arch") == db.get("arch")


def sealed_protocol(cfg: EvaluationConfig) -> str:
    """What makes two evaluations comparable: the sealed manifest, target, tasks, slices, k, prompt draw."""
    man = read_manifest(cfg.sealed_dir)
    blob = json.dumps([sorted(w["structural_hash"] for w in man["workloads"]), tgt.normalize(cfg.target),
                       sorted(cfg.tasks), sorted(cfg.slices), cfg.attempts, cfg.max_prompts_per_task, cfg.seed],
                      sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


# The generation settings that change which attempts a model writes (the engine, batch size, dtype and threads do
# not): two evaluations' correctness compares models only when their attempts were sampled alike.
DECODING_FIELDS = ("max_new_tokens", "temperature", "constrained", "constrained_resamples", "constrained_line_retries",
                   "constrained_finish_back", "few_shot")
CONSTRAINED_ONLY = ("constrained_resamples", "constrained_line_retries", "constrained_finish_back")


def decoding_protocol(gen_cfg: Any) -> tuple[dict[str, Any], str]:
    """How the attempts were sampled (``DECODING_FIELDS`` of a ``GenerationConfig``; the constrained-decoding counts only
    when it is on) and its id: what the promotion gate requires of a champion's evaluation besides the sealed protocol
    (constrained decoding took the tiny CPU model from 19% to 93% correct per attempt: a champion evaluated free is
    not comparable with a candidate evaluated constrained)."""
    d = {k: getattr(gen_cfg, k) for k in DECODING_FIELDS}
    if not d["constrained"]:
        for k in CONSTRAINED_ONLY:
            d.pop(k)
    return d, hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def load_prompts(cfg: EvaluationConfig) -> list[EvalPrompt]:
    sealed = Path(cfg.sealed_dir)
    read_manifest(sealed)  # a clear error when the split stage has not run
    out: list[EvalPrompt] = []
    for slice_ in cfg.slices:
        if slice_ not in SLICE_FILES:
            raise ValueError(f"evaluation.slices: unknown slice {slice_!r}; known: {list(SLICE_FILES)}")
        path = sealed / SLICE_FILES[slice_]
        rows = read_sealed(path) if path.is_file() else []
        rows = [r for r in rows if same_target(r["target"], cfg.target) and r["task"] in cfg.tasks]
        seen: dict[tuple[str, str], EvalPrompt] = {}
        for r in rows:
            k = (r["task"], r["prompt"])
            if k in seen:
                continue
            given = r.get("start_script") if r["task"] == "refinement" else None
            seen[k] = EvalPrompt(
                prompt_id=hashlib.sha1(f"{r['task']}\0{r['prompt']}".encode()).hexdigest()[:16],
                task=r["task"], slice=slice_, prompt=r["prompt"], workload_id=r["workload_id"],
                family=str(r.get("family", "")), name=str(r.get("name", "")), target=json.dumps(
                    tgt.normalize(r["target"]), sort_keys=True), tvmscript=r["tvmscript"], given_script=given,
                given_latency_us=_f(r.get("start_latency_us")) if given else math.nan,
                best_latency_us=_f(r.get("best_latency_us")), baseline_us=_f(r.get("baseline_us")))
        for task in cfg.tasks:
            out.extend(draw([p for p in seen.values() if p.task == task], cfg.max_prompts_per_task,
                            f"{cfg.seed}:{slice_}:{task}"))
    return out


def draw(prompts: list[EvalPrompt], n: int, seed: str) -> list[EvalPrompt]:
    """At most ``n`` prompts, round-robin over workloads (seeded order), so many workloads are covered."""
    prompts = sorted(prompts, key=lambda p: p.prompt_id)
    if not n or len(prompts) <= n:
        return prompts
    rng = random.Random(seed)
    by_wl: dict[str, list[EvalPrompt]] = {}
    for p in prompts:
        by_wl.setdefault(p.workload_id, []).append(p)
    queues = [rng.sample(v, len(v)) for _, v in sorted(by_wl.items())]
    rng.shuffle(queues)
    picked: list[EvalPrompt] = []
    while len(picked) < n:
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop())
    return sorted(picked, key=lambda p: p.prompt_id)
