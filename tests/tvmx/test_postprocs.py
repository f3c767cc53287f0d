"""One post-processor list per target: the one tune_tir's space generator picks, in its order."""
from __future__ import annotations

import pytest

# what a real TuneContext(space_generator="post-order-apply") holds for these targets (TVM 0.27, checked with
# tvm.s_tir.tensor_intrin imported; see tvmx/postprocs.py)
LLVM_LIST = ["DisallowDynamicLoop", "RewriteParallelVectorizeUnroll", "RewriteReductionBlock", "RewriteLayout"]
CUDA_LIST = ["DisallowDynamicLoop", "RewriteCooperativeFetch", "RewriteUnboundBlock",
             "RewriteParallelVectorizeUnroll", "RewriteReductionBlock", "VerifyGPUCode"]
CUDA_TC_LIST = CUDA_LIST + ["RewriteTensorize"]   # VerifyGPUCode runs BEFORE the tensorize rewrite


def _cuda(arch):
    return {"kind": "cuda", "arch": arch, "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
            "thread_warp_size": 32}


@pytest.mark.parametrize("target,names", [
    ({"kind": "llvm", "num-cores": 2}, LLVM_LIST),
    (_cuda("sm_70"), CUDA_LIST),
    (_cuda("sm_75"), CUDA_TC_LIST),
    (_cuda("sm_90"), CUDA_TC_LIST),
    (_cuda("sm_90a"), CUDA_TC_LIST),
])
def test_target_postprocs_follow_tunings_choice(target, names):
    import tvm
    from tvm import te

    from little_dragon.tvmx.postprocs import target_postprocs

    a = te.placeholder((16,), name="A")
    mod = tvm.IRModule({"main": te.create_prim_func([a, te.compute((16,), lambda i: a[i] + 1, name="B")])})
    assert [type(p).__name__ for p in target_postprocs(mod, target)] == names


def test_split_postproc_and_tensor_intrinsic_detection():
    from little_dragon.tvmx.postprocs import needs_tensor_intrinsics, split_postproc

    trace = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SampleCategorical", [], [[1, 2], [0.5, 0.5]], ["v1"]],
              ["EnterPostproc", [], [], []], ["Unannotate", ["b0"], ["k"], []]], [[1, 0]]]
    pre, post = split_postproc(trace)
    assert pre == [trace[0][:2], [[1, 0]]] and post == trace[0][2:]
    assert split_postproc(pre) == (pre, None)
    assert not needs_tensor_intrinsics(trace)
    assert needs_tensor_intrinsics([[["Annotate", ["b0", "1"], ["meta_schedule.auto_tensorize"], []]], []])
