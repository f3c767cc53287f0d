"""The end check refuses a kernel that touches a tensor-core fragment element by element
(``constrain_state.fragment_elements``, in ``schedule_worker.finish_check`` on an accelerator).

A cut inside a tensor-core schedule (the accumulator's or an input's `wmma.*` cache stage written, its tensorize
annotation not yet) post-processes: RewriteTensorize only warns when a block does not match its intrinsic, and the
block stays scalar code on a fragment.  TVM lowers it; nvcc refuses the CUDA it generates (session 22's H200 sealed
run: 5 `conv2d_transpose` build errors, "no operator "+" matches these operands").  Real parts: the committed CUDA
tensor-core record MetaSchedule built and ran (tests/codec/data/real_cuda_valid_db), TVM, SmolLM2's tokenizer, and
nvcc where the machine has it."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from dragon_testkit import CODEC_DATA, model_script_lines, real_records


@pytest.fixture(scope="module")
def record():
    """(module, target, post context, the record's lines before `post *`)."""
    import tvm

    from little_dragon import codec
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    _, mod, target, tj = next(real_records(CODEC_DATA / "real_cuda_valid_db"))
    lines = [x for x in model_script_lines(tj) if x != "post *"]
    assert lines[52].startswith("ann b6 fetch") and lines[80].startswith("ann b14 tensorize $load_bt"), lines[50:81]
    return mod, target, codec.PostprocContext(mod, tvm.target.Target(json.loads(target))), lines


def _cut(lines, k):
    return "".join(x + "\n" for x in lines[:k]) + "post *\n"


def test_a_cut_inside_the_fragments_is_refused_at_the_end(record):
    """Cut after 53 to 80 lines (the accumulator's fragment stage and its store written, the inputs' fragments not yet
    tensorized) the end check refuses it, naming the scalar block and its fragment (after 80, TVM's lowering does); cut after 81 lines (the last input
    tensorized) and the whole record pass, as before 53 lines nothing touches a fragment."""
    from little_dragon.generation.schedule_worker import finish_check

    mod, _, ctx, lines = record
    for k in (53, 58, 64, 72):
        why = finish_check(mod, ctx, _cut(lines, k))
        assert why.startswith("untensorized fragment: block ") and "wmma." in why, (k, why)
    # after 80 lines TVM's lowering refuses the fragments first (the rule reads the lowered kernel's allocations)
    why = finish_check(mod, ctx, _cut(lines, 80))
    assert why.startswith("lowering: ") and "fragment" in why and "wmma.matrix_b" in why, why
    for k in (38, 81, len(lines)):
        assert finish_check(mod, ctx, _cut(lines, k)) == "", k
    assert not finish_check(mod, ctx, _cut(lines, 52)).startswith("untensorized")  # RewriteUnboundBlock's refusal


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler on this machine")
def test_nvcc_refuses_the_code_the_rule_refuses(record, tmp_path):
    """The rule is the compiler's verdict: the CUDA that TVM generates for the cuts after 58 and 72 lines does not
    compile (a fragment used as a number), the cut after 81 lines does (sm_90; nvcc only compiles, no GPU needed)."""
    import tvm

    from little_dragon import codec
    from little_dragon.evaluator.replay import replay
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import target_postprocs

    mod, target, ctx, lines = record
    tgt = tvm.target.Target(json.loads(target))
    verdicts = {}
    for k in (58, 72, 81):
        text = _cut(lines, k)
        done = replay(mod, codec.decode(text, ctx), target_postprocs(mod, tgt), text=text)
        source = fast_build(done.sch.mod, tgt).imports[0].inspect_source()
        (tmp_path / f"k{k}.cu").write_text(source)
        out = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(tmp_path / f"k{k}.cu"), "-o", str(tmp_path / f"k{k}.o")],
                             capture_output=True, text=True, timeout=600)
        verdicts[k] = (out.returncode, [x for x in out.stderr.splitlines() if ": error: " in x])
    assert verdicts[58][0] != 0 and any('no operator "+"' in e for e in verdicts[58][1]), verdicts[58]
    assert verdicts[72][0] != 0 and verdicts[72][1], verdicts[72]
    assert verdicts[81] == (0, []), verdicts[81]


