"""Small real SFT rows for tests and benchmarks, without a harvest (the dataset stage needs one).

Every row is real and in the dataset stage's format: the completion is codec text (``codec.encode`` of the
canonical JSON) of a post-processed trace sampled from a MetaSchedule design space
(``little_dragon.codec.corpus``: the same replay-with-fresh-decisions a tuning search starts from), and the
prompt comes from the dataset stage's template (``little_dragon.datasets.prompts``) over the workload's
canonical TVMScript.  Rows carry the dataset contract's columns (``prompt``, ``completion``, ``task``,
``workload_id``, ``target``, ``family``, ``name``, ``tvmscript``), so the validity check rebuilds the
workload from the row exactly as it does for the real set.  Only the latencies are missing: refinement
rows pair two sampled scripts of one workload without any claim that the second is faster.
"""
from __future__ import annotations

import json
import random
from typing import Any

from little_dragon.tvmx.schedule import fresh_schedule

# corpus workloads (llvm design spaces) -> the workload family they belong to
FAMILIES = {
    "matmul_64": "dense",
    "matmul_relu_128x64x32": "dense",
    "softmax_64x128": "softmax",
    "row_sum_128x512": "reduction",
    "elementwise_exp_64x64": "elementwise",
}
TARGET_KIND = "llvm"


def workload_scripts(name: str, n: int, seed: int) -> tuple[Any, list[str]]:
    """The IRModule of corpus workload ``name`` and up to ``n`` distinct codec scripts sampled for it.

    Only traces every post-processor accepted are kept, and each script is checked to decode back to the
    exact trace JSON and to apply to a fresh schedule, as the dataset builder checks harvested ones."""

    from little_dragon import codec
    from little_dragon.codec.corpus import DesignSpaces

    spaces = DesignSpaces(name, TARGET_KIND)
    rng = random.Random(f"{seed}:{name}")
    scripts: list[str] = []
    for attempt in range(4 * n):
        sampled = spaces.sample(rng.randrange(len(spaces.spaces)), rng.randrange(1 << 20))
        if not sampled.postproc_ok:
            continue
        trace_json = codec.canonical_json(sampled.trace.as_json())
        text = codec.encode(trace_json)
        if text in scripts:
            continue
        if json.dumps(codec.decode(text)) != json.dumps(trace_json):  # canonical form, as the builder checks
            raise AssertionError(f"corpus workload {name}: codec round trip changed sampled trace {attempt}")
        codec.apply(text, fresh_schedule(spaces.mod))
        scripts.append(text)
        if len(scripts) == n:
            break
    return spaces.mod, scripts


def make_rows(n_per_workload: int = 6, seed: int = 0, workloads: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of both tasks for each workload: even-numbered scripts as construction examples, odd ones as
    refinement examples whose prompt holds the script before them."""
    from little_dragon.codec.corpus import target_dict
    from little_dragon.datasets.prompts import construction_prompt, refinement_prompt
    from little_dragon.workloads.store import structural_hash, workload_id_of

    target = json.dumps(target_dict(TARGET_KIND), sort_keys=True)
    rows = []
    for name in workloads or list(FAMILIES):
        mod, scripts = workload_scripts(name, n_per_workload, seed)
        tvmscript = mod.script()
        common = {"workload_id": workload_id_of(mod), "target": target, "family": FAMILIES.get(name, "other"),
                  "name": name, "structural_hash": str(structural_hash(mod)), "tvmscript": tvmscript}
        for i, s in enumerate(scripts):
            if i % 2 == 0:
                rows.append({"prompt": construction_prompt(tvmscript, target), "completion": s,
                             "task": "construction", "start_script": "", **common})
            else:
                rows.append({"prompt": refinement_prompt(tvmscript, target, scripts[i - 1]), "completion": s,
                             "task": "refinement", "start_script": scripts[i - 1], **common})
    return rows
