"""``dragon optimize``: the user's kernel -> k scripts from a model -> each verified -> the best one kept.

Writes beside the kernel (or into ``out_dir``): ``<stem>.best.script`` (codec text) and
``<stem>.scheduled.py`` (the scheduled module as TVMScript).  When no attempt is correct it falls back to
the target's baseline schedule (unscheduled on llvm, the default GPU schedule on cuda) and says so.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from little_dragon.errors import UserError
from little_dragon.generation.config import GenerationConfig
from little_dragon.generation.sample import Generator, generate_attempts, open_generator
from little_dragon.tvmx import target as tgt
from little_dragon.tvmx.schedule import fresh_schedule


@dataclasses.dataclass
class OptimizeResult:
    rows: list[dict[str, Any]]        # attempt, category, latency_us, speedup, message
    best: int | None                  # index of the best correct attempt, or None (fell back)
    script_path: Path | None
    module_path: Path
    baseline_kind: str | None


def check_target(spec: Any) -> dict[str, Any]:
    """The target dict, or a one-line error when it is unknown or its device is not on this machine."""
    try:
        t = tgt.normalize(spec)
        tgt.make(t)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"target {spec!r}: not a TVM target ({str(e).splitlines()[0][:200]})") from None
    import tvm

    if t["kind"] == "cuda" and not tvm.cuda(0).exist:
        raise UserError(f"target {spec!r}: no CUDA device on this machine")
    if t["kind"] not in ("llvm", "cuda"):
        raise UserError(f"target {spec!r}: kind {t['kind']} is not supported (llvm, cuda)")
    return t


def load_kernel(kernel: str) -> tuple[dict[str, Any], Any]:
    from little_dragon.workloads.store import WorkloadError, get_workload

    try:
        return get_workload(kernel)
    except (WorkloadError, FileNotFoundError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(first if kernel in first else f"{kernel}: {first}") from None


def scheduled_module(mod: Any, script: str, target: dict[str, Any]) -> Any:
    from little_dragon import codec

    sch = fresh_schedule(mod)
    codec.apply(script, sch, context=codec.PostprocContext(mod, tgt.make(target)))
    return sch.mod


def optimize(kernel: str, model: str, target: Any = "llvm", attempts: int = 8, gen_cfg: GenerationConfig | None = None,
             evaluator_cfg: Any = None, timing_cfg: Any = None, out_dir: str | Path | None = None,
             generator: Generator | None = None) -> OptimizeResult:
    from little_dragon import atomic
    from little_dragon.datasets.prompts import construction_prompt
    from little_dragon.evaluator.pool import EvalRequest, Evaluator
    from little_dragon.tvmx.baseline import baseline_module

    t = check_target(target)
    row, mod = load_kernel(kernel)
    if attempts < 1:
        raise UserError(f"--attempts {attempts}: need at least 1")
    gen = generator or open_generator(model, gen_cfg or GenerationConfig())
    prompt = construction_prompt(mod.script(), t)
    res = generate_attempts(gen, [prompt], attempts)
    scripts = res.scripts[0]
    with Evaluator(t, evaluator_cfg, timing_cfg) as ev:
        results = ev.evaluate_batch([EvalRequest(mod, s) for s in scripts])
    rows = [{"attempt": i, "category": r.category, "latency_us": r.latency_us, "speedup": r.speedup,
             "baseline_us": r.baseline_us, "message": (r.message or "").splitlines()[0][:120] if r.message else ""}
            for i, r in enumerate(results)]
    ok = [i for i, r in enumerate(results) if r.category == "correct" and r.latency_us]
    best = min(ok, key=lambda i: results[i].latency_us) if ok else None
    stem = Path(kernel).stem if Path(kernel).is_file() else kernel
    dest = Path(out_dir) if out_dir else (Path(kernel).resolve().parent if Path(kernel).is_file() else Path.cwd())
    dest.mkdir(parents=True, exist_ok=True)
    module_path = dest / f"{stem}.scheduled.py"
    script_path = None
    if best is not None:
        script_path = dest / f"{stem}.best.script"
        atomic.write_text(script_path, scripts[best].rstrip("\n") + "\n")
        smod = scheduled_module(mod, scripts[best], t)
        header = (f"# dragon optimize: attempt {best} of {attempts} by {gen.source.label}, "
                  f"{results[best].latency_us:.2f} us, {_x(results[best].speedup)} over the baseline\n")
        kind = results[best].baseline_kind
    else:
        smod, kind = baseline_module(mod, tgt.make(t))
        header = (f"# dragon optimize: no correct attempt among {attempts}; this is the baseline schedule ({kind})\n")
    atomic.write_text(module_path, header + smod.script() + "\n")
    return OptimizeResult(rows, best, script_path, module_path, kind)


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None and math.isfinite(v) else "n/a"


def table(res: OptimizeResult) -> str:
    lines = [f"{'attempt':>7}  {'category':<14} {'latency_us':>12} {'speedup':>8}  note"]
    for r in res.rows:
        lat = f"{r['latency_us']:.2f}" if r["latency_us"] else "-"
        mark = "  <- best" if res.best == r["attempt"] else ""
        lines.append(f"{r['attempt']:>7}  {r['category']:<14} {lat:>12} {_x(r['speedup']):>8}  "
                     f"{r['message'][:60] if r['category'] != 'correct' else ''}{mark}")
    if res.best is None:
        lines.append(f"no attempt was correct: fell back to the baseline schedule ({res.baseline_kind}) -> "
                     f"{res.module_path}")
    else:
        lines.append(f"best script -> {res.script_path}; scheduled module -> {res.module_path}")
    return "\n".join(lines)
