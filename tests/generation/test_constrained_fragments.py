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
    tensorized) the end check names the scalar block and its fragment; cut after 81 lines (the last input
    tensorized) and the whole record pass, as before 53 lines nothing touches a fragment."""
    from little_dragon.generation.schedule_worker import finish_check

    mod, _, ctx, lines = record
    for k in (53, 58, 64, 72, 80):
        why = finish_check(mod, ctx, _cut(lines, k))
        assert why.startswith("untensorized fragment: block ") and "wmma." in why, (k, why)
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
