"""Shared fixtures: traces sampled from real design spaces (llvm, CUDA, tensor cores), built once per session.

The tensor-core spaces import ``tvm.s_tir.tensor_intrin`` (~20 s), so they are built once and shared."""
from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("DRAGON_NO_MLFLOW", "1")

# (workload, target): a spread of families; tensor cores for float16 (int32 and int64 index maps)
SAMPLED = [
    ("matmul_64", "llvm"), ("conv2d_nchw_relu", "llvm"), ("layer_norm_32x256", "llvm"), ("row_sum_128x512", "llvm"),
    ("matmul_relu_128x64x32", "cuda"), ("softmax_64x128", "cuda"), ("elementwise_exp_64x64", "cuda"),
    ("batch_matmul_4x32", "cuda"), ("matmul_fp16_tc_128", "cuda"), ("matmul_fp16_tc_i64_64x128x64", "cuda"),
]


@pytest.fixture(scope="session")
def design_spaces():
    from little_dragon.codec.corpus import DesignSpaces

    return {key: DesignSpaces(*key) for key in SAMPLED}


@pytest.fixture(scope="session")
def sampled(design_spaces):
    """Two post-processed samples of every design space of every (workload, target) above."""
    out = []
    for spaces in design_spaces.values():
        for sp in range(len(spaces.spaces)):
            for seed in (0, 1):
                out.append(spaces.sample(sp, seed))
    return out


@pytest.fixture(scope="session")
def json_database(tmp_path_factory, sampled):
    """A real MetaSchedule JSON database (written by TVM) per workload, in the harvest layout
    ``<harvest>/db/<workload>/`` (llvm and cuda harvests)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    root = tmp_path_factory.mktemp("harvest")
    for s in sampled:
        if not s.postproc_ok:
            continue
        d = root / s.target / "db" / f"{s.workload}"
        d.mkdir(parents=True, exist_ok=True)
        db = ms.database.JSONDatabase(work_dir=str(d))
        wl = db.commit_workload(s.mod)
        target = tvm.target.Target(json.loads(json.dumps(_target(s.target))))
        args = ms.arg_info.ArgInfo.from_prim_func(s.mod["main"])
        db.commit_tuning_record(ms.database.TuningRecord(s.trace, wl, [1e-3], target, args))
    return root


def _target(kind: str):
    from little_dragon.codec.corpus import target_dict

    return target_dict(kind)
