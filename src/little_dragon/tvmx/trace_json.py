"""TVM's ``trace.as_json()`` as plain JSON values (it holds IntImm/FloatImm/String objects)."""
from __future__ import annotations

import json
from typing import Any


def plain(obj: Any) -> Any:
    """Recursively turn TVM containers and immediates into lists, dicts, ints, floats and strs."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)) or type(obj).__name__ in ("Array", "List"):
        return [plain(x) for x in obj]
    if isinstance(obj, dict) or type(obj).__name__ == "Map":
        return {str(k): plain(v) for k, v in obj.items()}
    name = type(obj).__name__
    if name == "IntImm":
        return int(obj.value)
    if name == "FloatImm":
        return float(obj.value)
    if hasattr(obj, "value") and isinstance(obj.value, (int, float, str)):
        return obj.value
    try:
        return str(obj) if isinstance(obj, str) else json.loads(json.dumps(obj))
    except TypeError:
        raise TypeError(f"cannot convert {name} to plain JSON: {obj!r}") from None


def trace_to_json(trace: Any) -> list:
    """``[insts, decisions]`` of a ``tvm.s_tir.Trace`` (post-processing kept), as plain JSON."""
    return plain(trace.as_json(remove_postproc=False))


def dumps(trace_json: Any) -> str:
    return json.dumps(trace_json, separators=(",", ":"))
