"""A GPU kernel's shared memory against the target's limit, checked at the line that completes its software pipeline
(issue 16, session 39; ``generation/shared_memory.py``).  MetaSchedule's GPU tiling caches both inputs in shared memory
at the reduction's outer loop and pipelines that loop in three stages, which triples the cached buffers; VerifyGPUCode
refuses a kernel over 48 KB at `post *`, and the attempt went back to its tiling after drawing every line in between
(session 39's H100 A/B: 46 of 100 retries).  With the rule on (``schedule_worker.SHARED_MEMORY_RULE``, off by default
since session 40: it cost more than it saved on the H100) the pipeline's `order` line is refused so, and the attempt
goes back to the tiling there.

Real parts only: the committed CUDA MetaSchedule databases (tests/codec/data), TVM (its schedule, its lowering and
VerifyGPUCode through the end check), the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import re

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import back_to_tiling, end_check, feed_constraint, model_script_lines, real_records, tvm_accepts
from dragon_testkit import lines_through as _through
from dragon_testkit import with_tiles as _with_tiles

# record 0 of real_cuda_simt_db (measured by MetaSchedule): a 64 x 3072 x 2048 matmul, A and B cached in shared memory
# at the reduction's outer loop (k split 1024 1 2: 2 a stage), 32 rows of A and 1,536 columns of B a thread block.
# With k split 512 1 4 the caches hold (32 + 1536) x 4 floats = 25,088 bytes: under 48 KB alone, 75,264 in the
# pipeline's three stages
OVER = {"l2": "512 1 4"}
STAGE, ORDER = "ann l33 stage [0 0 2]", "ann l33 order [0 1 2]"


@pytest.fixture(scope="module")
def record():
    from little_dragon.generation.constrained import Workload

    _, mod, target, tj = next(iter(real_records(DATA / "real_cuda_simt_db")))
    lines = model_script_lines(tj)
    assert STAGE in lines and ORDER in lines, lines
    return mod, target, Workload(mod, target), lines


@pytest.fixture
def rule_on(monkeypatch):
    """The rule on for one test; the prefixes' cached facts (verdicts under the rule) forgotten before and after."""
    from little_dragon.generation import constrained, schedule_worker

    constrained.clear_caches()
    monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", True)
    yield
    constrained.clear_caches()


def _facts(mod, wl, text: str):
    from little_dragon import codec
    from little_dragon.generation.schedule_worker import prefix_facts

    return prefix_facts(mod, text, codec.decode(text, codec.SyntaxOnlyContext()), wl.key)


def test_shared_memory_over_the_limit_is_refused_at_the_pipeline_order(record, rule_on):
    """The record passes its pipeline lines; with 4 of k a stage the `order` line is refused with the bytes -- not the
    `stage` line before it (TVM lowers no pipeline without its order: no verdict there) -- although TVM applies it, and
    the end check refuses the finished script for VerifyGPUCode: the same verdict, known earlier.  Without the pipeline
    lines the same tiling finishes: the three stages are what is over."""
    from little_dragon.generation.shared_memory import SHARED_MEMORY

    mod, target, wl, lines = record
    assert _facts(mod, wl, _through(lines, ORDER)) is not None
    over = _with_tiles(lines, OVER)
    assert _facts(mod, wl, _through(over, STAGE)) is not None
    with pytest.raises(RuntimeError, match=re.escape(SHARED_MEMORY) + r" kernel main uses 75264 bytes .* 49152"):
        _facts(mod, wl, _through(over, ORDER))
    assert tvm_accepts(mod, _through(over, ORDER))
    assert "VerifyGPUCode" in end_check(mod, "".join(x + "\n" for x in over), target)
    assert not end_check(mod, "".join(x + "\n" for x in lines), target)
    unpiped = [ln for ln in over if not ln.startswith("ann l33 ")]
    assert not end_check(mod, "".join(x + "\n" for x in unpiped), target)


