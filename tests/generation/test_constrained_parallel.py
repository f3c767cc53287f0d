"""`par`, `vec` and `bind` under the constraint (issue 16): TVM parallelizes, vectorizes or binds a loop only if
every block iter whose binding uses the loop is data parallel, or, for a bind to threadIdx.x/y/z, a reduction iter
(``CheckLoopParallelizableInBlock``). The constraint knows which iters each live loop carries
(``ScheduleState.loop_iters``) and masks the lines TVM would refuse for that reason. On the H200 (session 8),
46 of 61 apply rejections of constrained attempts were a reduction loop bound to a block axis (`bind .. bx`).

Real parts only: the committed MetaSchedule databases (tests/codec/data, llvm conv2d and a CUDA tensor-core
record), the codec, TVM's verdicts on a fresh schedule, llguidance.
"""
from __future__ import annotations


import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, prefix_state, real_prefixes
from dragon_testkit import tvm_accepts as _tvm_accepts

FORMS = ("par {l}", "vec {l}", "bind {l} bx", "bind {l} vx", "bind {l} tx", 'bind {l} "threadIdx.y"')
AXIS = {"bx": "blockIdx.x", "vx": "vthread.x", "tx": "threadIdx.x", '"threadIdx.y"': "threadIdx.y"}


def _nested(st, k: int, form: str) -> bool:
    """A `bind` of loop ``k`` to an axis bound around it at another extent: the nested-axis rule's to forbid, which
    TVM accepts (tests/generation/test_constrained_bind.py)."""
    return form.startswith("bind") and AXIS[form.split()[-1]] in st.loop_nested_axes.get(k, ())


def _rebound(st, k: int, form: str) -> bool:
    """A `bind` of loop ``k``, which a thread axis binds already: the bound-loop rule's to forbid, which TVM accepts
    (tests/generation/test_constrained_bind.py)."""
    return form.startswith("bind") and k in st.loop_bound


def _outermost(st, k: int, form: str, cpu: bool) -> bool:
    """A `bind` of a data-parallel loop with no loop above it to a thread axis on a GPU: the outermost-loop rule's to
    forbid, which TVM's Bind accepts and `post *`'s RewriteUnboundBlock refuses
    (tests/generation/test_constrained_outermost_bind.py)."""
    return (form.startswith("bind") and not cpu and k in st.loop_top and st.loop_iters.get(k) == "S"
            and not AXIS[form.split()[-1]].startswith("blockIdx."))


@pytest.mark.parametrize("db,before", [("real_llvm_db", ("par", "vec", "ann")), ("real_cuda_db", ("bind", "vec"))])
def test_masked_par_vec_bind_lines_are_the_ones_tvm_refuses_for_their_iters(engine, smollm2, db, before, monkeypatch):
    """At real prefixes (right before a real record's `par`/`vec`/`bind` line): for every live loop and each form,
    a line the mask forbids is one TVM refuses (the constraint never forbids what TVM accepts), a loop that
    carries a reduction iter is forbidden `par`/`vec`/a block or vthread bind and allowed a threadIdx bind, and
    the rule forbids something at these prefixes (the test would pass vacuously without it).  A bind to an axis
    bound around the loop at another extent is the nested-axis rule's, a bind of a loop bound already the bound-loop
    rule's, a thread axis on a GPU kernel's outermost data-parallel loop the outermost-loop rule's, and on the CPU
    (llvm) a bind to a block or thread axis the target rule's (forbidden although TVM's Bind accepts them)."""

    from little_dragon.generation import constrained
    from little_dragon.generation.schedule_worker import cpu_target

    # a real `bind` line follows a `fuse`, where [bind the fused loop] offers the fused loop alone
    # (test_constrained_bind_fused.py): the iter-kind rule is read over every loop without it
    monkeypatch.setattr(constrained, "BIND_FUSED", False)
    forbidden = reductions = 0
    for name, mod, wl, head, _ in real_prefixes(DATA / db, before, limit=3):
        st = prefix_state(mod, head)
        assert set(st.loop_iters) == set(st.loops), name
        cpu = cpu_target(wl.target)
        assert cpu == (db == "real_llvm_db")
        for k, kind in sorted(st.loop_iters.items()):
            for form in FORMS:
                line = form.format(l=f"l{k}") + "\n"
                ok = allowed_by_mask(engine, wl, smollm2, head + line)
                if _nested(st, k, form) or _rebound(st, k, form) or _outermost(st, k, form, cpu):
                    assert not ok, (name, line)
                    continue
                if cpu and form.startswith("bind") and " vx" not in form:
                    assert not ok, (name, line)  # the target rule: no GPU thread on a CPU (test_constrained_target.py)
                    continue
                if not ok:
                    forbidden += 1
                    assert not _tvm_accepts(mod, head + line), (name, line, kind)
                if kind == "R":
                    expect = "threadIdx" in form or " tx" in form
                    assert ok == expect, (name, line)
                if kind == "S":
                    assert ok, (name, line)  # TVM's verdict decides at the line's end
            reductions += kind == "R"
    assert reductions and forbidden, (reductions, forbidden)


def test_a_reduction_loop_bound_to_a_block_axis_is_refused_by_tvm_and_masked(engine, smollm2, monkeypatch):
    """The H200's most frequent rejection: a loop carrying a reduction iter bound to blockIdx. TVM refuses it on
    the real CUDA record's workload; the mask forbids its thread token; the cross-thread form is allowed (without
    [bind the fused loop], which right after the record's `fuse` offers the fused loop alone)."""
    from little_dragon.generation import constrained

    monkeypatch.setattr(constrained, "BIND_FUSED", False)
    for name, mod, wl, head, _ in real_prefixes(DATA / "real_cuda_db", ("bind",), limit=1):
        st = prefix_state(mod, head)
        red = [k for k, kind in st.loop_iters.items() if kind == "R"]
        assert red, st.loop_iters
        line = f"bind l{red[0]} bx\n"
        assert not _tvm_accepts(mod, head + line)
        assert not allowed_by_mask(engine, wl, smollm2, head + line)
        assert allowed_by_mask(engine, wl, smollm2, head + f"bind l{red[0]} tx")
        return
    pytest.fail("no real CUDA record with a bind line")


def test_a_root_annotation_the_post_processing_would_loop_on_ends_the_attempt_at_its_line(engine, smollm2):
    """`ann b parallel "SSRSRS"` (what a constrained tiny model wrote in the SFT validity test) decodes and
    applies, and TVM's RewriteParallelVectorizeUnroll then loops forever on it (tvmx.postprocs): the constraint
    ends the attempt at that line, counted, and its checked lines are kept (lookups only: `post *` would make them
    the judge's no-op, so the end check does not finish them); an integer value goes on."""
    import json

    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.generation.constrained import ScriptConstraint, Workload

    wl = Workload(prim_module(matmul_tensors(64)), json.dumps({"kind": "llvm", "num-cores": 2}))
    head = "blk C\nblk root\n"
    for line, alive in (('ann b1 parallel "SSRSRS"', False), ("ann b1 vectorize -1", False),
                        ("ann b1 .unroll_explicit 1.5", False), ("ann b1 parallel 64", True),
                        ("ann b1 unroll cat unroll = 2", True)):
        c = ScriptConstraint(engine, wl)
        for t in smollm2(head + line + "\n", add_special_tokens=False)["input_ids"]:
            c.advance(t)
        assert c.dead != alive, (line, c.error)
        if not alive:
            assert c.error.startswith("annotation:") and "non-negative integer" in c.error, c.error
            assert c.stats.rejected_apply == 1
            assert c.script("") == head
