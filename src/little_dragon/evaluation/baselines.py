"""Baselines at equal budget, as scripts the evaluator scores exactly like the model's attempts.

- ``random``: k random valid schedules from MetaSchedule's own design space (post-order-apply space
  generator, fresh random decisions, the target's post-processors; only traces every post-processor
  accepts count as valid samples);
- ``metaschedule_k``: the harvest's first k measured candidates of the workload, in trial order (MetaSchedule
  tuning with k trials);
- ``metaschedule_full``: the best candidate of the harvest's whole budget;
- ``given``: for refinement, the given script itself.
The harvest's per-trial latencies and wall time also give MetaSchedule's latency-vs-time curve (Fig 4).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import time
from typing import Any

import numpy as np
import pandas as pd

from little_dragon.evaluation.prompts import EvalPrompt, same_target
from little_dragon.tvmx.schedule import fresh_schedule

log = logging.getLogger(__name__)


def random_design_space_scripts(tvmscript: str, target: dict[str, Any], k: int, seed: int) -> list[str]:
    """``k`` codec scripts of random valid schedules from the workload's design space (fewer if the space
    yields fewer valid samples in ``8 k`` tries)."""
    import tvm
    from tvm.s_tir import Trace
    from tvm.s_tir import meta_schedule as ms

    from little_dragon import codec
    from little_dragon.workloads.store import module_from_script

    mod = module_from_script(tvmscript)
    ctx = ms.TuneContext(mod, target=tvm.target.Target(target), space_generator="post-order-apply",
                         task_name="main", rand_state=seed + 1)
    spaces = [s.trace for s in ctx.generate_design_space()]
    postprocs = list(ctx.space_generator.postprocs)
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(8 * k):
        if len(out) == k or not spaces:
            break
        design = spaces[rng.randrange(len(spaces))]
        sch = fresh_schedule(mod, seed=rng.randrange(1, 1 << 30))
        try:
            Trace(design.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()
            if not all(p.apply(sch) for p in postprocs):
                continue
            out.append(codec.encode(codec.canonical_json(sch.trace.as_json())))
        except Exception as e:  # noqa: BLE001  a sampled decision the schedule rejects: not a valid sample
            log.debug("random design-space sample rejected: %s", e)
    return out


@dataclasses.dataclass
class HarvestTrials:
    """One workload's measured candidates in trial order (script, latency, cumulative tuning seconds)."""
    scripts: list[str | None]   # None where the trace does not encode (counted as failed)
    latency_us: list[float]     # NaN for failed candidates
    seconds_per_trial: float


class HarvestIndex:
    """The harvests of the evaluation target, indexed by workload id."""

    def __init__(self, roots: list[str], target: dict[str, Any]):
        from little_dragon.datasets.examples import find_harvests

        self.harvests = [h for h in find_harvests(roots) if same_target(h.target, target)]
        self._status: dict[str, pd.DataFrame] = {}

    def trials(self, workload_id: str) -> HarvestTrials | None:
        from little_dragon import codec

        for h in self.harvests:
            rec = h.records[h.records["workload_id"] == workload_id]
            if rec.empty:
                continue
            rec = rec.sort_values("trial")
            status_p = h.path / "status.parquet"
            wall = math.nan
            if status_p.is_file():
                st = pd.read_parquet(status_p)
                st = st[st["workload_id"] == workload_id]
                if not st.empty:
                    wall = float(st["wall_s"].iloc[0])
            scripts: list[str | None] = []
            for tj in rec["trace_json"]:
                try:
                    scripts.append(codec.encode(json.loads(tj)))
                except Exception:  # noqa: BLE001  a record the codec cannot write: that trial failed for us
                    scripts.append(None)
            lat = [float(x) if bool(v) else math.nan for x, v in zip(rec["latency_us"], rec["valid"])]
            per = wall / len(rec) if math.isfinite(wall) and len(rec) else math.nan
            return HarvestTrials(scripts, lat, per)
        return None


def metaschedule_scripts(trials: HarvestTrials, k: int) -> tuple[list[str], str | None]:
    """(the first k candidates' scripts, the full budget's best script)."""
    first = [s for s in trials.scripts[:k] if s is not None]
    lat = np.array(trials.latency_us, dtype=float)
    ok = [i for i in np.argsort(np.where(np.isfinite(lat), lat, np.inf)) if np.isfinite(lat[i])
          and trials.scripts[i] is not None]
    return first, (trials.scripts[ok[0]] if ok else None)


def metaschedule_curve(trials: HarvestTrials) -> tuple[np.ndarray, np.ndarray]:
    """(cumulative tuning seconds, best latency so far) after each trial."""
    lat = np.array(trials.latency_us, dtype=float)
    best = np.fmin.accumulate(np.where(np.isfinite(lat), lat, np.inf))
    t = np.arange(1, len(lat) + 1) * (trials.seconds_per_trial if math.isfinite(trials.seconds_per_trial) else 1.0)
    return t, best


def _random_for_all(jobs: list[tuple[str, str, dict[str, Any], int, int]]) -> dict[str, list[str] | str]:
    """prompt_id -> scripts (or the error text), for (prompt_id, tvmscript, target, k, seed) jobs."""
    out: dict[str, list[str] | str] = {}
    for pid, script, target, k, seed in jobs:
        t0 = time.perf_counter()
        try:
            out[pid] = random_design_space_scripts(script, target, k, seed)
        except Exception as e:  # noqa: BLE001  a workload whose space TVM cannot generate: reported empty
            out[pid] = f"{type(e).__name__}: {e}"
        log.info("%s: random design-space schedules in %.1f s", pid, time.perf_counter() - t0)
    return out


def random_baselines(jobs: list[tuple[str, str, dict[str, Any], int, int]]) -> dict[str, list[str] | str]:
    """``_random_for_all`` in a fresh (spawned) process.  MetaSchedule's TuneContext imports TVM's tensor
    intrinsics, whose TVMScript parser calls ``inspect.stack()``; that walks ``sys.modules`` for every frame,
    and with torch and transformers loaded (after generation) it took over 10 minutes instead of ~20 s."""
    import concurrent.futures
    import multiprocessing

    if not jobs:
        return {}
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        return ex.submit(_random_for_all, jobs).result()


def baseline_plan(prompts: list[EvalPrompt], k: int, target: dict[str, Any], index: HarvestIndex | None,
                  random_baseline: bool, seed: int) -> list[tuple[EvalPrompt, str, list[str]]]:
    """(prompt, method, scripts) for every baseline at k."""
    plan: list[tuple[EvalPrompt, str, list[str]]] = []
    rnd = random_baselines([(p.prompt_id, p.tvmscript, dict(target), k, seed + i) for i, p in enumerate(prompts)
                            if p.task == "construction"]) if random_baseline else {}
    for p in prompts:
        if p.task == "refinement":
            if p.given_script:
                plan.append((p, "given", [p.given_script]))
            continue
        if random_baseline:
            got = rnd.get(p.prompt_id, [])
            if isinstance(got, str):
                log.warning("%s: random design-space baseline failed: %s", p.workload_id, got)
                got = []
            plan.append((p, "random", got))
        if index is not None:
            tr = index.trials(p.workload_id)
            if tr is None:
                log.warning("%s: no harvest records for the MetaSchedule baseline", p.workload_id)
                continue
            first, best = metaschedule_scripts(tr, k)
            plan.append((p, "metaschedule_k", first))
            if best is not None:
                plan.append((p, "metaschedule_full", [best]))
    return plan
