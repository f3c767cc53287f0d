"""Targets as dicts (TVM 0.27 rejects CLI target strings) and a short, stable key for file names."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

CUDA_H200: dict[str, Any] = {
    "kind": "cuda",
    "arch": "sm_90",
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}


def default_llvm(num_cores: int | None = None) -> dict[str, Any]:
    return {"kind": "llvm", "num-cores": int(num_cores or os.cpu_count() or 1)}


def normalize(spec: dict[str, Any] | str) -> dict[str, Any]:
    """Accept a target dict, a JSON string of one, or the names ``llvm`` / ``cuda`` / ``cuda-h200``."""
    if isinstance(spec, dict):
        return dict(spec)
    s = spec.strip()
    if s.startswith("{"):
        return dict(json.loads(s))
    if s == "llvm":
        return default_llvm()
    if s in ("cuda", "cuda-h200", "sm_90"):
        return dict(CUDA_H200)
    raise ValueError(f"target {spec!r}: give a target dict (JSON) or one of llvm, cuda")


def make(spec: dict[str, Any] | str):
    import tvm

    return tvm.target.Target(normalize(spec))


def kind(spec: dict[str, Any] | str) -> str:
    return normalize(spec)["kind"]


def key(spec: dict[str, Any] | str) -> str:
    """A file-name-safe key: ``llvm-2c`` or ``cuda-sm_90`` plus a short hash of the full dict."""
    d = normalize(spec)
    h = hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:6]
    if d["kind"] == "llvm":
        return f"llvm-{d.get('num-cores', 'x')}c-{h}"
    if d["kind"] == "cuda":
        return f"cuda-{d.get('arch', 'x')}-{h}"
    return f"{d['kind']}-{h}"


def device(spec: dict[str, Any] | str, index: int = 0):
    import tvm

    k = kind(spec)
    if k == "llvm":
        return tvm.cpu(index)
    if k == "cuda":
        return tvm.cuda(index)
    raise ValueError(f"no device for target kind {k!r}")