def test_no_harvested_record_is_refused_at_its_pipeline(record, rule_on):
    """Every record of the committed CUDA databases through each of its pipeline lines: none refused (the H200
    harvest, token by token: results/constrained-decoding.md, session 39)."""
    from little_dragon.generation.constrained import Workload
    from little_dragon.generation.shared_memory import gives_pipeline

    n = 0
    for db in ("real_cuda_db", "real_cuda_valid_db", "real_cuda_simt_db"):
        for _, mod, target, tj in real_records(DATA / db):
            lines = model_script_lines(tj)
            wl = Workload(mod, target)
            for ln in lines:
                if gives_pipeline(ln):
                    _facts(mod, wl, _through(lines, ln))
                    n += 1
    assert n >= 2, n  # the simt record's `stage` and `order` lines (the others are tensor-core or unpipelined)


def test_the_attempt_goes_back_to_its_tiling(engine, smollm2, record, rule_on):
    """Under the constraint, token by token: the over-limit attempt is taken back at its `order` line to the first
    `tile` line of its tiling (the tokens since then dropped, one retry counted with its reason), where a fresh
    constraint would stand; without retries it ends there.  The record itself goes through."""
    mod, target, wl, lines = record
    over = _with_tiles(lines, OVER)
    head = _through(over, ORDER)
    refused, c = feed_constraint(engine, wl, smollm2, head)
    assert refused is None and c.dead and "shared memory" in c.error, (refused, c.error)
    refused, ok = feed_constraint(engine, wl, smollm2, _through(lines, ORDER))
    assert refused is None and not ok.dead, (refused, ok.error)

    back_to_tiling(engine, wl, smollm2, over, ORDER, "shared: shared memory:")


def test_the_switch_goes_with_each_request_to_the_worker(record, monkeypatch):
    """``schedule_worker.SHARED_MEMORY_RULE`` (the bench's +noshared) in the sandboxed TVM worker: the same over-limit
    `order` line is refused with the rule and applied without it by one worker started with the rule on (each request
    carries its caller's switch), one request at a time and batched; a constraint process's knobs carry it too."""
    from little_dragon import codec
    from little_dragon.generation import constraint_process, schedule_worker
    from little_dragon.generation.shared_memory import SHARED_MEMORY

    mod, target, wl, lines = record
    text = _through(_with_tiles(lines, OVER), ORDER)
    tj = codec.decode(text, codec.SyntaxOnlyContext())
    worker = schedule_worker.ScheduleWorker()
    monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", True)
    try:
        with pytest.raises(RuntimeError, match=re.escape(SHARED_MEMORY)):
            worker.state(wl.key, mod, text, tj)
        monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", False)
        assert worker.state(wl.key, mod, text, tj) is not None
        assert not isinstance(worker.states([(wl.key, mod, text, tj)])[0], BaseException)
        monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", True)
        [refused] = worker.states([(wl.key, mod, text, tj)])
        assert isinstance(refused, RuntimeError) and SHARED_MEMORY in str(refused), refused
    finally:
        worker.close()
    monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", False)
    knobs = constraint_process._knobs()
    assert knobs["schedule_worker.SHARED_MEMORY_RULE"] is False
    monkeypatch.setattr(schedule_worker, "SHARED_MEMORY_RULE", True)
    constraint_process._apply_knobs(knobs)  # as the child applies its parent's
    assert schedule_worker.SHARED_MEMORY_RULE is False


def test_off_by_default_the_end_check_still_refuses(engine, smollm2, record):
    """By default (session 40) the over-limit `order` line is applied, as TVM applies it, and the finished script is
    refused at `post *` by VerifyGPUCode: the same verdict, three lines later.  Under the constraint the attempt goes
    back to its tiling from `post *`, and the retry's example keeps the whole script (an end check's refusal is the
    whole kernel's: ``constrained.FULL_CONTEXT_REASONS``), the lines before the tiling, then those taken back."""
    from little_dragon.generation import schedule_worker

    assert schedule_worker.SHARED_MEMORY_RULE is False
    mod, target, wl, lines = record
    over = _with_tiles(lines, OVER)
    assert _facts(mod, wl, _through(over, ORDER)) is not None
    assert "VerifyGPUCode" in end_check(mod, "".join(x + "\n" for x in over), target)

    c, _, first_tile = back_to_tiling(engine, wl, smollm2, over, "post *", "post:")
    [(reason, [example])] = [(r, e) for r, e in c.stats.retry_examples.items() if r.startswith("post:")]
    assert "VerifyGPUCode" in reason, reason
    assert example.startswith("\n".join([*over[:first_tile], "~~~ taken back:", *over[first_tile:-1]])), example


