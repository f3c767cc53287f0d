"""Reading the workload store and turning canonical TVMScript back into IRModules.

The store is ``<workloads.out_dir>/workloads.parquet``, ``artifacts/workloads/workloads.parquet`` by default
(docs/data-contracts.md).  A workload's id is ``w`` +
16 hex digits of the structural hash of its IRModule (one PrimFunc named ``main``), so the same kernel
gets the same id whether it comes from the store or from a TVMScript file nobody has seen before.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from little_dragon.config import PROJECT_ROOT
from little_dragon.workloads.config import WorkloadsConfig

STORE_FILE = "workloads.parquet"  # the store inside the workloads stage's out_dir
DEFAULT_STORE = PROJECT_ROOT / WorkloadsConfig().out_dir / STORE_FILE  # = params.yaml's (tests/test_defaults.py)
COLUMNS = ["workload_id", "family", "name", "source", "dtype", "shapes", "flops", "bytes", "structural_hash",
           "tvmscript"]
ID_PATTERN = re.compile(r"^w[0-9a-f]{16}$")


class WorkloadError(ValueError):
    """A workload that cannot be found, parsed or verified (the message names the store/file and workload)."""


def structural_hash(mod: Any) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


def id_of_hash(h: int) -> str:
    return f"w{int(h) & 0xFFFFFFFFFFFFFFFF:016x}"


def workload_id_of(mod: Any) -> str:
    return id_of_hash(structural_hash(mod))


def canonical_module(obj: Any, where: str = "<module>"):
    """An IRModule holding exactly one PrimFunc, named ``main`` (a bare PrimFunc or a renamed one is wrapped)."""
    import tvm
    from tvm import tirx

    if isinstance(obj, tirx.PrimFunc):
        funcs = [obj]
    elif isinstance(obj, tvm.IRModule):
        funcs = [f for _, f in obj.functions_items() if isinstance(f, tirx.PrimFunc)]
        if len(funcs) != len(obj.functions_items()):
            raise WorkloadError(f"{where}: module holds non-TIR functions; a workload is one PrimFunc")
    else:
        raise WorkloadError(f"{where}: expected a PrimFunc or IRModule, got {type(obj).__name__}")
    if len(funcs) != 1:
        raise WorkloadError(f"{where}: a workload is exactly one PrimFunc, found {len(funcs)}")
    func = funcs[0]
    if isinstance(obj, tvm.IRModule) and "main" in [g.name_hint for g in obj.get_global_vars()] and \
            func.attrs is not None and func.attrs.get("global_symbol") == "main":
        return obj
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def module_from_script(text: str, expected_hash: int | str | None = None, where: str = "<tvmscript>"):
    """Parse canonical TVMScript into its IRModule; with ``expected_hash``, check it re-hashes the same."""
    import re

    import tvm

    # a user's kernel file imports the TVMScript namespaces, which the parser refuses ("Only 'from __future__
    # import annotations' is supported"); it binds I / T / R itself, as in the printer's commented header
    text = re.sub(r"(?m)^(\s*)((?:from\s+tvm[\w.]*\s+import|import\s+tvm)\b.*)$", r"\1# \2", text)
    try:
        parsed = tvm.script.from_source(text)
    except Exception as e:  # the parser raises DiagnosticError and friends; the message names the line
        raise WorkloadError(f"{where}: TVMScript does not parse: {e}") from e
    mod = canonical_module(parsed, where)
    if expected_hash is not None:
        got = structural_hash(mod)
        if got != int(expected_hash):
            raise WorkloadError(f"{where}: script hashes to {got}, store says {expected_hash} (edited or TVM changed)")
    return mod


def arg_signature(mod: Any) -> list[list[Any]]:
    """[[shape, dtype], ...] of the PrimFunc's arguments, as MetaSchedule sees them."""
    from tvm.s_tir import meta_schedule as ms

    return [[[int(d) for d in a.shape], str(a.dtype)] for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


def buffer_bytes(mod: Any) -> float:
    """Bytes read + written by one call: every argument buffer once."""
    total = 0
    for shape, dtype in arg_signature(mod):
        n = 1
        for d in shape:
            n *= d
        total += n * _bits(dtype) // 8
    return float(total)


def _bits(dtype: str) -> int:
    import numpy as np

    if dtype == "bool":
        return 8  # TVM stores booleans in a byte
    if dtype == "bfloat16":
        return 16
    return np.dtype(dtype).itemsize * 8


def store_path(path: str | os.PathLike | None = None) -> Path:
    """``path``, else ``$DRAGON_WORKLOADS``, else the store under params.yaml's ``workloads.out_dir``."""
    if path:
        return Path(path)
    if os.environ.get("DRAGON_WORKLOADS"):
        return Path(os.environ["DRAGON_WORKLOADS"])
    from little_dragon.config import ConfigError, load_section

    try:
        out = Path(load_section("workloads").out_dir)
    except ConfigError:  # no params.yaml (a bare device checkout): the default layout
        return DEFAULT_STORE
    return (out if out.is_absolute() else PROJECT_ROOT / out) / STORE_FILE


def load_workloads(path: str | os.PathLike | None = None):
    """The workload table (``DRAGON_WORKLOADS`` or the project's artifacts by default)."""
    import pandas as pd

    p = store_path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no workload store (run `dragon workloads` first)")
    df = pd.read_parquet(p)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise WorkloadError(f"{p}: not a workload store, missing columns {missing}")
    return df


def get_workload(workload_id_or_path: str | os.PathLike, store: str | os.PathLike | None = None):
    """``(row, IRModule)`` for a store id, or for a TVMScript file (a kernel the store may never have seen).

    ``row`` is a dict with the store's columns; for a file not in the store, family is ``external``, the
    name is the file's stem, and FLOPs come from walking the TIR."""
    key = str(workload_id_or_path)
    if ID_PATTERN.match(key) and not Path(key).exists():
        df = load_workloads(store)
        hit = df[df["workload_id"] == key]
        if hit.empty:
            raise WorkloadError(f"{store_path(store)}: no workload {key}")
        row = hit.iloc[0].to_dict()
        mod = module_from_script(row["tvmscript"], row["structural_hash"], where=f"{store_path(store)}:{key}")
        return row, mod
    path = Path(key)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: neither a workload id (w + 16 hex) nor a TVMScript file")
    mod = module_from_script(path.read_text(), where=str(path))
    wid = workload_id_of(mod)
    try:
        df = load_workloads(store)
        hit = df[df["workload_id"] == wid]
        if not hit.empty:
            return hit.iloc[0].to_dict(), mod
    except FileNotFoundError:
        pass
    return describe_module(mod, family="external", name=path.stem, source=f"file:{path}"), mod


def describe_module(mod: Any, *, family: str, name: str, source: str, dtype: str | None = None,
                    shapes: dict[str, Any] | None = None, flops: float | None = None,
                    script: str | None = None) -> dict[str, Any]:
    """A store row for ``mod`` (already canonical); FLOPs walk the TIR unless given."""
    from tvm.s_tir.analysis import estimate_tir_flops

    sig = arg_signature(mod)
    h = structural_hash(mod)
    return {
        "workload_id": id_of_hash(h),
        "family": family,
        "name": name,
        "source": source,
        "dtype": dtype or (sig[0][1] if sig else "unknown"),
        "shapes": json.dumps(shapes if shapes is not None else {"args": sig}, sort_keys=True),
        "flops": float(flops if flops is not None else estimate_tir_flops(mod)),
        "bytes": buffer_bytes(mod),
        "structural_hash": str(h),
        "tvmscript": script if script is not None else mod.script(),
    }
