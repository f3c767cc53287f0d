"""The constraint's TVM work runs in a sandboxed worker process (``generation.schedule_worker``): a TVM primitive
that crashes on a line ends that attempt, not the run; a hung one is killed and named; the worker's facts and
refusals are those of the same work done in this process.

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM (its real segfault:
Fuse on ``preserve_unit_iters=None``, which the line grammar masks and the test writes past the mask), llguidance,
pebble worker processes.
"""
from __future__ import annotations

import dataclasses

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import feed_constraint, model_script_lines, prefix_state, real_prefixes, real_records


def _fusable_pair(mod, head: str) -> tuple[int, int]:
    st = prefix_state(mod, head)
    for a, kids in sorted(st.loop_child.items()):
        if kids and not {a, kids[0]} & st.loop_pinned:
            return a, kids[0]
    raise AssertionError("a real CUDA prefix before a `fuse` has an unpinned loop and its only child")


def test_a_tvm_crash_ends_the_attempt_not_the_run(engine, smollm2):
    """At a real CUDA prefix, the line `fuse lA lB pui=_` (A's only child B) segfaults TVM's Fuse.  Written past the
    mask into a live attempt, it kills only the worker: the attempt is dead with an apply error naming the line and
    the workload, and the next attempt, on the same workload, is checked to its end by a new worker."""
    from little_dragon.generation import constrained
    from little_dragon.generation.schedule_worker import worker

    assert constrained.ISOLATE_TVM
    _, mod, wl, head, line = next(real_prefixes(DATA / "real_cuda_db", ("fuse",), limit=1))
    a, b = _fusable_pair(mod, head)
    refused, c = feed_constraint(engine, wl, smollm2, head)
    assert refused is None and not c.dead, refused
    crashes = worker().crashed
    c._line_done(f"fuse l{a} l{b} pui=_")  # what a sampler outside the mask (or a grammar gap) would write
    assert c.dead and c.error.startswith("apply: TVM ended the constraint's worker"), c.error
    assert f"`fuse l{a} l{b} pui=_`" in c.error and f"{wl.key[0]:#x}" in c.error and "cuda" in c.error, c.error
    assert worker().crashed == crashes + 1
    assert c.stats.rejected_apply == 1
    refused, c2 = feed_constraint(engine, wl, smollm2, head + line + "\n")
    assert refused is None and not c2.dead and c2.text == head + line + "\n", (refused, c2.error)


def test_a_hung_apply_is_killed_and_named():
    """A request that outlives the worker's time limit (here: a fresh worker's first request, which loads TVM and
    the kernel, against a limit of 50 ms) is killed and raises ``TVMTimedOut`` naming the line and workload; the
    same worker then answers the request with a normal limit, from a new process."""
    from little_dragon.generation.constrained import _decode
    from little_dragon.generation.schedule_worker import ScheduleWorker, TVMTimedOut

    _, mod, wl, head, _ = next(real_prefixes(DATA / "real_cuda_db", ("fuse",), limit=1))
    w = ScheduleWorker(timeout_s=0.05)
    try:
        with pytest.raises(TVMTimedOut) as e:
            w.state(wl.key, mod, head, _decode(head))
        last = head.splitlines()[-1]
        assert f"`{last}`" in str(e.value) and f"{wl.key[0]:#x}" in str(e.value), str(e.value)
        assert w.timed_out == 1
        w.timeout_s = 120.0
        got = w.state(wl.key, mod, head, _decode(head))
        assert dataclasses.asdict(got) == dataclasses.asdict(prefix_state(mod, head))
    finally:
        w.close()


def test_the_worker_gives_the_facts_and_refusals_of_this_process():
    """On every prefix of two real CUDA records the worker's facts equal those computed in this process, and a
    line TVM refuses (a `fuse` of a loop with its parent, reversed) is refused with TVM's own message.  [line work]
    Every line asked, the refused one too, is counted and timed by its keyword (``APPLIED``)."""
    import collections

    from little_dragon.generation import constrained
    from little_dragon.generation.schedule_worker import APPLIED, worker

    before = collections.Counter(APPLIED)
    checked = 0
    for n, (_, mod, target, tj) in enumerate(real_records(DATA / "real_cuda_db")):
        if n == 2:
            break
        wl = constrained.Workload(mod, target)
        lines = [x for x in model_script_lines(tj) if x != "post *"]
        for i in range(len(lines) + 1):
            text = "".join(x + "\n" for x in lines[:i])
            got = worker().state(wl.key, mod, text, constrained._decode(text) if text else [[], []])
            # the same workload key here: its target decides the target's facts (``cpu``, ``half_bound``)
            assert dataclasses.asdict(got) == dataclasses.asdict(constrained._prefix_state(mod, text, wl.key)), i
            checked += 1
    assert checked > 40
    _, mod, wl, head, _ = next(real_prefixes(DATA / "real_cuda_db", ("fuse",), limit=1))
    a, b = _fusable_pair(mod, head)
    bad = head + f"fuse l{b} l{a}\n"
    with pytest.raises(Exception) as here:
        constrained._prefix_state(mod, bad)
    with pytest.raises(RuntimeError) as there:
        worker().state(wl.key, mod, bad, constrained._decode(bad))
    assert str(there.value) == str(here.value) != "", here.value
    work = collections.Counter(APPLIED) - before
    lines = {k[2:]: n for k, n in work.items() if k.startswith("n ")}
    assert sum(lines.values()) == checked + 1  # every prefix asked (the empty ones as keyword ""), the refused `fuse`
    assert lines.get("fuse", 0) + lines.get("fuse replayed", 0) > 0 and lines.get("tile", 0) > 0, lines
    assert all(work[f"ms {k}"] > 0 for k in lines), work


