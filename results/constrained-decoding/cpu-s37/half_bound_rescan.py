"""Session 37: the half-bound rule against every script that session 36's H100 A/B wrote (first and final scripts of
every constrained and free arm, 16 CUDA validation prompts x 8): at the script's `post *`, does TVM's RewriteUnboundBlock
refuse ("blockIdx is bound but threadIdx is not"), and does the rule (``ScheduleState.half_bound``) mask that end?
Also checked on every script whose post-processing passes: the rule never masks it.

    .venv/bin/python results/constrained-decoding/cpu-s37/half_bound_rescan.py OUT.json
(run from the repository root, with the CUDA split of docs/gpu.md's h200_prepare.sh in .devcarry/cudads)."""
import collections
import glob
import json
import sys

sys.path.insert(0, "benchmarks")
from constrained_bench import _rows  # noqa: E402  the bench's own choice of prompts

from little_dragon.codec import PostprocContext, apply  # noqa: E402
from little_dragon.generation import constrained  # noqa: E402
from little_dragon.tvmx.build import import_tensor_intrinsics  # noqa: E402

import_tensor_intrinsics()
rows = _rows(".devcarry/cudads/datasets/validation.jsonl", 16, 0)
workloads = [constrained.workload_of_prompt(r["prompt"]) for r in rows]
seen: dict[tuple[int, str], dict] = {}
for path in sorted(glob.glob("results/constrained-decoding/h100-s36/ab_call*.json")):
    arms = json.load(open(path))["ab"]["arms"]
    for name, arm in arms.items():
        for kind in ("first_scripts", "final_scripts"):
            for p, scripts in enumerate(arm.get(kind) or []):
                for text in scripts:
                    if "post *" not in text or (p, text) in seen:
                        continue
                    head = text[:text.index("post *")]
                    wl = workloads[p]
                    row = {"arm": name, "prompt": p}
                    try:
                        state = constrained._prefix_state(wl.mod, head, wl.key)
                        row["half_bound"] = state.half_bound
                    except Exception as e:  # noqa: BLE001 - a prefix TVM refuses: no end to mask
                        row["prefix_refused"] = str(e)[-200:]
                        seen[(p, text)] = row
                        continue
                    from tvm import s_tir
                    try:
                        apply(head + "post *\n", s_tir.Schedule(wl.mod), PostprocContext(wl.mod, json.loads(wl.target)))
                        row["post"] = "passes"
                    except Exception as e:  # noqa: BLE001
                        msg = str(e)
                        row["post"] = ("half bound" if "blockIdx is bound but threadIdx is not" in msg
                                       else "refused: " + msg.strip().splitlines()[-1][-160:])
                    seen[(p, text)] = row
table = collections.Counter((r.get("post", "prefix refused"), bool(r.get("half_bound"))) for r in seen.values())
out = {"scripts": len(seen), "table": {f"{post} | masked={m}": n for (post, m), n in sorted(table.items())},
       "rows": list(seen.values())}
json.dump(out, open(sys.argv[1], "w"), indent=1)
for k, n in out["table"].items():
    print(f"{n:5d}  {k}")
