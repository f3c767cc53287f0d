"""Canonical JSON of a trace: TVM's ``trace.as_json()`` with IntImm/FloatImm turned into Python numbers.

This is what a MetaSchedule JSON database holds on disk, so the codec round-trips against it."""
from __future__ import annotations

import json
from typing import Any


def canonical_json(obj: Any) -> Any:
    """Plain-JSON copy of ``trace.as_json()`` output (IntImm -> int, bool IntImm -> bool, FloatImm -> float)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [canonical_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): canonical_json(v) for k, v in obj.items()}
    ty = getattr(obj, "ty", None)  # TVM 0.27 PrimExpr: ``ty`` (a PrimType) instead of ``dtype``
    dtype = str(getattr(ty, "dtype", ty) if ty is not None else getattr(obj, "dtype", ""))
    if hasattr(obj, "value"):
        if dtype == "bool":
            return bool(obj.value)
        if dtype.startswith(("int", "uint")):
            return int(obj.value)
        if dtype.startswith(("float", "bfloat")):
            return float(obj.value)
    raise TypeError(f"trace JSON holds a {type(obj).__name__}, not a JSON value: {obj!r}")


def dumps(trace_json: Any) -> str:
    """Exact text form used to compare traces (bool vs int and key order matter)."""
    return json.dumps(trace_json, separators=(",", ":"))


def first_difference(a: Any, b: Any) -> str:
    """Describe where two trace JSONs first differ (instruction index and both versions)."""
    if dumps(a) == dumps(b):
        return ""
    ia, ib = (a[0] if a else []), (b[0] if b else [])
    for i in range(max(len(ia), len(ib))):
        x = ia[i] if i < len(ia) else None
        y = ib[i] if i < len(ib) else None
        if dumps(x) != dumps(y):
            return f"instruction {i}: expected {dumps(x)[:300]} got {dumps(y)[:300]}"
    da, db = (a[1] if len(a) > 1 else []), (b[1] if len(b) > 1 else [])
    for i in range(max(len(da), len(db))):
        x = da[i] if i < len(da) else None
        y = db[i] if i < len(db) else None
        if dumps(x) != dumps(y):
            return f"decision {i}: expected {dumps(x)} got {dumps(y)}"
    return "traces differ in structure"
