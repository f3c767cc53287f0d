"""Is a script valid for a workload: does it decode, and does it apply to a fresh schedule of the module?

Validity is the codec's: ``decode`` parses the text into trace JSON and ``apply`` replays it on a fresh
``tvm.s_tir.Schedule``.  Generated text is data, never evaluated as Python.  An empty script decodes (to the
empty trace) but is not valid: it schedules nothing.  ``datasets.validity`` resolves a dataset row to its
module and target and calls ``check_module_script``; the training callbacks, the quality frames and the
tests all go through that one check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from little_dragon.tvmx.schedule import fresh_schedule


@dataclass(frozen=True)
class Verdict:
    decoded: bool
    applied: bool
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.decoded and self.applied


def first_line(e: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters): what a verdict keeps of an error."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def check_module_script(text: str, mod: Any, context: Any = None, schedule: Any = None) -> Verdict:
    """Decode ``text`` and apply it to a fresh schedule of ``mod`` (``context``: the ``post *`` context;
    ``schedule``: that fresh schedule, given by a caller that inspects the result, else made here)."""
    from little_dragon.codec import SyntaxOnlyContext, apply, decode

    try:
        insts = decode(text, SyntaxOnlyContext())[0]  # the text alone; `post *` is derived by apply
    except Exception as e:  # noqa: BLE001 - DecodeError, and anything else garbled text provokes
        return Verdict(False, False, f"decode: {first_line(e)}")
    if not insts:  # the empty trace applies to anything; a model that writes nothing has not written a script
        return Verdict(True, False, "empty: the script has no instructions")
    try:
        apply(text, fresh_schedule(mod) if schedule is None else schedule, context)
    except Exception as e:  # noqa: BLE001 - ApplyError; TVM's own errors are wrapped by the codec
        return Verdict(True, False, f"apply: {first_line(e)}")
    return Verdict(True, True)