def test_a_steps_lines_in_one_request_give_the_same_answers(engine, smollm2):
    """``ScheduleWorker.states`` (the lines a decoding step ends, one round trip: ``constrained.prefetch_states``)
    answers each item as ``state`` does alone: the facts of real CUDA prefixes and TVM's refusal of a bad one.  A
    batch holding TVM's real segfault (Fuse on ``pui=_``) crashes the worker; every item is then asked alone, so the
    crash is that line's (``TVMCrashed`` naming it) and the other items still get their facts."""
    from little_dragon.generation.constrained import _decode
    from little_dragon.generation.schedule_worker import ScheduleWorker, TVMCrashed

    prefixes = list(real_prefixes(DATA / "real_cuda_db", ("fuse", "bind", "tile"), limit=4))
    _, mod, wl, head, _ = prefixes[0]
    a, b = _fusable_pair(mod, head)
    good = [(wl.key, mod, h, _decode(h)) for _, _, _, h, _ in prefixes]
    refused = head + f"fuse l{b} l{a}\n"  # inner then outer: TVM's Fuse refuses it
    crash = head + f"fuse l{a} l{b} pui=_\n"
    w = ScheduleWorker()
    try:
        alone = [w.state(*item) for item in good]
        with pytest.raises(RuntimeError) as why:
            w.state(wl.key, mod, refused, _decode(refused))
        w.clear()
        got = w.states(good + [(wl.key, mod, refused, _decode(refused))])
        assert [dataclasses.asdict(s) for s in got[:-1]] == [dataclasses.asdict(s) for s in alone]
        assert isinstance(got[-1], RuntimeError) and str(got[-1]) == str(why.value)
        crashes = w.crashed
        got = w.states(good[:2] + [(wl.key, mod, crash, _decode(crash))])
        assert w.crashed == crashes + 1
        assert [dataclasses.asdict(s) for s in got[:2]] == [dataclasses.asdict(s) for s in alone[:2]]
        assert isinstance(got[2], TVMCrashed) and f"`fuse l{a} l{b} pui=_`" in str(got[2]), got[2]
    finally:
        w.close()


def test_a_request_queued_behind_a_crash_gets_its_kernels_sent_again(engine, smollm2):
    """Requests started without waiting (``submit_states``: a step's lines beside the forward pass) queue in the
    worker.  When one crashes it, the next runs on a new worker that lacks the kernels the first one was sent; it
    answers ``need_module`` and is asked once more with them, so its answers are still ``state``'s."""
    from little_dragon.generation.constrained import _decode
    from little_dragon.generation.schedule_worker import ScheduleWorker, TVMCrashed

    prefixes = list(real_prefixes(DATA / "real_cuda_db", ("fuse", "bind", "tile"), limit=3))
    _, mod, wl, head, _ = prefixes[0]
    a, b = _fusable_pair(mod, head)
    good = [(wl.key, mod, h, _decode(h)) for _, _, _, h, _ in prefixes]
    crash = head + f"fuse l{a} l{b} pui=_\n"
    w = ScheduleWorker()
    try:
        alone = [w.state(*item) for item in good]  # the worker now holds the kernel: later requests go without it
        first = w.submit_states([(wl.key, mod, crash, _decode(crash))])
        second = w.submit_states(good)
        assert not second.sent  # sent without the kernel, queued behind the crash
        assert isinstance(first.result()[0], TVMCrashed)
        got = second.result()
        assert any(r[0] == "need_module" for r in second.task.outcome().value[1])  # the new worker lacked it
        assert [dataclasses.asdict(s) for s in got] == [dataclasses.asdict(s) for s in alone]
    finally:
        w.close()
