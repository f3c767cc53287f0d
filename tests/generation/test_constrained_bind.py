"""`bind` under the constraint (issue 16): a loop is not bound to a thread axis already bound on a loop enclosing it
or nested in it. TVM's Bind accepts that, and the kernel it lowers to leaves outputs unwritten: 7 of session 11's 8
wrong results on the H200 sealed set (`bind l2 tx`, then a `threadIdx.x` loop computed under it). MetaSchedule never
writes it (the real-records tests accept every record token by token).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM's verdicts on a fresh
schedule, llguidance.
"""
from __future__ import annotations

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, prefix_state, real_prefixes, tvm_accepts


def test_a_thread_axis_is_not_bound_on_nested_loops(engine, smollm2):
    """Right after real `bind` lines: for every live, unbound, data-parallel loop with an axis bound above or below
    it, `bind` of that loop to that axis (in each of the codec's three spellings) is forbidden, although TVM accepts
    it; the same loop bound to an axis free around it stays allowed."""
    from little_dragon.codec.kinds import THREAD_FULL

    forbidden = accepted_by_tvm = other_allowed = 0
    for _, mod, wl, head, line in real_prefixes(DATA / "real_cuda_db", ("bind",), limit=4):
        head += line + "\n"
        st = prefix_state(mod, head)
        for k, axes in sorted(st.loop_nested_axes.items()):
            if k in st.loop_pinned or st.loop_iters.get(k, "S") != "S":
                continue
            for axis in sorted(axes):
                for spelling in (THREAD_FULL[axis], axis, f'"{axis}"'):
                    assert not allowed_by_mask(engine, wl, smollm2, head + f"bind l{k} {spelling}\n"), (k, spelling)
                    forbidden += 1
                accepted_by_tvm += tvm_accepts(mod, head + f"bind l{k} {THREAD_FULL[axis]}\n")
            free = [a for a in THREAD_FULL if a not in axes]
            if free:
                assert allowed_by_mask(engine, wl, smollm2, head + f"bind l{k} {THREAD_FULL[free[0]]}\n"), (k, free[0])
                other_allowed += 1
    assert forbidden and other_allowed, (forbidden, other_allowed)
    assert accepted_by_tvm, "TVM's Bind accepts a nested axis: the rule is the constraint's, not a TVM refusal"


def test_a_bound_loop_is_not_bound_again(engine, smollm2):
    """Right after real `bind` lines: the loop just bound is not bound again, to its axis or another (TVM accepts
    both; session 22's H200 sealed run had an attempt write `bind l0 by` 150 times until its budget ended), while a
    live unbound data-parallel loop of the same prefix may still be bound."""
    import re

    from little_dragon.codec.kinds import THREAD_FULL

    again = accepted_by_tvm = unbound_allowed = 0
    for _, mod, wl, head, line in real_prefixes(DATA / "real_cuda_db", ("bind",), limit=4):
        head += line + "\n"
        st = prefix_state(mod, head)
        k = int(re.match(r"bind l(\d+) ", line).group(1))
        assert k in st.loop_bound, (line, st.loop_bound)
        for axis in THREAD_FULL.values():
            assert not allowed_by_mask(engine, wl, smollm2, head + f"bind l{k} {axis}\n"), (line, axis)
            again += 1
        accepted_by_tvm += tvm_accepts(mod, head + line + "\n")
        free = [j for j in sorted(st.loops) if j not in st.loop_bound and j not in st.loop_nested_axes
                and st.loop_iters.get(j, "S") == "S"]
        if free:
            assert allowed_by_mask(engine, wl, smollm2, head + f"bind l{free[0]} {THREAD_FULL['threadIdx.x']}\n"), free
            unbound_allowed += 1
    assert again and unbound_allowed, (again, unbound_allowed)
    assert accepted_by_tvm, "TVM's Bind binds a bound loop again: the rule is the constraint's, not a TVM refusal"
