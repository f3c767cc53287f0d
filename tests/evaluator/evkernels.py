"""Real TVM workloads and real traces (MetaSchedule design spaces, Schedule-API edits) for the tests."""
from __future__ import annotations

from dragon_testkit import LLVM, matmul_tensors, prim_module, softmax_tensors

__all__ = ["LLVM", "matmul", "softmax", "script_of", "design_space_scripts", "schedule", "trace_json"]


def matmul(n: int = 128, m: int | None = None, k: int | None = None, dtype: str = "float32"):
    return prim_module(matmul_tensors(n, m, k, dtype))


def softmax(m: int = 64, n: int = 128):
    return prim_module(softmax_tensors(m, n))


def script_of(sch) -> str:
    """A real trace as the script text the model would write (codec text once the codec has landed)."""
    from little_dragon.evaluator.script import encode_script
    from little_dragon.codec import canonical_json

    return encode_script(canonical_json(sch.trace.as_json(remove_postproc=False)))


def design_space_scripts(mod, target=LLVM, seed: int = 1) -> list[str]:
    """MetaSchedule's own design space for ``mod`` (sampled decisions): tuned-search starting points."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.tvmx.postprocs import light_tune_context

    kind = "llvm" if target["kind"] == "llvm" else "cuda"
    sg = ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
    spaces = light_tune_context(mod, tvm.target.Target(target), sg, rand_state=seed).generate_design_space()
    return [script_of(s) for s in spaces]


def schedule(mod, edit) -> str:
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    edit(sch)
    return script_of(sch)


def trace_json(script: str):
    from little_dragon.evaluator.script import decode_script

    return decode_script(script)
