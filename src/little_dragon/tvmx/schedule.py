"""Schedules that leave the module they start from as it was.

TVM 0.27's ``s_tir.Schedule(mod)`` may write into the nodes of ``mod`` itself, and a ``Schedule.copy()`` into the
nodes of the schedule it was copied from: after an instruction that replaces the root block (``Annotate`` of the
root, as the model writes `ann <root> producer 1`), a later ``Split`` of a loop under a root that allocates buffers
changed the caller's module in place (found in session 16's CPU sealed runs: a script that annotated the root, split a
loop and then failed left the evaluator's cached workload with one loop more, and the next scripts of that workload
in that worker were judged against it: 10 of 1,008 attempts called apply errors on lines that apply;
``tests/tvmx/test_schedule.py`` has the case).  MetaSchedule's own records did not trigger it (none of the 37
committed llvm and CUDA records changed the module they were applied to).

So a module kept for reuse (the evaluator's per-worker workload cache, a prompt's workload in the constraint, the
schedule a failed script is bisected from) is never scheduled itself: ``fresh_schedule`` schedules a deep copy
(``private_copy``, a JSON round trip: 0.6-3 ms for a sealed workload), and ``fingerprint`` (a structural hash,
~0.03 ms) tells a kept module or schedule that was changed in place anyway."""
from __future__ import annotations

from typing import Any


def snapshot(mod: Any) -> str:
    """``mod`` as it is now, kept as JSON (~0.4-1.7 ms): ``schedule_from`` makes schedules of private copies of it
    later, only when they are needed."""
    import tvm

    return tvm.ir.save_json(mod)


def load_own_json(text: str) -> Any:
    """The object in ``text``, JSON that ``tvm.ir.save_json`` of this installed TVM wrote (``snapshot``, a module sent
    to a worker process): read without ``tvm.ir.load_json``'s upgrade of older TVM versions' JSON, which parses the
    whole text in Python and writes it again indented, ~85% of its time (a sealed workload: 0.2-1.3 ms against
    1.9-5.1 ms).  JSON from elsewhere (a database on disk) goes through ``tvm.ir.load_json``."""
    import tvm  # noqa: F401 - registers the IR's node types the JSON names (a fresh worker has not imported it yet)
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(text)


def schedule_from(snap: str, **kwargs: Any) -> Any:
    """``s_tir.Schedule`` of a private copy of the module ``snapshot`` kept (``Schedule``'s keyword arguments)."""
    from tvm.s_tir import Schedule

    return Schedule(load_own_json(snap), **kwargs)


def private_copy(mod: Any) -> Any:
    """A deep copy of an IRModule: no node shared with ``mod`` (a JSON round trip)."""
    return load_own_json(snapshot(mod))


def fresh_schedule(mod: Any, **kwargs: Any) -> Any:
    """``s_tir.Schedule`` of a private copy of ``mod`` (``Schedule``'s keyword arguments)."""
    return schedule_from(snapshot(mod), **kwargs)


def fingerprint(mod: Any) -> int:
    """A module's structural hash: equal while nothing changed it."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))
