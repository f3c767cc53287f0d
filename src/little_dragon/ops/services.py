"""The local services a user runs the system through: a Prefect server with its UI, an MLflow tracking server
with its UI over the project's sqlite store and artifacts, and the served ``scheduled-retraining`` deployment.

All three listen on 127.0.0.1 only.  Each child runs in its own process group with a parent-death signal
(``little_dragon.prefect_api.spawn``): stopping ``dragon services up`` (Ctrl-C, SIGTERM, ``dragon services
down`` from another terminal) stops each whole group, servers' workers and flow runs in progress included.
Were the launcher SIGKILLed, its children still die with it (the kernel's parent-death signal); workers they
started themselves are then stopped by ``dragon services down``, which kills the groups recorded in
``.services/services.json``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from little_dragon import atomic
from little_dragon.config import PROJECT_ROOT
from little_dragon.ops.config import RetrainingConfig
from little_dragon.prefect_api import exit_on_signals, spawn, stop, wait_http

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness poll is noise
HOST = "127.0.0.1"


@dataclasses.dataclass
class Services:
    prefect_url: str      # the UI; the API is <prefect_url>/api
    mlflow_url: str
    deployment_url: str   # the deployment's page in the Prefect UI
    pids: dict[str, int]
    state_file: Path


def state_path(cfg: RetrainingConfig, root: Path = PROJECT_ROOT) -> Path:
    d = Path(cfg.state_dir)
    return (d if d.is_absolute() else root / d) / "services.json"


def read_state(cfg: RetrainingConfig, root: Path = PROJECT_ROOT) -> dict[str, Any] | None:
    p = state_path(cfg, root)
    if not p.exists():
        return None
    state = json.loads(p.read_text())
    return state if _alive(state.get("launcher_pid", -1)) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def tracking_store(root: Path = PROJECT_ROOT) -> tuple[str, str]:
    """(backend store URI, artifact root) the stages of the project at ``root`` write to (``tracking.py``'s
    convention: ``MLFLOW_TRACKING_URI``, else ``<root>/mlflow.db`` with artifacts in ``<root>/mlartifacts``);
    the MLflow server serves these same ones."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(root) / 'mlflow.db'}"
    return uri, (Path(root) / "mlartifacts").as_uri()


def prefect_server_env(env: dict[str, str], port: int) -> dict[str, str]:
    """The Prefect server's environment: its UI must call the API on *this* port. Without PREFECT_UI_API_URL the
    UI (``/ui-settings``) pointed at the default http://127.0.0.1:4200/api whatever ``--port`` said, so a server
    on another port (``--set prefect_port=...``, the tests' free ports) showed "Can't connect to Server API"
    and empty pages: the Prefect-page check the deployment test had marked xfail."""
    return {**env, "PREFECT_UI_API_URL": f"http://{HOST}:{port}/api", "PREFECT_SERVER_API_HOST": HOST,
            "PREFECT_SERVER_API_PORT": str(port)}


