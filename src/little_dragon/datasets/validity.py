"""Is a generated script valid: does it decode, and does it apply to a fresh schedule of its workload?

One function, ``check_script``, used by the training callback, the CLI report and the tests.  Validity is
the codec's: ``codec.decode`` parses the text into trace JSON and ``codec.apply`` replays it on a fresh
``tvm.s_tir.Schedule`` of the row's workload.  Generated text is data, never evaluated as Python.  The
workload comes from the row's canonical TVMScript (``tvmscript``, checked against ``structural_hash`` when
the row has one), or from the workload store by ``workload_id`` for rows without it.  An empty script
decodes (to the empty trace) but is not valid: it schedules nothing.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    decoded: bool
    applied: bool
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.decoded and self.applied


@functools.lru_cache(maxsize=512)
def _module_from_script(tvmscript: str, expected_hash: str | None, where: str) -> Any:
    from little_dragon.workloads.store import module_from_script

    return module_from_script(tvmscript, expected_hash, where=where)


@functools.lru_cache(maxsize=512)
def _module_from_store(workload_id: str) -> Any:
    from little_dragon.workloads.store import get_workload

    _, mod = get_workload(workload_id)
    return mod


def workload_module(row: dict[str, Any]) -> Any:
    """The IRModule of a row's workload: the row's own TVMScript, else the workload store's entry."""
    wid = row.get("workload_id")
    if row.get("tvmscript"):
        h = row.get("structural_hash")
        return _module_from_script(row["tvmscript"], str(h) if h not in (None, "") else None, f"workload {wid}")
    if not wid:
        raise LookupError("row has neither tvmscript nor workload_id")
    return _module_from_store(str(wid))


_CONTEXTS: dict[tuple[str, str], Any] = {}


def postproc_context(row: dict[str, Any]) -> Any:
    """The ``post *`` context of a row: its workload's module (``workload_module``) and its target; None
    for a row without a target.  Cached per workload and target (a context caches its derivations)."""
    from little_dragon.codec import PostprocContext

    target = row.get("target")
    if not target:
        return None
    target = target if isinstance(target, str) else json.dumps(target, sort_keys=True)
    key = (row.get("tvmscript") or str(row.get("workload_id")), target)
    if key not in _CONTEXTS:
        if len(_CONTEXTS) > 512:
            _CONTEXTS.clear()
        _CONTEXTS[key] = PostprocContext(workload_module(row), target)
    return _CONTEXTS[key]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def check_script(text: str, row: dict[str, Any]) -> Verdict:
    """Decode ``text`` with the codec and apply it to a fresh schedule of ``row``'s workload."""
    from tvm import s_tir

    from little_dragon import codec

    try:
        mod = workload_module(row)
    except Exception as e:  # noqa: BLE001 - a missing workload is reported, not a crash of training
        return Verdict(False, False, f"workload {row.get('workload_id')}: {_first_line(e)}")
    context = postproc_context(row)
    try:
        insts = codec.decode(text, codec.SyntaxOnlyContext())[0]  # the text alone; `post *` is derived below
    except Exception as e:  # noqa: BLE001 - DecodeError, and anything else garbled text provokes
        return Verdict(False, False, f"decode: {_first_line(e)}")
    if not insts:  # the empty trace applies to anything; a model that writes nothing has not written a script
        return Verdict(True, False, "empty: the script has no instructions")
    try:
        codec.apply(text, s_tir.Schedule(mod), context)
    except Exception as e:  # noqa: BLE001 - ApplyError; TVM's own errors are wrapped by the codec
        return Verdict(True, False, f"apply: {_first_line(e)}")
    return Verdict(True, True)
