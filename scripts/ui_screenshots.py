"""Screenshots of the UIs as a user sees them (results/ui/): `dragon services up` in a project that has run the
scheduled-retraining deployment, then headless Chromium over the pages of ``ops.browser.ui_pages``.

    python scripts/ui_screenshots.py PROJECT_DIR [OUT_DIR=results/ui]

PROJECT_DIR is a project (a clone, or the copy tests/flows makes) whose Prefect database holds a completed
run of the deployment and whose MLflow store holds the registered model. Each page is also checked for the
words it must show; a page that lacks them is reported and the script exits 1."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


# the registered model's versions table runs past one screen: tall enough for the champion's row too
PAGE_SIZE = {"mlflow-registered-model": (1440, 1900)}


def main(argv: list[str]) -> int:
    project = Path(argv[0]).resolve()
    out = Path(argv[1] if len(argv) > 1 else "results/ui").resolve()
    sys.path.insert(0, str(project / "src"))
    from little_dragon.ops.browser import PAGE_SETTLE_S, check_page, decided_version, ui_pages
    from little_dragon.prefect_api import free_port

    pp, mp = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env.update(PYTHONPATH=f"{project / 'src'}{os.pathsep}{project}", PREFECT_HOME=str(project / ".prefect"))
    log = project / "ui-screenshots-services.log"
    proc = subprocess.Popen([sys.executable, "-m", "little_dragon.cli", "services", "up", "--set",
                             f"prefect_port={pp}", "--set", f"mlflow_port={mp}"], cwd=project, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while "Ctrl-C" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
                return 1
            time.sleep(1)
        api = f"http://127.0.0.1:{pp}/api"
        dep = httpx.get(f"{api}/deployments/name/little-dragon-pipeline/scheduled-retraining", timeout=30).json()
        runs = httpx.post(f"{api}/flow_runs/filter", timeout=30, json={
            "deployments": {"id": {"any_": [dep["id"]]}}, "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "sort": "START_TIME_DESC", "limit": 1}).json()
        if not runs:
            print("no completed run of the deployment in this project's Prefect database", file=sys.stderr)
            return 1
        bad = {}
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{mp}")
        aliases = client.get_registered_model("little-dragon").aliases
        version = decided_version(client)
        print(f"little-dragon aliases: {aliases or 'none'}; version shown: {version}")
        for name, (url, words) in ui_pages(f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{mp}", project, dep,
                                           runs[0], alias="champion" if "champion" in aliases else None,
                                           version=version).items():
            path = out / f"{name}.png"
            # the picture is taken once the page shows its words
            lost = check_page(url, words, path, timeout_s=180, settle_s=PAGE_SETTLE_S.get(name, 2.0),
                              size=PAGE_SIZE.get(name, (1440, 1000)))
            if lost:
                bad[name] = lost
            print(f"{path}  {url}  {'ok' if not lost else f'MISSING {lost}'}")
        return 1 if bad else 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
