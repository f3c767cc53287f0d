"""What a script prefix has defined on its workload: the facts the semantic constraints are built from.

The prefix (complete lines of a codec script) is decoded by the codec and applied to a fresh
``tvm.s_tir.Schedule`` of the workload; the schedule's own trace then lists every random variable the
prefix defined, in definition order, so the codec's implicit names (``b<k>``, ``l<k>``, ``v<k>``: the k-th
block, loop and value defined) map onto TVM objects.  From the live schedule we read, without guessing:

- which block and loop variables still exist (an inlined block or a split loop is gone: referencing it
  is an apply error);
- each live loop's extent (``tile l<k> = ...`` must multiply to it: MetaSchedule's perfect tile);
- how many loops sit above each live block (``loops b<k> N``), its child/producer/consumer counts
  (``kids``/``prods``/``cons``), and how many buffers it reads and writes (``cread``/``cwrite`` index);
- the names of all blocks of the scheduled function (``blk NAME``; cache stages add names such as
  ``C_local``).

Re-applying the whole prefix at each new line costs a few milliseconds (an llvm conv2d's 40-line trace:
~6 ms a line on one core), far less than generating the line.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class ScheduleState:
    blocks: dict[int, str]             # live block variable index -> the block's current name
    loops: dict[int, int | None]       # live loop variable index -> constant extent (None: symbolic)
    n_values: int                      # value variables defined (values never disappear)
    block_names: list[str]             # every block of the scheduled function, root first
    n_loops_above: dict[int, int]      # live block -> number of loops above it (``loops b N``)
    n_children: dict[int, int]         # live block -> child blocks (``kids b N``)
    n_producers: dict[int, int]        # live block -> producers (``prods b N``)
    n_consumers: dict[int, int]        # live block -> consumers (``cons b N``)
    n_reads: dict[int, int]            # live block -> buffers read (``cread b i``: i < n)
    n_writes: dict[int, int]           # live block -> buffers written (``cwrite b i``)


def _int(x: Any) -> int | None:
    try:
        return int(x.value) if hasattr(x, "value") else int(x)
    except (TypeError, ValueError):
        return None


def _safe(f: Any, default: Any) -> Any:
    try:
        return f()
    except Exception:  # noqa: BLE001 - TVM raises for a variable that is no longer valid
        return default


def state_of(sch: Any) -> ScheduleState:
    """The state of a schedule that has just replayed a script prefix (its trace holds the prefix)."""
    from tvm.s_tir.schedule import LoopRV, SBlockRV

    blocks: dict[int, str] = {}
    loops: dict[int, int | None] = {}
    block_rvs: dict[int, Any] = {}
    loop_rvs: dict[int, Any] = {}
    nb = nl = nv = 0
    for inst in sch.trace.insts:
        for rv in inst.outputs:
            if isinstance(rv, SBlockRV):
                blk = _safe(lambda: sch.get(rv), None)
                if blk is not None:
                    blocks[nb], block_rvs[nb] = blk.name_hint, rv
                nb += 1
            elif isinstance(rv, LoopRV):
                loop = _safe(lambda: sch.get(rv), None)
                if loop is not None:
                    loops[nl], loop_rvs[nl] = _int(loop.extent), rv
                nl += 1
            else:
                nv += 1
    # queries below add instructions to the trace; they come after the enumeration above
    st = ScheduleState(blocks, loops, nv, [], {}, {}, {}, {}, {}, {})
    for k, rv in block_rvs.items():
        blk = sch.get(rv)
        st.n_loops_above[k] = _safe(lambda: len(sch.get_loops(rv)), -1)
        st.n_children[k] = _safe(lambda: len(sch.get_child_blocks(rv)), -1)
        st.n_producers[k] = _safe(lambda: len(sch.get_producers(rv)), -1)
        st.n_consumers[k] = _safe(lambda: len(sch.get_consumers(rv)), -1)
        st.n_reads[k], st.n_writes[k] = len(blk.reads), len(blk.writes)
    st.block_names = _block_names(sch)
    return st


def _block_names(sch: Any) -> list[str]:
    names: list[str] = []
    root = _safe(lambda: sch.get_sblock("root"), None)
    todo = [root] if root is not None else []
    while todo:
        b = todo.pop()
        names.append(sch.get(b).name_hint)
        todo.extend(reversed(_safe(lambda: sch.get_child_blocks(b), [])))
    return names


def prefix_state(mod: Any, trace_json: list) -> ScheduleState:
    """Apply ``trace_json`` (a decoded prefix) to a fresh schedule of ``mod``; TVM's error propagates when
    the prefix does not apply (the caller rejects the attempt)."""
    from tvm.s_tir import Schedule, Trace

    sch = Schedule(mod, debug_mask=0)
    Trace.apply_json_to_schedule(trace_json, sch)
    return state_of(sch)
