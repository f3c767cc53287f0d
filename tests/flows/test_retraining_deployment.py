"""Scheduled retraining as a user runs it: `dragon services up` brings up a real Prefect server, a real MLflow
server and the served `scheduled-retraining` deployment (cron from params.yaml); a run of the `smoke` profile is
triggered through the Prefect REST API and must finish COMPLETED; its runs are visible through the MLflow server,
a model version is registered, `dvc status` has nothing left to do, and stopping the services stops them all.
No ephemeral-server shortcuts: every call below goes over HTTP to the servers the launcher started."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml


FLOW = "little-dragon-pipeline"


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=20, follow_redirects=True).status_code == 200
    except httpx.HTTPError:
        return False


def _deployment(services) -> dict:
    r = httpx.get(f"{services.api}/deployments/name/{FLOW}/scheduled-retraining", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _wait_final(services, run_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = httpx.get(f"{services.api}/flow_runs/{run_id}", timeout=10).json()
        if run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run
        time.sleep(3)
    pytest.fail(f"flow run {run_id} not finished in {timeout_s:.0f} s\n{services.log_tail()}")


@pytest.fixture(scope="session")
def completed_run(services) -> dict:
    """The deployment triggered once through the API with the smoke profile, finished COMPLETED."""
    dep = _deployment(services)
    r = httpx.post(f"{services.api}/deployments/{dep['id']}/create_flow_run",
                   json={"parameters": {"profile": "smoke"}}, timeout=30)
    assert r.status_code in (200, 201), r.text
    run = _wait_final(services, r.json()["id"], 900)
    if run["state"]["type"] != "COMPLETED":
        pytest.fail(f"flow run {run['name']} ended {run['state']['type']}: {run['state'].get('message')}\n"
                    f"{services.log_tail()}")
    return run


def test_deployment_is_served_with_the_cron_from_params(services, project):
    dep = _deployment(services)
    cron = yaml.safe_load((project / "params.yaml").read_text())["retraining"]["cron"]
    schedules = [s["schedule"].get("cron") for s in dep["schedules"]]
    assert schedules == [cron], dep["schedules"]
    assert dep["parameters"]["model"] == "champion"
    assert http_ok(f"{services.prefect}/") and http_ok(f"{services.mlflow}/")  # the two UIs


def test_triggered_run_completes_registers_a_model_and_leaves_dvc_clean(completed_run, services, project):
    from mlflow import MlflowClient

    # every stage of dvc.yaml ran as a task of this flow run, named after its stage
    tasks = httpx.post(f"{services.api}/task_runs/filter", timeout=30,
                       json={"flow_runs": {"id": {"any_": [completed_run["id"]]}}, "limit": 200}).json()
    stages = list(yaml.safe_load((project / "dvc.yaml").read_text())["stages"])
    ran = {t["name"] for t in tasks if t["state"]["type"] == "COMPLETED"}
    assert set(stages) <= ran, f"stages without a completed task run: {set(stages) - ran}"

    # the run is visible through the MLflow server: one retraining run tagged with the flow run, listing the
    # stage runs; the SFT stage registered a version of the project model
    client = MlflowClient(tracking_uri=services.mlflow)
    exp = client.get_experiment_by_name("little-dragon/retraining")
    runs = client.search_runs([exp.experiment_id], f"tags.`prefect.flow_run_id` = '{completed_run['id']}'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    stage_runs = [client.get_run(i) for i in runs[0].data.tags["stage_runs"].split(",")]
    assert {"sft", "drift", "harvest"} <= {r.data.tags.get("stage") for r in stage_runs}
    versions = client.search_model_versions("name = 'little-dragon'")
    assert versions, "no registered model version after the run"
    if "promote" in stages:  # the gate decided, with its evidence, whichever way
        history = (project / "monitoring" / "champion-history.jsonl").read_text().splitlines()
        assert history and "promoted" in json.loads(history[-1])

    # the flow recorded every stage in dvc.lock: `dvc repro` would have nothing to redo
    out = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=project, env=services.env,
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout or "{}") == {}, out.stdout


def _chromium_or_skip() -> None:
    from little_dragon.ops.browser import chromium_path

    if chromium_path() is None:
        # .ci/run installs Debian's chromium; only a failed apt-get leaves it missing (it says so there)
        pytest.skip("no Chromium: `apt-get install chromium` failed or was not run (see .ci/run output)")


def test_ui_pages_in_headless_chromium(completed_run, services, project):
    """The pages a user opens, rendered by a real browser from the real servers: the deployment with its
    schedule and the completed run, the registered model with its versions, the Data Docs with their suites.
    With DRAGON_UI_SCREENSHOTS=<dir> the pictures are saved there (results/ui/ is made this way)."""
    import os
    from pathlib import Path

    from little_dragon.ops.browser import PAGE_SETTLE_S, check_page, decided_version, ui_pages

    _chromium_or_skip()
    from mlflow import MlflowClient

    # the page must show @champion whenever the promotion gate set it (a 4-step smoke model usually writes
    # no correct kernel, and the gate rightly refuses it as a first champion)
    client = MlflowClient(tracking_uri=services.mlflow)
    aliases = client.get_registered_model("little-dragon").aliases
    alias = "champion" if "champion" in aliases else None
    # the version the gate decided on: its page shows the sealed metrics and the decision
    version = decided_version(client)
    assert version is not None, "no model version carries the promotion gate's decision"
    pages = ui_pages(services.prefect, services.mlflow, project, _deployment(services), completed_run, alias=alias,
                     version=version)
    shots = os.environ.get("DRAGON_UI_SCREENSHOTS")
    missing = {}
    for name, (url, needles) in pages.items():
        if url.startswith("file:") and not Path(url[len("file://"):]).exists():
            missing[name] = "page file absent"
            continue
        # a real browser over DevTools, waiting (real time) until the single-page apps have fetched their data
        # and show the words; `--dump-dom` with a virtual-time budget dumped the Prefect UI before its API
        # answered on a loaded machine
        lost = check_page(url, needles, Path(shots) / f"{name}.png" if shots else None, timeout_s=120,
                          settle_s=PAGE_SETTLE_S.get(name, 2.0))
        if lost:
            missing[name] = f"{url}: {lost} not on the rendered page"
    assert not missing, missing


def test_stopping_the_services_stops_everything(completed_run, services):
    from little_dragon.prefect_api import free_port  # noqa: F401  (imported before the processes go away)

    state = json.loads((services.root / ".services" / "services.json").read_text())
    services.proc.send_signal(signal.SIGINT)  # Ctrl-C
    services.proc.wait(timeout=90)
    for name, pid in state["pids"].items():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                import os

                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"{name} (pid {pid}) still running after `dragon services up` stopped")
    assert not http_ok(f"{services.api}/health") and not http_ok(f"{services.mlflow}/health")
    assert not (services.root / ".services" / "services.json").exists()
