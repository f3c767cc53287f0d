"""tvmx.schedule: TVM 0.27 writes into the module it schedules (after the root block is replaced); a schedule of a
private copy leaves the module as it was. Real TVM objects only."""
from __future__ import annotations

from dragon_testkit import prim_module, two_block_tensors


def _two_blocks():
    return prim_module(two_block_tensors())


def _annotate_root_then_split(sch) -> None:
    sch.annotate(sch.get_sblock("root"), "meta_schedule.random_compute_producer", 1)
    sch.split(sch.get_loops(sch.get_sblock("B"))[1], [8, 32])


def test_tvm_writes_into_the_module_it_schedules():
    """The case the helpers exist for (if a TVM upgrade stops doing this, this test says so: the helpers may stay)."""
    from tvm.s_tir import Schedule

    from little_dragon.tvmx.schedule import fingerprint

    mod = _two_blocks()
    before = fingerprint(mod)
    _annotate_root_then_split(Schedule(mod, debug_mask=0))
    assert fingerprint(mod) != before
    # and through a copy of a schedule into the schedule it was copied from
    parent = Schedule(_two_blocks(), debug_mask=0)
    kept = fingerprint(parent.mod)
    _annotate_root_then_split(parent.copy())
    assert fingerprint(parent.mod) != kept


def test_a_fresh_schedule_leaves_the_module_as_it_was():
    import tvm_ffi

    from little_dragon.tvmx.schedule import fingerprint, fresh_schedule, private_copy

    mod = _two_blocks()
    before = fingerprint(mod)
    assert tvm_ffi.structural_equal(private_copy(mod), mod)
    sch = fresh_schedule(mod, debug_mask=0)
    _annotate_root_then_split(sch)
    assert fingerprint(mod) == before
    assert len(sch.get_loops(sch.get_sblock("B"))) == 3   # the schedule itself did change
    again = fresh_schedule(mod, debug_mask=0)             # and the next one starts from the kernel as written
    assert len(again.get_loops(again.get_sblock("B"))) == 2


def test_own_json_reads_as_tvm_load_json_reads_it():
    """``load_own_json`` skips ``tvm.ir.load_json``'s upgrade of older versions' JSON: on JSON this TVM wrote the two
    must give the same module (a TVM upgrade whose upgrade step changes its own JSON would fail here)."""
    import tvm
    import tvm_ffi

    from little_dragon.tvmx.schedule import load_own_json, snapshot

    mod = _two_blocks()
    snap = snapshot(mod)
    own = load_own_json(snap)
    assert tvm_ffi.structural_equal(own, tvm.ir.load_json(snap))
    assert tvm_ffi.structural_hash(own) == tvm_ffi.structural_hash(mod)
    assert not own.same_as(mod)
