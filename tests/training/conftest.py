"""Shared fixtures: small real SFT rows (dataset-template prompts, codec scripts of traces sampled from
MetaSchedule design spaces) and a private MLflow store."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


@pytest.fixture(scope="session")
def jsonl():
    return write_jsonl


@pytest.fixture(scope="session")
def standin_rows() -> list[dict]:
    from little_dragon.training.standin import make_rows

    return make_rows(n_per_workload=6, seed=0)


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory):
    """A temporary sqlite tracking store; artifacts land beside it (cwd is switched by the tests using it)."""
    root = tmp_path_factory.mktemp("mlflow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    mp.delenv("DRAGON_NO_MLFLOW", raising=False)
    mp.chdir(root)  # MLflow's default artifact location (./mlruns) is relative to the working directory
    yield root
    mp.undo()
