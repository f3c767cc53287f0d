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



# Scripts that make TVM 0.27's RewriteParallelVectorizeUnroll loop forever (it never removes a root annotation
# whose value it cannot read as an integer other than -1): checked in a child process under a 4 GiB
# address-space limit, so a regression fails this test (bad_alloc or the timeout) instead of taking the test run
# to the machine's OOM killer, as the unguarded check did (24 GB in seconds).
_CHILD = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import tvm
from tvm import te
from little_dragon.codec.postproc import PostprocContext
from little_dragon.codec.validity import check_module_script
a = te.placeholder((64, 64), name="A"); b = te.placeholder((64, 64), name="B")
k = te.reduce_axis((0, 64), name="k")
c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
ctx = PostprocContext(mod, {"kind": "llvm", "num-cores": 2})
for script in sys.argv[1:]:
    v = check_module_script(script, mod, ctx)
    print(repr((v.applied, v.error)), flush=True)
"""


def _verdicts(scripts: list[str]) -> list[tuple[bool, str]]:
    import ast
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _CHILD, *scripts], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [ast.literal_eval(line) for line in out.stdout.splitlines() if line.startswith("(")]


def test_a_root_annotation_tvm_would_loop_on_is_rejected_at_once():
    """A string, a float or -1 as the value of `parallel`/`vectorize`/`unroll` on the root block: the
    post-processing is refused with the reason, before TVM is asked; integers post-process as before."""
    bad = [f"blk C\nblk root\nann b1 {key} {value}\npost *\n"
           for key in ("parallel", "vectorize", "unroll") for value in ('"SSRSRS"', "-1", "1.5")]
    good = "blk C\nblk root\nann b1 parallel 64\nann b1 vectorize 0\nann b1 unroll cat unroll = 2\npost *\n"
    *verdicts, ok = _verdicts(bad + [good])
    assert len(verdicts) == len(bad)
    for script, (applied, error) in zip(bad, verdicts):
        assert not applied, script
        assert "RewriteParallelVectorizeUnroll" in error and "non-negative integer" in error, (script, error)
    assert ok[0], ok[1]


def test_a_post_processor_that_raises_is_named_with_its_error_line_not_the_backtrace():
    """A TVM error's text can end in its C++ backtrace: the refusal carries the error's own line (as the codec's
    apply errors do, ``tvmx.errors``), with the post-processor's name."""
    import tvm
    from tvm import te

    from little_dragon.tvmx.postprocs import PostprocRejected, run_postprocs

    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] + 1, name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))

    class RaisingPostproc:
        def apply(self, sch):
            raise RuntimeError("Check failed: the useful line\nStack trace:\n  File \"x.cc\", line 1\n  [bt] (0) f")

    with pytest.raises(PostprocRejected) as e:
        run_postprocs(sch, [RaisingPostproc()])
    assert e.value.name == "RaisingPostproc"
    assert e.value.reason == "RuntimeError: Check failed: the useful line", e.value.reason
    assert str(e.value) == "post-processor RaisingPostproc failed: RuntimeError: Check failed: the useful line"