def test_an_attempt_cut_inside_the_fragments_ends_before_them(record, smollm2):
    """An attempt the token budget cut after 58 lines and 3 bytes: before this rule it ended as its lines and `post *`
    (what nvcc refuses); now it ends at the longest earlier prefix that passes the end check within ``finish_back``
    lines: its first 38 lines (before the accumulator's cache stages), which the judge's check accepts, and no block
    there touches a fragment."""
    from little_dragon.codec.validity import check_module_script
    from little_dragon.generation.constrain_state import fragment_elements
    from little_dragon.generation.constrained import ScriptConstraint, TokenEngine, Workload
    from little_dragon.tvmx.schedule import fresh_schedule

    mod, target, _, lines = record
    wl = Workload(mod, target)
    keep = "".join(x + "\n" for x in lines[:58])
    c = ScriptConstraint(TokenEngine(smollm2), wl)
    for t in smollm2(keep + lines[58][:3], add_special_tokens=False)["input_ids"]:
        c.advance(t)
    assert not c.dead, c.error
    c.finish_back = 24
    script = c.script(keep + lines[58][:3])
    assert script == _cut(lines, 38), script[-300:]
    assert (c.stats.truncated, c.stats.finished_earlier, c.stats.finished_earlier_lines) == (1, 1, 20)
    sch = fresh_schedule(mod)
    assert check_module_script(script, mod, wl.post_context, schedule=sch).valid
    assert fragment_elements(sch) == []


# B = 2 A over 64 x 64, A read through a `wmma.accumulator` stage: at the root (session 21's correct rms_norm attempt:
# its own kernel, the stage host memory passed to both kernels), or computed inside B's kernel (a fragment there)
ROOT_STAGE = "blk B\ncread b0 0 wmma.accumulator\npost *\n"
KERNEL_STAGE = ("blk B\ncread b0 0 wmma.accumulator\nloops b0 2\nfuse l0 l1\nsplit l2 _ 256\nbind l3 bx\nbind l4 tx\n"
                "at b1 l4\npost *\n")


@pytest.fixture(scope="module")
def doubled():
    from tvm import te

    from dragon_testkit import prim_module

    a = te.placeholder((64, 64), name="A")
    return prim_module([a, te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="B")])


def _scheduled(mod, text):
    from dragon_testkit import H200_TARGET

    from little_dragon import codec
    from little_dragon.tvmx.schedule import fresh_schedule

    sch = fresh_schedule(mod)
    codec.apply(text, sch, codec.PostprocContext(mod, H200_TARGET))
    return sch


def test_a_fragment_stage_the_host_allocates_is_not_refused(doubled):
    """Both stages touch the fragment element by element (``fragment_elements`` names them); only the one inside the
    kernel is a fragment there (``device_allocations``) and refused."""
    import tvm
    from dragon_testkit import H200_TARGET, end_check

    from little_dragon.generation.constrain_state import fragment_elements
    from little_dragon.generation.constrain_state import device_allocations
    from little_dragon.tvmx.build import lower_for_target

    for text, in_kernel in ((ROOT_STAGE, False), (KERNEL_STAGE, True)):
        sch = _scheduled(doubled, text)
        assert fragment_elements(sch)[1] == "A_wmma.accumulator"
        devices = lower_for_target(sch.mod, tvm.target.Target(H200_TARGET))[1]
        assert ("A_wmma.accumulator" in device_allocations(devices)) is in_kernel
    assert end_check(doubled, ROOT_STAGE, H200_TARGET) == ""
    assert end_check(doubled, KERNEL_STAGE, H200_TARGET).startswith(
        "untensorized fragment: block A_wmma.accumulator reads or writes the tensor-core fragment A_wmma.accumulator")


def test_cuda_code_generation_agrees(doubled, tmp_path):
    """TVM's CUDA code generation refuses the kernel's fragment (no wmma shape: it is no fragment of an intrinsic)
    and generates the root stage's code as plain pointers, which nvcc compiles where the machine has it."""
    import tvm
    from dragon_testkit import H200_TARGET

    from little_dragon.tvmx.build import fast_build

    target = tvm.target.Target(H200_TARGET)
    with pytest.raises(Exception, match="Cannot find shape of the wmma fragment A_wmma.accumulator"):
        fast_build(_scheduled(doubled, KERNEL_STAGE).mod, target)
    source = fast_build(_scheduled(doubled, ROOT_STAGE).mod, target).imports[0].inspect_source()
    assert "wmma::fragment" not in source
    if shutil.which("nvcc") is not None:
        (tmp_path / "root.cu").write_text(source)
        out = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(tmp_path / "root.cu"), "-o", str(tmp_path / "root.o")],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