def start_services(cfg: RetrainingConfig, root: Path = PROJECT_ROOT, serve_deployment: bool = True,
                   profile: str | None = None, timeout_s: float = 240.0) -> tuple[Services, dict[str, Any]]:
    """Start the servers (and the served deployment), wait until each answers; returns (services, procs)."""
    state = read_state(cfg, root)
    if state:
        raise RuntimeError(f"services already running (launcher pid {state['launcher_pid']}: Prefect "
                           f"{state['prefect_url']}, MLflow {state['mlflow_url']}); stop them with "
                           "`dragon services down`")
    logs = state_path(cfg, root).parent
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_ENABLE_TELEMETRY": "false",
           "DO_NOT_TRACK": "true"}
    env.pop("PREFECT_API_URL", None)
    prefect_url = f"http://{HOST}:{cfg.prefect_port}"
    mlflow_url = f"http://{HOST}:{cfg.mlflow_port}"
    procs: dict[str, Any] = {}
    try:
        log.info("starting the Prefect server on %s (log: %s)", prefect_url, logs / "prefect.log")
        procs["prefect"] = spawn([sys.executable, "-m", "prefect", "server", "start", "--host", HOST,
                                  "--port", str(cfg.prefect_port)], env=prefect_server_env(env, cfg.prefect_port),
                                 cwd=root, log_path=logs / "prefect.log")
        store, artifacts = tracking_store(root)
        log.info("starting the MLflow server on %s over %s (log: %s)", mlflow_url, store, logs / "mlflow.log")
        procs["mlflow"] = spawn([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
                                 "--default-artifact-root", artifacts, "--no-serve-artifacts", "--host", HOST,
                                 "--port", str(cfg.mlflow_port), "--workers", "1"],
                                env=env, cwd=root, log_path=logs / "mlflow.log")
        wait_http(f"{prefect_url}/api/health", timeout_s, procs["prefect"], f"Prefect server (log {logs}/prefect.log)")
        wait_http(f"{mlflow_url}/health", timeout_s, procs["mlflow"], f"MLflow server (log {logs}/mlflow.log)")
        deployment_url = ""
        if serve_deployment:
            served_env = {**env, "PREFECT_API_URL": f"{prefect_url}/api"}
            argv = [sys.executable, "-m", "flows.pipeline", "serve"] + (["--profile", profile] if profile else [])
            log.info("serving the %s deployment (log: %s)", cfg.deployment, logs / "deployment.log")
            procs["deployment"] = spawn(argv, env=served_env, cwd=root, log_path=logs / "deployment.log")
            dep = wait_deployment(f"{prefect_url}/api", cfg.deployment, timeout_s, procs["deployment"])
            deployment_url = f"{prefect_url}/deployments/deployment/{dep['id']}"
    except BaseException:
        for p in reversed(list(procs.values())):
            stop(p)
        raise
    services = Services(prefect_url, mlflow_url, deployment_url, {k: p.pid for k, p in procs.items()},
                        state_path(cfg, root))
    atomic.write_json(services.state_file, {
        "launcher_pid": os.getpid(), "prefect_url": prefect_url, "mlflow_url": mlflow_url,
        "deployment_url": deployment_url, "pids": services.pids, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return services, procs


def wait_deployment(api_url: str, name: str, timeout_s: float, proc: Any = None) -> dict[str, Any]:
    """Poll the Prefect API until the pipeline's deployment ``name`` exists; its JSON."""
    import httpx

    url = f"{api_url}/deployments/name/little-dragon-pipeline/{name}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the deployment server exited with status {proc.returncode} before {name} appeared")
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"deployment {name} did not appear on {api_url} within {timeout_s:.0f} s")


def stop_services(procs: dict[str, Any], state_file: Path | None = None) -> None:
    for name, p in reversed(list(procs.items())):
        log.info("stopping %s (pid %d)", name, p.pid)
        stop(p)
    if state_file is not None:
        state_file.unlink(missing_ok=True)


def run_services(cfg: RetrainingConfig, root: Path = PROJECT_ROOT, serve_deployment: bool = True,
                 profile: str | None = None) -> int:
    """``dragon services up``: start everything, print where to look, block until stopped, stop everything."""
    with exit_on_signals():
        services, procs = start_services(cfg, root, serve_deployment, profile)
        try:
            print(f"Prefect UI   {services.prefect_url}  (API {services.prefect_url}/api)", flush=True)
            if services.deployment_url:
                print(f"deployment   {services.deployment_url}  ({cfg.deployment}, cron {cfg.cron!r})", flush=True)
            print(f"MLflow UI    {services.mlflow_url}", flush=True)
            print("Ctrl-C (or `dragon services down`) stops them all.", flush=True)
            while True:
                for name, p in procs.items():
                    if p.poll() is not None:
                        log.error("%s exited with status %s (log: %s); stopping the others", name, p.returncode,
                                  services.state_file.parent / f"{name}.log")
                        return 1
                time.sleep(1.0)
        except KeyboardInterrupt:
            return 0
        finally:
            stop_services(procs, services.state_file)


def stop_running(cfg: RetrainingConfig, root: Path = PROJECT_ROOT, timeout_s: float = 60.0) -> bool:
    """``dragon services down``: signal the launcher (it stops its children), then stop whatever is left of
    the process groups it recorded (all of them when the launcher itself was killed); False if none ran."""
    import signal

    p = state_path(cfg, root)
    if not p.exists():
        return False
    state = json.loads(p.read_text())
    launcher = state.get("launcher_pid", -1)
    if _alive(launcher):
        os.kill(launcher, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(launcher):
            time.sleep(0.2)
    for pid in state.get("pids", {}).values():  # process groups: grandchildren included
        stop(pid)
    p.unlink(missing_ok=True)
    return True
