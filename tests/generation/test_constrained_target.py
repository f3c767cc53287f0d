"""The target's rules under the constraint (issue 16): the storage scopes and thread axes a kernel of the target may
use (``grammar_line._target_rules``, ``ScheduleState.cpu``), and an explicit post-processing section, which must be
what the target's post-processors write (``ScriptConstraint._post_line``).

Session 18's CPU sealed run (line and end retries, 336 attempts) lost 27 attempts to a GPU thread bound in an llvm
kernel (TVM's Bind takes it; the llvm build refuses it), 25 to explicit post sections that differ from the
post-processors' (the judge's verify error), and retries to scopes and thread tags TVM does not know (`cread b5 1
grocast`, `bind l19 l7`).  Real parts only: the committed MetaSchedule databases, the codec, TVM's verdicts, the
judge's own replay (``evaluator.replay.replay``) and build (``tvmx.build.fast_build``), llguidance.
"""
from __future__ import annotations

import json

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import (LLVM, allowed_by_mask, feed_constraint, prefix_state, real_prefixes, real_records,
                            tvm_accepts)

H200 = json.dumps({"kind": "cuda", "arch": "sm_90", "max_shared_memory_per_block": 49152,
                   "max_threads_per_block": 1024, "thread_warp_size": 32})


def _judge(mod, target, text: str) -> str:
    """The judge's verdict on ``text`` short of timing: its replay (apply, post-process, the written section checked)
    and its build; "correct" when both pass, else the category and message."""
    from little_dragon import codec
    from little_dragon.evaluator.replay import ReplayFailure, replay
    from little_dragon.tvmx.build import fast_build
    from little_dragon.tvmx.postprocs import target_postprocs

    import tvm

    ctx = codec.PostprocContext(mod, target)
    try:
        trace = codec.decode(text, ctx)
        done = replay(mod, trace, target_postprocs(mod, target))
    except ReplayFailure as e:
        return f"{e.category}: {e}"
    try:
        fast_build(done.sch.mod, tvm.target.Target(json.loads(target)))
    except Exception as e:  # noqa: BLE001 - the build's verdict
        return f"build_error: {str(e).strip().splitlines()[-1][:200]}"
    return "correct"


def test_a_cpu_kernel_binds_no_gpu_thread(engine, smollm2):
    """On a real llvm prefix, `bind l<k> bx` of a data-parallel loop is a line TVM's Bind applies and a kernel the llvm
    build refuses: masked on the CPU, allowed on the H200; a virtual-thread bind (it lowers anywhere) stays allowed."""
    from little_dragon.generation.constrained import Workload

    name, mod, _, head, _ = next(real_prefixes(DATA / "real_llvm_db", ("ann b2 parallel",), limit=1))
    wl = Workload(mod, json.dumps(LLVM))
    st = prefix_state(mod, head)
    k = next(k for k, kind in sorted(st.loop_iters.items()) if kind == "S")
    line = f"bind l{k} bx\n"
    assert tvm_accepts(mod, head + line), name
    assert _judge(mod, wl.target, head + line + "post *\n").startswith("build_error"), name
    assert not allowed_by_mask(engine, wl, smollm2, head + line)
    assert not allowed_by_mask(engine, wl, smollm2, head + f'bind l{k} "threadIdx.x"\n')
    assert allowed_by_mask(engine, wl, smollm2, head + f"bind l{k} vx\n")
    assert allowed_by_mask(engine, Workload(mod, H200), smollm2, head + line)


def test_a_scope_is_one_the_target_has(engine, smollm2):
    """`cread`/`cwrite`/`scope` name a storage scope: one TVM knows (an unknown one, `grocast`, TVM refuses when it
    applies the line: masked everywhere), and on a CPU one of `global`/`local` (no shared or warp memory there:
    MetaSchedule's llvm records cache in `global`); the GPU's scopes on the H200.  Both spellings (bare, quoted)."""
    from little_dragon.generation.constrained import Workload

    name, mod, _, head, real = next(real_prefixes(DATA / "real_llvm_db", ("cwrite",), limit=1))
    assert real.endswith(" global"), real
    cpu, gpu = Workload(mod, json.dumps(LLVM)), Workload(mod, H200)
    stem = real.rsplit(" ", 1)[0]
    assert not tvm_accepts(mod, head + stem + " grocast\n")
    for wl in (cpu, gpu):
        assert not allowed_by_mask(engine, wl, smollm2, head + stem + " grocast\n")
        assert not allowed_by_mask(engine, wl, smollm2, head + stem + " l43\n")
        for scope in ("global", '"global"', "local"):
            assert allowed_by_mask(engine, wl, smollm2, head + f"{stem} {scope}\n"), (wl.target, scope)
    for scope in ("shared", '"shared.dyn"', "wmma.accumulator", "warp"):
        assert not allowed_by_mask(engine, cpu, smollm2, head + f"{stem} {scope}\n"), scope
        assert allowed_by_mask(engine, gpu, smollm2, head + f"{stem} {scope}\n"), scope


