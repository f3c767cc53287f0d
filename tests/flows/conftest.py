"""A fresh copy of the project with the real services running: `dragon services up` (a Prefect server with
its UI, an MLflow server with its UI, the served scheduled-retraining deployment) on free loopback ports.

The copy holds the working tree's code, dvc.yaml, params.yaml and configs; its Python path puts the copy's
``src`` first, so every stage writes inside the copy (its own mlflow.db, artifacts, dvc.lock, monitoring).
The GPU harvests of ``data/`` are not pulled, as in a fresh CI clone: empty harvest folders stand in for
them (the ``smoke`` profile builds its datasets from this run's own harvest only)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COPY = ["src", "flows", "configs", "docs", "dvc.yaml", "params.yaml", ".dvc/config", ".dvcignore",
        "pyproject.toml", ".gitignore"]  # docs: the evaluate stage depends on docs/codec.md


def _free_port() -> int:
    from little_dragon.prefect_api import free_port

    return free_port()


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project") / "little-dragon"
    root.mkdir()
    for rel in COPY:
        src = REPO / rel
        if not src.exists():
            continue
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dst)
    for d in ("data/harvest/none/db", "data/harvest-t64/none/db"):
        (root / d).mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def project_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "MLFLOW_", "DRAGON_"))}
    env.update({"PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}", "PREFECT_HOME": str(root / ".prefect"),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DVC_NO_ANALYTICS": "1",
                "GX_ANALYTICS_ENABLED": "false", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"})
    return env


class RunningServices:
    def __init__(self, root: Path, proc: subprocess.Popen, prefect_port: int, mlflow_port: int, log: Path):
        self.root, self.proc, self.log = root, proc, log
        self.prefect = f"http://127.0.0.1:{prefect_port}"
        self.api = f"{self.prefect}/api"
        self.mlflow = f"http://127.0.0.1:{mlflow_port}"
        self.env = project_env(root)

    def log_tail(self, n: int = 60) -> str:
        parts = []
        for p in [self.log, *sorted((self.root / ".services").glob("*.log"))]:
            if p.exists():
                parts.append(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(parts)


@pytest.fixture(scope="session")
def services(project) -> RunningServices:
    """`dragon services up` as a user runs it; stopped (SIGINT, as Ctrl-C) at the end of the session."""
    pp, mp = _free_port(), _free_port()
    log = project / "services-up.log"
    from little_dragon.prefect_api import spawn

    # spawn: the launcher dies with this test process even if pytest is killed (and takes its servers along)
    proc = spawn([sys.executable, "-m", "little_dragon.cli", "services", "up",
                  "--set", f"prefect_port={pp}", "--set", f"mlflow_port={mp}"],
                 cwd=project, env=project_env(project), log_path=log)
    svc = RunningServices(project, proc, pp, mp, log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dragon services up exited {proc.returncode}\n{svc.log_tail()}")
        if "Ctrl-C" in log.read_text(errors="replace"):
            break
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail(f"dragon services up did not come up in 300 s\n{svc.log_tail()}")
    yield svc
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise

