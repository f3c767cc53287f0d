"""Small real SFT data for tests and benchmarks while the dataset stage is not there (or too big for a test).

Every row is real: the prompt holds the canonical TVMScript of a ``te.create_prim_func`` workload, the
completion is ``str(trace)`` of a schedule actually applied by TVM (tile sampling, split, reorder,
parallel, vectorize, ...), so a model trained on it learns the same kind of text as on the real set and the
validity check really applies what it generates.  Rows follow the dataset contract (``prompt``,
``completion``, ``task``, ``workload_id``, ``target``) and also carry ``tvmscript`` so the validity check
can rebuild the workload without the workload store.
"""
from __future__ import annotations

import hashlib
import json
import random
from typing import Any

TARGET = json.dumps({"kind": "llvm", "num-cores": 2}, sort_keys=True)


def _workloads() -> list[tuple[str, Any]]:
    import tvm
    from tvm import te, topi

    out = []
    for m, n, k in [(64, 64, 64), (128, 64, 32), (32, 128, 64), (96, 48, 80)]:
        a = te.placeholder((m, k), name="A")
        b = te.placeholder((k, n), name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        out.append((f"matmul_{m}_{n}_{k}", te.create_prim_func([a, b, c])))
    for n, c_ in [(1, 16), (2, 8)]:
        x = te.placeholder((n, c_, 14, 14), name="X")
        w = te.placeholder((16, c_, 3, 3), name="W")
        y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
        out.append((f"conv2d_relu_{n}_{c_}", te.create_prim_func([x, w, y])))
    x = te.placeholder((64, 256), name="X")
    out.append(("softmax_64_256", te.create_prim_func([x, topi.nn.softmax(x)])))
    return [(name, tvm.IRModule({"main": f.with_attr("global_symbol", "main")})) for name, f in out]


def _random_schedule(mod: Any, rng: random.Random) -> str:
    """Apply a random but legal schedule to ``mod`` and return its trace text."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod, seed=rng.randrange(1 << 30))
    for b in _leaf_blocks(sch):
        loops = sch.get_loops(b)
        if not loops:
            continue
        outer_parts = []
        for lp in loops[: rng.choice([1, 2])]:
            factors = sch.sample_perfect_tile(lp, n=2, max_innermost_factor=rng.choice([4, 8, 16]))
            outer_parts.append(sch.split(lp, factors))
        if len(outer_parts) == 2 and rng.random() < 0.7:
            (o0, i0), (o1, i1) = outer_parts
            sch.reorder(o0, o1, i0, i1)
        if outer_parts and rng.random() < 0.8:
            sch.parallel(outer_parts[0][0])
        if rng.random() < 0.5:
            sch.annotate(b, "meta_schedule.unroll_explicit", rng.choice([0, 16, 64]))
    return script_text(sch.trace)


def script_text(trace: Any) -> str:
    """The model-facing text of a trace: codec text once the codec exists, else the ``str(trace)`` body."""
    from little_dragon.training.validity import codec_available

    if codec_available():
        from little_dragon import codec

        return codec.encode(json.loads(json.dumps(trace.as_json(), default=int)))
    return script_body(str(trace))


def _leaf_blocks(sch: Any) -> list[Any]:
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def script_body(trace_text: str) -> str:
    """The statements of ``def apply_trace(sch)`` without the header and indentation."""
    lines = trace_text.splitlines()
    body = [ln[2:] if ln.startswith("  ") else ln for ln in lines if not ln.startswith(("#", "def "))]
    return "\n".join(body).strip() + "\n"


def make_rows(n_per_workload: int = 6, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of both tasks: construction (write a script) and refinement (improve a given script)."""
    from little_dragon.training.data import construction_prompt, refinement_prompt

    rng = random.Random(seed)
    rows = []
    for name, mod in _workloads():
        tvmscript = mod.script()
        wid = "s" + hashlib.sha256(tvmscript.encode()).hexdigest()[:16]
        scripts = []
        for _ in range(n_per_workload):
            try:
                scripts.append(_random_schedule(mod, rng))
            except Exception:  # noqa: BLE001 - a random schedule the block shape rejects: draw another
                continue
        for i, s in enumerate(scripts):
            if i % 2 == 0 or i == 0:
                rows.append({"prompt": construction_prompt(tvmscript), "completion": s, "task": "construction",
                             "workload_id": wid, "target": TARGET, "tvmscript": tvmscript, "name": name})
            else:
                rows.append({"prompt": refinement_prompt(tvmscript, scripts[i - 1]), "completion": s,
                             "task": "refinement", "workload_id": wid, "target": TARGET, "tvmscript": tvmscript,
                             "name": name})
    return rows
