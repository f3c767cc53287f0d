"""Round-trip checks: a record passes when the script decodes to the exact JSON, re-encodes to the same
text, and applying it to a fresh schedule of its workload gives an IRModule structurally equal to
applying TVM's own trace."""
from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator

from little_dragon.codec.apply import apply
from little_dragon.codec.canonical import first_difference
from little_dragon.codec.errors import CodecError
from little_dragon.codec.postproc import needs_tensor_intrinsics
from little_dragon.codec.script import decode, encode
from little_dragon.tvmx.schedule import fresh_schedule

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@dataclasses.dataclass
class RecordResult:
    workload: str
    record: int  # line index in database_tuning_record.json
    ok: bool
    error: str = ""  # what failed: stage and first difference
    text: str = ""  # the script
    trace_json: Any = None
    trace_str: str = ""  # str(trace) of TVM's own trace, for size comparisons
    target: str = ""
    text_post: str = ""  # the script with the post-processing re-derived (``post *``); "" without a target


def check_record(trace_json: Any, mod: Any = None, workload: str = "", record: int = 0,
                 structural: bool = True, target: Any = None, context: Any = None) -> RecordResult:
    """Round-trip one trace both ways; ``mod`` (the workload IRModule) enables the structural check, and
    with a ``target`` (dict or JSON text; or a ready ``context``) the ``post *`` form is checked too: it
    decodes (re-deriving the post-processing) to the exact JSON and re-encodes byte-identically."""
    res = RecordResult(workload, record, False, trace_json=trace_json)
    res.text, res.error = _both_ways(trace_json)
    if res.error:
        return res
    if structural and mod is not None:
        import tvm
        from tvm.s_tir import Trace

        if needs_tensor_intrinsics(trace_json):
            from little_dragon.tvmx.build import import_tensor_intrinsics

            import_tensor_intrinsics()
        ref = fresh_schedule(mod, debug_mask=0)
        try:
            Trace.apply_json_to_schedule(trace_json, ref)
        except Exception as e:  # noqa: BLE001 - TVM's own trace must apply; say so if it does not
            res.error = f"TVM's own trace does not apply to the workload: {str(e).strip().splitlines()[-1][:300]}"
            return res
        res.trace_str = str(ref.trace)
        new = fresh_schedule(mod, debug_mask=0)
        try:
            apply(res.text, new)
        except CodecError as e:
            res.error = f"apply: {e}"
            return res
        try:
            tvm.ir.assert_structural_equal(ref.mod, new.mod)
        except ValueError as e:
            res.error = f"IRModule after apply differs: {str(e).strip().splitlines()[0][:300]}"
            return res
    if context is None and mod is not None and target is not None:
        from little_dragon.codec.postproc import PostprocContext

        context = PostprocContext(mod, target)
    if context is not None:
        res.text_post, error = _both_ways(trace_json, context)
        if error:
            res.error = f"post * form: {error}"
            return res
    res.ok = True
    return res


def _both_ways(trace_json: Any, context: Any = None) -> tuple[str, str]:
    """(script, error): encode, decode back to the exact JSON, re-encode byte-identically; error "" if all hold."""
    try:
        text = encode(trace_json, context)
    except CodecError as e:
        return "", f"encode: {e}"
    try:
        back = decode(text, context)
    except CodecError as e:
        return text, f"decode: {e}"
    diff = first_difference(trace_json, back)
    if diff:
        return text, f"decode(encode(trace)) differs at {diff}"
    again = encode(back, context)
    if again != text:
        line = next(i for i, (a, b) in enumerate(zip(text.splitlines() + [""], again.splitlines() + [""])) if a != b)
        return text, f"re-encoding is not byte-identical at line {line + 1}"
    return text, ""


def spread_sample(items: list, k: int) -> list:
    """``k`` items spread evenly over ``items`` (first and last included, order kept); all when ``k`` <= 0 or
    there are no more than ``k``."""
    n = len(items)
    if k <= 0 or n <= k:
        return list(items)
    if k == 1:
        return [items[0]]
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)]


def read_database(db_dir: str | Path) -> Iterator[tuple[str, Any, list[tuple[int, Any, str]]]]:
    """Yield (workload name, IRModule, [(record index, trace JSON, target JSON)]) of a JSON database dir.

    Records are read as stored on disk (that is TVM's ``trace.as_json()``), not re-serialized by TVM."""
    from tvm.s_tir import meta_schedule as ms

    db_dir = Path(db_dir)
    wl_path, rec_path = db_dir / WORKLOAD_FILE, db_dir / RECORD_FILE
    for p in (wl_path, rec_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p}: not a MetaSchedule JSON database (missing {p.name})")
    workloads = []
    for n, line in enumerate(wl_path.read_text().splitlines(), 1):
        if line.strip():
            try:
                workloads.append(ms.database.Workload.from_json(json.loads(line)).mod)
            except Exception as e:  # noqa: BLE001
                raise ValueError(f"{wl_path}:{n}: unreadable workload: {e}") from e
    by_workload: dict[int, list] = collections.defaultdict(list)
    for n, line in enumerate(rec_path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            wl_idx, (trace_json, _run_secs, target, _args) = json.loads(line)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{rec_path}:{n + 1}: unreadable tuning record: {e}") from e
        by_workload[wl_idx].append((n, trace_json, json.dumps(target, sort_keys=True)))
    single = len(workloads) == 1
    for idx, mod in enumerate(workloads):
        name = db_dir.name if single else f"{db_dir.name}#{idx}"
        yield name, mod, by_workload.get(idx, [])


def roundtrip_database(db_dir: str | Path, structural: bool = True, derived_post: bool = True,
                       per_workload: int = 0) -> list[RecordResult]:
    """Check every record (``per_workload`` > 0: that many per workload, spread evenly over the tuning order,
    first and last included); ``derived_post`` also checks the ``post *`` form against each record's target."""
    from little_dragon.codec.postproc import PostprocContext

    results = []
    for name, mod, records in read_database(db_dir):
        contexts: dict[str, PostprocContext] = {}  # one per target: post-processors built once per workload
        for n, trace_json, target in spread_sample(records, per_workload):
            context = contexts.setdefault(target, PostprocContext(mod, target)) if derived_post else None
            r = check_record(trace_json, mod, name, n, structural, context=context)
            r.target = target
            results.append(r)
    return results
