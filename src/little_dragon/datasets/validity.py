"""Is a generated script valid for a dataset row: does it decode, and does it apply to the row's workload?

One function, ``check_script(text, row)``, used by the training callbacks, the CLI report and the tests; the
quality frames use ``postproc_context(row)``.  The check itself is the codec's
(``codec.validity.check_module_script``); this module only resolves a row (docs/data-contracts.md) to its
workload and ``post *`` context: the row's canonical TVMScript (``tvmscript``, checked against
``structural_hash`` when the row has one), or the workload store's entry by ``workload_id`` for rows
without it.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from little_dragon.codec.validity import Verdict, check_module_script, first_line

__all__ = ["Verdict", "check_script", "postproc_context", "workload_module"]


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


def check_script(text: str, row: dict[str, Any]) -> Verdict:
    """Decode ``text`` with the codec and apply it to a fresh schedule of ``row``'s workload."""
    try:
        mod = workload_module(row)
    except Exception as e:  # noqa: BLE001 - a missing workload is reported, not a crash of training
        return Verdict(False, False, f"workload {row.get('workload_id')}: {first_line(e)}")
    return check_module_script(text, mod, postproc_context(row))
