"""MLflow for every stage run: params, counts, wall time, artifacts' DVC hashes and the git commit.

The tracking store defaults to a sqlite file inside the project (``mlflow.db``) with artifacts under
``mlartifacts/``; ``MLFLOW_TRACKING_URI`` overrides it (a team server, say).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

from little_dragon.config import PROJECT_ROOT

# Keep MLflow's own telemetry and hub look-ups off: the machines have no internet.
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("DO_NOT_TRACK", "true")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}"


def artifact_root() -> str:
    return (PROJECT_ROOT / "mlartifacts").as_uri()


def setup(experiment: str) -> Any:
    """Point MLflow at the project store and select (or create) ``experiment``."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    if mlflow.get_experiment_by_name(experiment) is None:
        kw = {} if os.environ.get("MLFLOW_TRACKING_URI") else {"artifact_location": artifact_root()}
        with contextlib.suppress(Exception):  # another process may create it at the same time
            mlflow.create_experiment(experiment, **kw)
    mlflow.set_experiment(experiment)
    return mlflow


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             timeout=10)
        sha = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def dvc_hash(path: str | os.PathLike) -> str:
    """The md5 DVC records for ``path`` (a file's md5, or DVC's ``.dir`` manifest md5 for a folder).

    Computed the way DVC does (``dvc_data``), so it matches ``dvc.lock`` for stage outputs."""
    p = Path(path)
    if not p.exists():
        return "missing"
    if p.is_file():
        h = hashlib.md5()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    entries = []
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        entries.append({"md5": dvc_hash(f), "relpath": f.relative_to(p).as_posix()})
    manifest = json.dumps(entries, sort_keys=True).encode()
    return hashlib.md5(manifest).hexdigest() + ".dir"


@contextlib.contextmanager
def stage_run(stage: str, params: dict[str, Any] | None = None, inputs: dict[str, str | os.PathLike] | None = None,
              experiment: str | None = None, tags: dict[str, str] | None = None) -> Iterator[Any]:
    """An MLflow run around one pipeline stage; yields the ``mlflow`` module for logging inside.

    Logs params, the git commit, the DVC hashes of ``inputs`` at start, and wall time at the end; the
    caller logs counts/metrics and outputs (``log_outputs``)."""
    if os.environ.get("DRAGON_NO_MLFLOW") == "1":
        yield None
        return
    mlflow = setup(experiment or f"little-dragon/{stage}")
    t0 = time.perf_counter()
    with mlflow.start_run(run_name=f"{stage}-{time.strftime('%Y%m%d-%H%M%S')}"):
        mlflow.set_tags({"stage": stage, "git_commit": git_commit(), **(tags or {})})
        if params:
            mlflow.log_params({k: _short(v) for k, v in params.items()})
        for name, p in (inputs or {}).items():
            mlflow.set_tag(f"dvc_hash.in.{name}", dvc_hash(p))
        try:
            yield mlflow
        finally:
            mlflow.log_metric("wall_time_s", time.perf_counter() - t0)


def log_outputs(mlflow: Any, outputs: dict[str, str | os.PathLike]) -> None:
    if mlflow is None:
        return
    for name, p in outputs.items():
        mlflow.set_tag(f"dvc_hash.out.{name}", dvc_hash(p))


def _short(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 6000 else s[:5997] + "..."
