"""Is a generated script valid: does it decode, and does it apply to a fresh schedule of its workload?

One function, ``check_script``, used by the training callback, the CLI report and the tests.  It uses the
project codec (``little_dragon.codec.decode`` / ``apply``) when that package is installed; before it lands,
scripts are the statement lines of ``str(trace)`` (what the stand-in data holds) and are decoded by a strict
parser that accepts only ``sch.<method>(...)`` calls with literal or variable arguments, then applied by
running those calls on the schedule.  Either way the workload is a real IRModule and TVM does the applying.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
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


def codec_available() -> bool:
    """True once the codec package exports its contract (``encode``, ``decode``, ``apply``)."""
    if importlib.util.find_spec("little_dragon.codec") is None:
        return False
    try:
        codec = importlib.import_module("little_dragon.codec")
    except Exception:  # noqa: BLE001 - a half-written codec in the shared tree: keep the stand-in check
        return False
    return all(hasattr(codec, name) for name in ("encode", "decode", "apply"))


@functools.lru_cache(maxsize=512)
def _module_from_script(tvmscript: str) -> Any:
    from tvm.script import from_source

    mod = from_source(tvmscript)
    return mod


def workload_module(row: dict[str, Any]) -> Any:
    """The IRModule of a row's workload: the workload store when present, else the row's own TVMScript."""
    if row.get("tvmscript"):
        return _module_from_script(row["tvmscript"])
    if importlib.util.find_spec("little_dragon.workloads.store") is not None:
        from little_dragon.workloads import store

        if hasattr(store, "get_workload"):
            return store.get_workload(row["workload_id"])
    raise LookupError(f"workload {row.get('workload_id')!r}: no TVMScript in the row and no workload store")


def _decode_trace_lines(text: str) -> ast.Module:
    """Parse stand-in script text; anything but ``[targets =] sch.method(args)`` statements is rejected."""
    tree = ast.parse(text)
    for node in tree.body:
        call = node.value if isinstance(node, (ast.Assign, ast.Expr)) else None
        ok = (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
              and isinstance(call.func.value, ast.Name) and call.func.value.id == "sch"
              and not call.func.attr.startswith("_"))
        if ok:
            for sub in ast.walk(call):
                if isinstance(sub, (ast.Lambda, ast.Subscript, ast.Starred, ast.NamedExpr)) or (
                        isinstance(sub, ast.Attribute) and sub is not call.func):
                    ok = False
        if not ok:
            raise SyntaxError(f"line {node.lineno}: not a schedule call: {ast.unparse(node)[:80]}")
    return tree


def _apply_trace_lines(tree: ast.Module, sch: Any) -> None:
    exec(compile(tree, "<script>", "exec"), {"__builtins__": {}}, {"sch": sch})  # noqa: S102 - parsed above


def check_script(text: str, row: dict[str, Any]) -> Verdict:
    """Decode ``text`` and apply it to a fresh schedule of ``row``'s workload."""
    from tvm import s_tir

    try:
        mod = workload_module(row)
    except Exception as e:  # noqa: BLE001 - a missing workload is reported, not a crash of training
        return Verdict(False, False, f"workload {row.get('workload_id')}: {e}")
    if codec_available():
        from little_dragon import codec

        try:
            codec.decode(text)
        except Exception as e:  # noqa: BLE001 - CodecError and anything a garbled text provokes
            return Verdict(False, False, f"decode: {e}")
        try:
            codec.apply(text, s_tir.Schedule(mod))
        except Exception as e:  # noqa: BLE001 - TVM raises its own error types on an illegal schedule
            return Verdict(True, False, f"apply: {e}")
        return Verdict(True, True)
    try:
        tree = _decode_trace_lines(text)
    except (SyntaxError, ValueError) as e:
        return Verdict(False, False, f"decode: {e}")
    try:
        _apply_trace_lines(tree, s_tir.Schedule(mod))
    except Exception as e:  # noqa: BLE001
        return Verdict(True, False, f"apply: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return Verdict(True, True)
