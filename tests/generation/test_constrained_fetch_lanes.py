"""[fetch lanes] `ann <block> fetch` under the constraint (issue 16, session 38): only as MetaSchedule writes it, a sample
of the vector lanes its tiling rules offer (`ann b4 fetch cat lanes = 2`, `.. cat lanes8 = 3`).  TVM annotates a block
with any fetch value, and at `post *` its RewriteCooperativeFetch divides by it: a fetch of 0 (`cat unroll_gpu = 0`, the
unroll list's first candidate) ends the process with SIGFPE.  Session 38's H100 A/B had one such attempt cut at the
token budget; finishing it crashed a TVM worker on each of 25 prefixes (71 s of the arm's 173).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM in the constraint's own
sandboxed worker, llguidance, SmolLM2's tokenizer.
"""
from __future__ import annotations

import re

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, model_script_lines, real_records, tvm_accepts


def _real_fetch():
    """(module, ``Workload``, the lines before its first `ann b<k> fetch cat ..` line, that line, the lines after it
    without `post *`, k) of the committed CUDA database's first record with a cooperative fetch; lines end in newlines."""
    from little_dragon.generation.constrained import Workload

    for _, mod, target, tj in real_records(DATA / "real_cuda_db"):
        lines = [x + "\n" for x in model_script_lines(tj)]
        for i, line in enumerate(lines):
            m = re.match(r"ann b(\d+) fetch cat (lanes8?) = \d$", line.strip())
            if m:
                rest = "".join(x for x in lines[i + 1:] if x.strip() != "post *")
                return mod, Workload(mod, target), "".join(lines[:i]), line, rest, int(m.group(1))
    pytest.skip("no cooperative fetch in the committed CUDA database")


def test_every_real_fetch_is_a_lanes_sample():
    """The committed CUDA records annotate their fetches with `cat lanes` or `cat lanes8` only: what the rule keeps."""
    from little_dragon.generation.grammar_line import FETCH_LANES

    fetches = [line for _, _, _, tj in real_records(DATA / "real_cuda_db") for line in model_script_lines(tj)
               if " fetch " in line]
    assert fetches
    assert all(re.fullmatch(rf"ann b\d+ fetch cat ({'|'.join(FETCH_LANES)}) = \d", line) for line in fetches), fetches


def test_a_fetch_of_zero_lanes_crashes_tvm_at_post_and_is_masked(engine, smollm2):
    """The real record with its first fetch's lanes replaced by `cat unroll_gpu = 0`: TVM applies the line, and its
    worker dies at the script's `post *` (the real record's post-processing passes); the mask refuses that line, and the fetch's
    other forms that are no lanes sample (a literal, another candidate list), while the real line stays allowed."""
    from little_dragon.generation.schedule_worker import TVMCrashed, worker

    mod, wl, head, fetch, rest, k = _real_fetch()
    zero = f"ann b{k} fetch cat unroll_gpu = 0\n"
    assert tvm_accepts(mod, head + zero)
    tvm = worker("test-fetch-lanes")
    try:
        real = tvm.finish_check(wl.key, wl.mod, wl.target, head + fetch + rest + "post *\n")
        assert not real.startswith(("apply", "decode")), real  # its post-processing passes (a verdict after it, if any)
        with pytest.raises(TVMCrashed):
            tvm.finish_check(wl.key, wl.mod, wl.target, head + zero + rest + "post *\n")
    finally:
        tvm.close()
    assert allowed_by_mask(engine, wl, smollm2, head + fetch)
    assert allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} fetch cat lanes8 = 3\n")
    for bad in (zero, f"ann b{k} fetch 0\n", f"ann b{k} fetch 2\n", f"ann b{k} fetch cat 0 2 = 0\n",
                f"ann b{k} fetch cat unroll_gpu = 1\n"):
        assert not allowed_by_mask(engine, wl, smollm2, head + bad), bad
    # the unroll keys keep their own list, 0 included (an unroll of 0 steps is MetaSchedule's first candidate)
    assert allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} unroll cat unroll_gpu = 0\n")


def test_finishing_stops_once_tvm_dies_on_the_lines(engine, smollm2):
    """[finish lost] An attempt cut after the zero fetch (the lines as TVM applied them, as before the rule): its search
    for a prefix the post-processors finish stops after ``FINISH_LOST_LIMIT`` checks that lost their TVM worker, instead
    of crashing one on every prefix within ``finish_back`` (session 38's H100 A/B: 25 crashes, 71 s); the attempt keeps
    its lines."""
    from little_dragon.generation import constrained

    mod, wl, head, _, rest, k = _real_fetch()
    assert rest.count("\n") >= constrained.FINISH_LOST_LIMIT + 1
    text = head + f"ann b{k} fetch cat unroll_gpu = 0\n" + rest
    stats = constrained.ConstraintStats()
    c = constrained.ScriptConstraint(engine, wl, stats)
    c.finish_back = 24
    assert constrained.ISOLATE_TVM
    assert c._finish_earlier(text) is None
    assert stats.tvm_lost == constrained.FINISH_LOST_LIMIT == stats.finish_checks
    assert stats.finish_s > 0
