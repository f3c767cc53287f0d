"""No line without end (issue 16, session 23). Some lists the line grammar leaves unbounded (the loops of a `reorder`,
the indices of an index map) let a model write one line until the token budget: session 23's CPU A/B had an attempt
writing `l52 ` ~300 times, and its batch of 32 attempts ran 319 decoding steps where the others had ended within 90.
A line that grows past ``LINE_MAX_BYTES`` (twice the longest line of every real record) is refused as TVM refusing it
would be: drawn again from its start while the attempt has line retries, else the attempt ends at its checked lines.

Real parts only: a TE kernel made into TensorIR, the codec, TVM's schedule, llguidance, SmolLM2's tokenizer.
"""
from __future__ import annotations

from dragon_testkit import feed_constraint, prim_module

HEAD = "blk add\nloops b0 2\n"
RUNAWAY = "reorder" + " l1" * 90       # TVM refuses a repeated loop; the grammar allows it, at any length


def _bias_relu_workload():
    from tvm import te

    from little_dragon.generation.constrained import Workload

    a = te.placeholder((64, 64), "float32", name="A")
    b = te.placeholder((64,), "float32", name="B")
    t = te.compute((64, 64), lambda i, j: a[i, j] + b[j], name="add")
    mod = prim_module([a, b, te.compute((64, 64), lambda i, j: te.max(t[i, j], 0.0), name="relu")])
    return Workload(mod, '{"kind": "llvm", "num-cores": 2}')


def test_a_line_past_the_cap_ends_the_attempt_at_its_checked_lines(engine, smollm2):
    from little_dragon.generation.constrained import LINE_MAX_BYTES

    assert len(RUNAWAY) > LINE_MAX_BYTES
    wl = _bias_relu_workload()
    short = "reorder" + " l1" * ((LINE_MAX_BYTES - len("reorder")) // 3)
    refused, c = feed_constraint(engine, wl, smollm2, HEAD + short)   # up to the cap: the grammar's, untouched
    assert refused is None and not c.dead and len(c.line) <= LINE_MAX_BYTES
    refused, c = feed_constraint(engine, wl, smollm2, HEAD + RUNAWAY)
    assert refused is not None, "the tokens after the cut are EOS only"
    assert c.dead and c.error.startswith("runaway:"), c.error
    assert c.stats.runaway_lines == 1 and c.text == HEAD
    assert "reorder" not in c.script(HEAD + RUNAWAY)


def test_with_line_retries_the_line_is_drawn_again_from_its_start(engine, smollm2):
    from little_dragon.generation.constrained import LINE_MAX_BYTES, ScriptConstraint

    wl = _bias_relu_workload()
    c = ScriptConstraint(engine, wl)
    c.line_retries = 2
    head = smollm2(HEAD, add_special_tokens=False)["input_ids"]
    body = smollm2(RUNAWAY, add_special_tokens=False)["input_ids"]
    for t in head:
        c.advance(t)
    consumed = 0
    for t in body:
        c.advance(t)
        consumed += 1
        if c.take_back:
            break
    assert not c.dead and c.stats.runaway_lines == 1 and c.retried == 1
    assert c.taken_back() == consumed and c.text == HEAD and c.line == b"" and c.at_line_start()
    assert len(smollm2.decode(body[:consumed]).encode()) > LINE_MAX_BYTES
    for t in smollm2("reorder l1 l0\npost *\n", add_special_tokens=False)["input_ids"]:
        c.advance(t)
    assert not c.dead and c.finished, c.error


def test_no_real_line_is_near_the_cap():
    """Every line of the committed real records (CUDA and llvm) is under half the cap."""
    from dragon_testkit import CODEC_DATA, real_records

    from little_dragon.codec import encode
    from little_dragon.generation.constrained import LINE_MAX_BYTES

    longest, n = 0, 0
    for db in ("real_cuda_db", "real_cuda_valid_db", "real_llvm_db"):
        for _, _mod, _target, tj in real_records(CODEC_DATA / db):
            longest = max([longest] + [len(line.encode()) for line in encode(tj).splitlines()])
            n += 1
    assert n >= 5 and 0 < longest <= LINE_MAX_BYTES // 2, (n, longest)
