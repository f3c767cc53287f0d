"""Canonical JSON of a trace: TVM's ``trace.as_json()`` as a MetaSchedule JSON database holds it on disk.

IntImm and FloatImm become Python numbers, except that a boolean IntImm stays a boolean, and plain
booleans become integers: the database writes ``Split``'s ``[true, false]`` attributes as ``[1, 0]`` but a
``T.bool(True)`` (``Blockize``, ``Tensorize``, ``TransformLayout``) as ``true``.  So a trace has one JSON
form whether it comes from a live ``Trace`` or from ``database_tuning_record.json``."""
from __future__ import annotations

import json
from typing import Any


def canonical_json(obj: Any, bools_as_int: bool = True) -> Any:
    """Plain-JSON copy of ``trace.as_json()`` output, as the database stores it.

    ``bools_as_int=False`` leaves plain booleans alone (for JSON already read from a database)."""
    if isinstance(obj, bool):
        return int(obj) if bools_as_int else obj
    if obj is None or isinstance(obj, (int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [canonical_json(x, bools_as_int) for x in obj]
    if isinstance(obj, dict):
        return {str(k): canonical_json(v, bools_as_int) for k, v in obj.items()}
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
