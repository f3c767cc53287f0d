"""The retraining flow's pieces that need no server: stage order from dvc.yaml, profiles written into
params.yaml with comments kept, every profile typed by the params dataclasses, a failed stage named with what
to do."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from flows import pipeline  # noqa: E402


def test_stages_follow_dvc_yaml_order():
    names = list(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"])
    assert list(pipeline.dvc_stages()) == names
    assert names.index("drift") < names.index("sft")  # a drifted batch stops before training
    for stage in pipeline.dvc_stages().values():
        assert pipeline.stage_argv(stage)  # every stage is one `dragon` call the flow can run in-process


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / "configs" / "profiles").glob("*.yaml")))
def test_every_profile_is_typed_by_the_params_dataclasses(profile, tmp_path):
    from little_dragon.config import load_section

    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    overlay = pipeline.profile_overlay(profile)
    assert pipeline.apply_params(overlay, params)
    for section in overlay:  # an unknown or misspelt key is a ConfigError naming it
        load_section(section, path=params)


def test_profile_is_written_into_params_keeping_comments(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("# top comment\nsft:\n  max_steps: 2400   # why 2400\n  batch_size: 8\nharvest:\n  seed: 0\n")
    assert pipeline.apply_params({"sft": {"max_steps": 4}, "harvest": {"target": {"kind": "llvm"}}}, params)
    text = params.read_text()
    assert "# top comment" in text and "# why 2400" in text
    data = yaml.safe_load(text)
    assert data["sft"] == {"max_steps": 4, "batch_size": 8} and data["harvest"]["target"] == {"kind": "llvm"}
    assert not pipeline.apply_params({"sft": {"max_steps": 4}}, params)  # unchanged: file left alone


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ValueError, match="smoke"):
        pipeline.profile_overlay("no-such-profile")


def test_a_failed_stage_is_named_with_what_to_do(tmp_path, monkeypatch):
    from prefect.logging import disable_run_logger

    monkeypatch.setenv("DRAGON_NO_MLFLOW", "1")

    with disable_run_logger(), pytest.raises(pipeline.StageFailed) as e:
        pipeline.run_stage.fn("drift", ["quality", "drift", "--set", f"train={tmp_path}/absent.parquet"],
                              dvc_commit=False, force=True)
    msg = str(e.value)
    assert msg.startswith("stage 'drift' failed") and "What to do" in msg and "drift.enforce" in msg