def _self_contained(db: str):
    """(name, module, llvm Workload, the real record's script with its post-processing section written out, the
    index of its `post` line among its lines)."""
    from little_dragon import codec
    from little_dragon.generation.constrained import Workload

    name, mod, _, trace_json = next(iter(real_records(DATA / db)))
    lines = codec.encode(trace_json).splitlines()
    return name, mod, Workload(mod, json.dumps(LLVM)), lines, lines.index("post")


def test_an_explicit_post_section_is_the_post_processors_own(engine, smollm2):
    """A real llvm record written self-contained: its section (the post-processors' own) is accepted token by token
    and then only the end may follow.  The same section with one instruction changed, one left out at its end, or a
    line more, is what the judge refuses (verify error); under the constraint the first ends the attempt as the lines
    before `post` and `post *` (the kernel the section would have given: correct), the end is masked before the
    section is whole, and only the end is allowed after it.  (The judge also accepts a section of other instructions
    that leave the very same module, two `unann` swapped, say; the constraint does not: `post *` writes that kernel,
    and no real record is such a section.)"""
    name, mod, wl, lines, at = _self_contained("real_llvm_db")
    whole = "\n".join(lines) + "\n"
    assert _judge(mod, wl.target, whole) == "correct", name
    why, c = feed_constraint(engine, wl, smollm2, whole)
    assert why is None and c.post_left == 0 and c.eos_only(), (why, c.post_left)

    i = next(j for j in range(at, len(lines)) if "max_step 16" in lines[j])
    changed = lines[:i] + [lines[i].replace("max_step 16", "max_step 8")] + lines[i + 1:]
    text = "\n".join(changed) + "\n"
    assert _judge(mod, wl.target, text).startswith("verify_error"), name
    why, c = feed_constraint(engine, wl, smollm2, text)
    derived = "\n".join(lines[:at]) + "\npost *\n"
    assert why is not None and not c.dead and c.post_derived and c.finished and c.may_end(), (why, c.error)
    assert c.script(text) == derived and c.stats.post_derived == 1
    assert any(r.startswith("post section: instruction N is") for r in c.stats.reasons), c.stats.reasons
    assert _judge(mod, wl.target, derived) == "correct", name

    short = "\n".join(lines[:-1]) + "\n"
    assert _judge(mod, wl.target, short).startswith("verify_error"), name
    why, c = feed_constraint(engine, wl, smollm2, short)
    assert why is None and c.post_left == 1 and not c.may_end()  # every line allowed, the end not yet
    assert c.script(short) == derived  # cut here (the token budget), the attempt is those lines and `post *`

    more = whole + "blk root\n"
    assert _judge(mod, wl.target, more).startswith("verify_error"), name
    assert not allowed_by_mask(engine, wl, smollm2, more)


def test_a_post_line_opens_the_section_only_where_post_would_be(engine, smollm2):
    """The `post` line opens the section only where `post *` would pass the end check: after lookups only (the
    judge's no-op) it is masked like `post *`; after the real record's lines it opens the section the post-processors
    write (its instructions, the record's own count).  A prefix whose kernel the end check refuses ends the attempt at
    its `post` line (the committed failed CUDA record: test_constrained.py's real records test)."""
    name, mod, wl, lines, at = _self_contained("real_llvm_db")
    assert not allowed_by_mask(engine, wl, smollm2, "blk root\npost\n")
    assert not allowed_by_mask(engine, wl, smollm2, "blk root\npost *\n")
    why, c = feed_constraint(engine, wl, smollm2, "\n".join(lines[:at]) + "\npost\n")
    assert why is None and not c.dead, (why, c.error)
    assert len(c._post) == len(lines) - at and c.post_left == len(lines) - at - 1, name