def _go_on(c, engine, tok, text: str):
    """Feed ``text`` on to the constraint ``c`` token by token, each checked against its mask (the engine first drops
    the tokens ``c`` took back, as ``shared_prefix`` does): None when every token was allowed, else the index refused."""
    from little_dragon.generation.constrained import allocate_bitmask

    c.take_back = 0
    bits = allocate_bitmask(1, engine.vocab_size)
    for i, t in enumerate(tok(text, add_special_tokens=False)["input_ids"]):
        c.fill_mask(bits, 0)
        if not (int(bits[0, t // 32]) >> (t % 32)) & 1:
            return i
        c.advance(t)
    return None


def test_drop_pipeline_takes_back_the_pipeline_and_keeps_the_tiling(engine, smollm2, record, rule_on, monkeypatch):
    """[drop pipeline] (``constrained.DROP_PIPELINE``, off by default; with [shared memory] on): token by token, the
    over-limit attempt is taken back at its `order` line to its `stage` line only -- one retry, the tiling and the
    caches kept, two lines' tokens dropped instead of ~30 -- and from there that loop takes no pipeline key again in any
    spelling (TVM would apply one: the rule is the attempt's own), while another loop still may; the record's lines
    after its pipeline then go through token by token to `post *`, and that script passes the end check."""
    from little_dragon.generation import constrained
    from little_dragon.generation.grammar_line import key_forms

    mod, target, wl, lines = record
    over = _with_tiles(lines, OVER)
    at = over.index(STAGE)
    kept = "".join(x + "\n" for x in over[:at])
    assert constrained.DROP_PIPELINE is False
    monkeypatch.setattr(constrained, "DROP_PIPELINE", True)

    def dropped():
        ids = smollm2(_through(over, ORDER), add_special_tokens=False)["input_ids"]
        refused, c = feed_constraint(engine, wl, smollm2, _through(over, ORDER), retries=2)
        assert refused is None and not c.dead, (refused, c.error)
        assert c.retried == 1 and c.stats.pipelines_dropped == 1 and c.text == kept, (c.retried, c.text[-200:])
        assert c.take_back == len(ids) - c.n_tokens == len(smollm2(STAGE + "\n" + ORDER + "\n",
                                                                  add_special_tokens=False)["input_ids"])
        assert [r for r in c.stats.retry_reasons if r.startswith("shared: shared memory:")], c.stats.retry_reasons
        assert c.unpipelined == {33} and c.state.loop_unpipelined == frozenset({33}) and c.at_line_start()
        return c

    for key in ("software_pipeline_stage", "software_pipeline_order", "software_pipeline_async_stages"):
        for form in key_forms(key):
            line = f"ann l33 {form} [0 0 2]\n"
            assert _go_on(dropped(), engine, smollm2, line) is not None, line
            assert tvm_accepts(mod, kept + line), line
    other = max(set(dropped().state.loops) - {33} - dropped().state.loop_unsequenced)  # [pipeline body]: a sequence
    assert _go_on(dropped(), engine, smollm2, f"ann l{other} stage [0 0 2]\n") is None
    rest = [ln for ln in over[at:] if not ln.startswith("ann l33 ")]
    assert rest[-1] == "post *", rest
    c = dropped()
    assert _go_on(c, engine, smollm2, "".join(x + "\n" for x in rest)) is None, c.error
    assert not c.dead and c.finished and c.retried == 1, (c.dead, c.error)
    assert not end_check(mod, kept + "".join(x + "\n" for x in rest), target)
    # off, the same attempt goes back to its tiling (``test_the_attempt_goes_back_to_its_tiling``)
    monkeypatch.setattr(constrained, "DROP_PIPELINE", False)
    assert feed_constraint(engine, wl, smollm2, _through(over, ORDER), retries=2)[1].text != kept
