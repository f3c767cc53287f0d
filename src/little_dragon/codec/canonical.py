"""Canonical JSON of a trace: TVM's ``trace.as_json()`` as a MetaSchedule JSON database holds it on disk.

IntImm and FloatImm become Python numbers, except that a boolean IntImm stays a boolean, and plain
booleans become integers: the database writes ``Split``'s ``[true, false]`` attributes as ``[1, 0]`` but a
``T.bool(True)`` (``Blockize``, ``Tensorize``, ``TransformLayout``) as ``true``.  So a trace has one JSON
form whether it comes from a live ``Trace`` or from ``database_tuning_record.json``.

An IndexMap inside a trace is a string holding TVM's serialized graph, in one of two spellings: the
database's indented JSON (``{\n  "root_index": ...``) or a live trace's compact one (``{"root_index":...``).
``index_maps_parsed`` and ``index_maps_indented`` turn either spelling into one form."""
from __future__ import annotations

import json
from typing import Any, Callable


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


def first_mismatch(xs: list, ys: list, same: Callable[[Any, Any], bool] | None = None
                   ) -> tuple[int, Any, Any] | None:
    """``(i, x, y)`` at the first index where two lists differ (``None`` stands past the end of the shorter
    one), by ``same`` (default: equal ``dumps``); None when they do not."""
    for i in range(max(len(xs), len(ys))):
        x = xs[i] if i < len(xs) else None
        y = ys[i] if i < len(ys) else None
        if not (same(x, y) if same is not None else dumps(x) == dumps(y)):
            return i, x, y
    return None


def first_difference(a: Any, b: Any) -> str:
    """Describe where two trace JSONs first differ (instruction index and both versions)."""
    if dumps(a) == dumps(b):
        return ""
    hit = first_mismatch((a[0] if a else []), (b[0] if b else []))
    if hit is not None:
        i, x, y = hit
        return f"instruction {i}: expected {dumps(x)[:300]} got {dumps(y)[:300]}"
    hit = first_mismatch((a[1] if len(a) > 1 else []), (b[1] if len(b) > 1 else []))
    if hit is not None:
        i, x, y = hit
        return f"decision {i}: expected {dumps(x)} got {dumps(y)}"
    return "traces differ in structure"

def is_index_map(x: Any) -> bool:
    """Is ``x`` a serialized IndexMap, in either spelling (database-indented or live-compact JSON)?"""
    return isinstance(x, str) and x.startswith("{") and '"root_index"' in x


def map_index_maps(x: Any, fn: Callable[[str], Any]) -> Any:
    """``x`` (instruction JSON: nested lists) with every serialized IndexMap string replaced by ``fn(it)``."""
    if is_index_map(x):
        return fn(x)
    if isinstance(x, list):
        return [map_index_maps(y, fn) for y in x]
    return x


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def index_maps_parsed(x: Any) -> Any:
    """Instruction JSON with embedded IndexMaps parsed (an unreadable one stays text): both spellings of a
    map compare equal."""
    return map_index_maps(x, _parsed)


def index_maps_indented(x: Any) -> Any:
    """Instruction JSON with embedded IndexMaps in the database's indented spelling (2 spaces)."""
    return map_index_maps(x, lambda text: json.dumps(json.loads(text), indent=2))
