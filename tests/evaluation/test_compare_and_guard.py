"""compare on a known case; the sealed guard refuses every reader but the evaluation stage."""
from __future__ import annotations

import math

import pandas as pd
import pytest


def _att(rows):
    return pd.DataFrame([{"prompt_id": p, "task": t, "slice": "sealed", "family": "dense", "method": "model",
                          "category": "correct" if s else "wrong_result", "speedup": s if s else math.nan}
                         for p, t, s in rows])


def test_compare_counts_a_known_case_with_ties_apart():
    from little_dragon.evaluation.compare import compare_attempts

    a = _att([("c1", "construction", 2.0), ("c1", "construction", None),   # A solves, B does not
              ("c2", "construction", 3.0),                                   # both solve, A faster
              ("c3", "construction", 1.50),                                  # within 2%: tie
              ("c4", "construction", None),                                  # both unsolved: tie
              ("r1", "refinement", 1.2), ("r2", "refinement", None)])        # A wins r1, B wins r2
    b = _att([("c1", "construction", None), ("c2", "construction", 1.5), ("c3", "construction", 1.51),
              ("c4", "construction", None), ("r1", "refinement", None), ("r2", "refinement", 1.1),
              ("x9", "construction", 9.0)])                                  # not in A: not counted
    cmp = compare_attempts(a, b, "RL", "SFT")
    assert cmp.sentence() == ("RL beats SFT on 2/4 construction tasks and 1/2 refinement prompts "
                              "(ties: 2 construction, 0 refinement; SFT beats RL: 0 construction, 1 refinement)")


def test_guard_refuses_other_readers(built):
    from little_dragon.datasets.guard import SealedDataError, read_sealed

    cfg, _ = built
    path = f"{cfg.sealed_dir}/test.jsonl"
    with pytest.raises(SealedDataError, match="may not read the sealed"):
        read_sealed(path)                                   # this test module is not an allowed reader
    for module in ("little_dragon.training.rl", "little_dragon.generation.sample", "__main__"):
        code = compile("read_sealed(path)", f"<{module}>", "eval")
        with pytest.raises(SealedDataError, match=module.replace(".", r"\.")):
            eval(code, {"__name__": module, "read_sealed": read_sealed, "path": path})
    # the evaluation stage is allowed, and reads the prompts of both slices
    from little_dragon.evaluation.eval_config import EvaluationConfig
    from little_dragon.evaluation.prompts import load_prompts

    prompts = load_prompts(EvaluationConfig(sealed_dir=cfg.sealed_dir))
    assert {p.slice for p in prompts} == {"sealed", "heldout_family"}
    assert {p.task for p in prompts} == {"construction", "refinement"}


def test_target_flag_replaces_the_whole_target():
    """`dragon eval run --target cuda` evaluates on the CUDA target as such: nothing of the llvm default
    (num-cores) is merged in (TVM refused {"kind": "cuda", "num-cores": 2} on the H200)."""
    from little_dragon.evaluation.cli import load_configs
    from little_dragon.tvmx import target as tgt

    cfg, *_ = load_configs(target="cuda")
    assert cfg.target == tgt.normalize("cuda") and "num-cores" not in cfg.target
    cfg, *_ = load_configs(["target.max_threads_per_block=512"], target="cuda")
    assert cfg.target["max_threads_per_block"] == 512 and cfg.target["kind"] == "cuda"
    cfg, *_ = load_configs()
    assert cfg.target["kind"] == "llvm"