@pytest.mark.parametrize("retries", [0, 4])
def test_a_wrong_post_line_spends_no_retry(engine, smollm2, retries):
    """A post-section line that is not the post-processors' next one (or `post *` inside the section) ends the attempt
    as the lines before `post` and `post *`, with or without line retries left: drawing the line again could at best
    give that same kernel."""
    name, mod, wl, lines, at = _self_contained("real_llvm_db")
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask

    for wrong in (lines[at + 3], "post *"):
        c = ScriptConstraint(engine, wl)
        c.line_retries = retries
        bits = allocate_bitmask(1, engine.vocab_size)
        head = "\n".join(lines[:at + 2]) + "\n"
        for t in smollm2(head + wrong + "\n", add_special_tokens=False)["input_ids"]:
            c.fill_mask(bits, 0)
            assert (int(bits[0, t // 32]) >> (t % 32)) & 1, wrong
            c.advance(t)
        assert not c.dead and c.post_derived and c.retried == 0 and c.take_back == 0, (wrong, c.error)
        assert c.script(head + wrong + "\n") == "\n".join(lines[:at]) + "\npost *\n"
        c.fill_mask(bits, 0)
        assert (int(bits[0, smollm2.eos_token_id // 32]) >> (smollm2.eos_token_id % 32)) & 1


_CRASH = """
import sys
sys.path.insert(0, {tests!r})
from dragon_testkit import matmul_tensors, prim_module, two_block_tensors
from little_dragon import codec
from little_dragon.generation.constrain_state import replay
mod = prim_module({tensors})
replay(mod, codec.decode({text!r}, codec.SyntaxOnlyContext()))
"""


def _exit_code(text: str, tensors: str = "two_block_tensors()") -> int:
    """The exit code of a fresh Python process that applies ``text`` to ``tensors``' kernel (TVM's segfault: -11)."""
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", _CRASH.format(tests=tests, text=text, tensors=tensors)],
                         capture_output=True, timeout=300)
    return run.returncode


def test_a_consumer_list_names_the_block_itself(engine, smollm2):
    """`cread b1 0 global c=[b0]` (C reads what B writes; the list names B) is a line TVM's CacheRead segfaults on, in a
    process of its own here: masked.  `c=[b1]` (MetaSchedule's form: the block itself) is allowed and applies; `cwrite`
    names no consumer (MetaSchedule's never does)."""
    from dragon_testkit import prim_module, two_block_tensors

    from little_dragon.generation.constrained import Workload

    mod = prim_module(two_block_tensors())
    wl = Workload(mod, json.dumps(LLVM))
    head = "blk B\nblk C\n"
    assert _exit_code(head + "cread b1 0 global c=[b0]\n") == -11
    assert not allowed_by_mask(engine, wl, smollm2, head + "cread b1 0 global c=[b0]\n")
    assert tvm_accepts(mod, head + "cread b1 0 global c=[b1]\n")
    assert allowed_by_mask(engine, wl, smollm2, head + "cread b1 0 global c=[b1]\n")
    assert allowed_by_mask(engine, wl, smollm2, head + "cread b1 0 global\n")
    assert not allowed_by_mask(engine, wl, smollm2, head + "cwrite b1 0 global c=[b1]\n")
    assert allowed_by_mask(engine, wl, smollm2, head + "cwrite b1 0 global\n")


def test_a_consumer_list_names_no_block_for_a_buffer_it_writes(engine, smollm2):
    """After `blockize` of a matmul's reduction loop the inner block reads the output it accumulates into (its init went
    to the outer block): `cread b0 0 global c=[b0]` of that buffer is a line TVM's CacheRead segfaults on (the block is
    the buffer's only writer in its scope and its consumer; session 37's CPU A/B wrote it after `blockize l8`, each crash
    a TVM worker restarted): masked.  Without the list it applies and is allowed; the block's other reads keep theirs."""
    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.generation.constrained import Workload

    mod = prim_module(matmul_tensors(64))
    wl = Workload(mod, json.dumps(LLVM))
    head = "blk C\nloops b0 3\nblockize l2\n"
    assert prefix_state(mod, head).reads_written == {0: frozenset({0})}  # C reads C (read 0), A and B
    assert _exit_code(head + "cread b0 0 global c=[b0]\n", "matmul_tensors(64)") == -11
    assert not allowed_by_mask(engine, wl, smollm2, head + "cread b0 0 global c=[b0]\n")
    assert allowed_by_mask(engine, wl, smollm2, head + "cread b0 0 global c=[]\n")
    for line in ("cread b0 0 global\n", "cread b0 1 global c=[b0]\n"):
        assert tvm_accepts(mod, head + line), line
        assert allowed_by_mask(engine, wl, smollm2, head + line), line


def test_compute_at_flags_are_booleans(engine, smollm2):
    """`at b l pul= _` and `rat b l pul= _` decode, and TVM's ComputeAt / ReverseComputeAt then segfault on the None
    flag (session 37's CPU A/B: `at b0 l8 pul= _`, a TVM worker restarted): only 0/1 (or true/false) follow `pul=`."""
    from dragon_testkit import prim_module, two_block_tensors

    from little_dragon import codec
    from little_dragon.generation.constrained import Workload

    mod = prim_module(two_block_tensors())
    wl = Workload(mod, json.dumps(LLVM))
    for head, line in (("blk B\nblk C\nloops b1 2\n", "at b0 l1 pul= _"), ("blk B\nblk C\nloops b0 2\n", "rat b1 l1 pul=_")):
        codec.decode(head + line + "\n", codec.SyntaxOnlyContext())  # the codec reads it
        assert _exit_code(head + line + "\n") == -11, line
        assert feed_constraint(engine, wl, smollm2, head + line + "\n")[0] is not None, line
        for flag in ("0", "1"):
            ok = head + line.replace("_", flag) + "\n"
            assert tvm_accepts(mod, ok), ok
            why, c = feed_constraint(engine, wl, smollm2, ok)
            assert why is None and not c.dead, (ok, why, c.error)
