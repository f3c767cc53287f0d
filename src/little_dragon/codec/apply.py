"""Apply a script to a schedule; a failure names the instruction, its script line and TVM's reason."""
from __future__ import annotations

from typing import Any

from little_dragon.codec.errors import ApplyError
from little_dragon.codec.script import decode_with_lines
from little_dragon.tvmx.errors import tvm_error_reason
from little_dragon.tvmx.schedule import schedule_from, snapshot


def _apply_prefix(trace_json: list, n: int, sch: Any) -> None:
    from tvm.s_tir import Trace

    insts, decisions = trace_json
    Trace.apply_json_to_schedule([insts[:n], [d for d in decisions if d[0] < n]], sch)


def apply_json(trace_json: list, sch: Any, lines: list[int] | None = None, text: str = "") -> None:
    """Apply trace JSON to ``sch``; on failure find the first failing instruction (bisecting on fresh schedules of
    the module as it was) and raise ApplyError naming it.  The module is kept whole (``snapshot``) before the script
    runs: the failed run may have written into the nodes it shares with ``sch.copy()`` (tvmx/schedule.py), and
    bisecting on such copies named a line that applies (session 16: `loops b1 2` for a failing `rfactor` six lines
    on).  The copies are made only when a script fails."""
    before = snapshot(sch.mod)
    try:
        _apply_prefix(trace_json, len(trace_json[0]), sch)
        return
    except Exception as e:  # noqa: BLE001 - TVM raises several error types; all become ApplyError
        whole = e
    lo, hi = 0, len(trace_json[0])  # prefix of lo applies, prefix of hi fails
    reason = tvm_error_reason(whole)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _apply_prefix(trace_json, mid, schedule_from(before, debug_mask=0))
            lo = mid
        except Exception as e:  # noqa: BLE001
            hi, reason = mid, tvm_error_reason(e)
    index = hi - 1
    line = lines[index] if lines else index + 1
    script_lines = text.splitlines()
    inst_text = script_lines[line - 1] if text and line - 1 < len(script_lines) else str(trace_json[0][index])[:200]
    raise ApplyError(f"instruction {index} `{inst_text}` failed: {reason}", line=line, instruction=inst_text,
                     reason=reason) from whole


def apply(text: str, sch: Any, context: Any = None) -> Any:
    """Decode ``text`` and apply it to ``sch`` (a ``tvm.s_tir.Schedule`` of the script's workload).

    Raises DecodeError for a bad script and ApplyError (instruction, line, reason) when TVM rejects it.
    ``context`` (``postproc.PostprocContext`` of the workload and target) is needed by a ``post *`` line.
    Returns ``sch``."""
    trace_json, lines = decode_with_lines(text, context)
    apply_json(trace_json, sch, lines, text)
    return sch
