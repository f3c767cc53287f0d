"""Headless Chromium (Debian's ``chromium`` package) over the UIs: rendered DOM text and screenshots.

The Prefect and MLflow UIs are single-page apps: ``--virtual-time-budget`` lets their JavaScript fetch from the
servers and render before Chromium dumps the DOM or takes the picture."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    env = os.environ.get("DRAGON_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def _argv(extra: list[str], budget_ms: int, size: tuple[int, int]) -> list[str]:
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium, or set DRAGON_CHROMIUM)")
    return [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--allow-file-access-from-files",
            f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={budget_ms}", *extra]


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dragon-chromium-") as profile:
        return subprocess.run([*argv, f"--user-data-dir={profile}"], capture_output=True, text=True,
                              timeout=timeout_s)


def rendered_dom(url: str, budget_ms: int = 20000, size: tuple[int, int] = (1440, 1000),
                 timeout_s: float = 120.0) -> str:
    """The page's DOM after its scripts ran (``--dump-dom``)."""
    res = _run(_argv(["--dump-dom", url], budget_ms, size), timeout_s)
    if res.returncode != 0 and not res.stdout:
        raise RuntimeError(f"chromium --dump-dom {url} exited {res.returncode}: {res.stderr[-500:]}")
    return res.stdout


def screenshot(url: str, path: str | os.PathLike, budget_ms: int = 20000, size: tuple[int, int] = (1440, 1000),
               timeout_s: float = 120.0) -> Path:
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    res = _run(_argv([f"--screenshot={path}", url], budget_ms, size), timeout_s)
    if not path.exists():
        raise RuntimeError(f"chromium --screenshot {url} wrote nothing (exit {res.returncode}): {res.stderr[-500:]}")
    return path


def ui_pages(prefect_url: str, mlflow_url: str, project_root: str | os.PathLike, deployment: dict,
             flow_run: dict, model_name: str = "little-dragon", alias: str | None = None
             ) -> dict[str, tuple[str, list[str]]]:
    """The pages a user opens, each with the words it must show: name -> (url, words); ``alias``: the
    registered model page must show it (once the promotion gate has set it)."""
    docs = Path(project_root) / "monitoring" / "data-docs"
    return {
        "prefect-deployment": (f"{prefect_url}/deployments/deployment/{deployment['id']}",
                               [deployment["name"], flow_run["name"]]),
        "prefect-flow-run": (f"{prefect_url}/runs/flow-run/{flow_run['id']}", [flow_run["name"], "Completed"]),
        "mlflow-registered-model": (f"{mlflow_url}/#/models/{model_name}", [model_name, "Version 1", *([alias] if alias else [])]),
        "gx-data-docs": ((docs / "examples" / "index.html").as_uri(), ["examples", "family_mix"]),
        # the drift suite's site (a page naming the reason when the check was skipped: a first harvest)
        "gx-data-docs-drift": ((docs / "drift" / "index.html").as_uri(), ["drift"]),
    }
