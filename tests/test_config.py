"""Every params.yaml section parses into its typed config; every CLI subcommand wires up."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from little_dragon import cli
from little_dragon.config import SECTIONS, ConfigError, load_section, read_params


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_every_section_parses_and_every_field_has_help(name):
    cfg = load_section(name)
    assert dataclasses.is_dataclass(cfg)
    for f in dataclasses.fields(cfg):
        assert f.metadata.get("help"), f"{name}.{f.name} has no help text"


def test_params_yaml_has_no_section_without_a_config():
    assert set(read_params()) <= set(SECTIONS), "params.yaml section without a typed config"


def test_unknown_key_is_an_error_naming_section_and_key(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("harvest:\n  trials_per_workload: 4\n  trails: 3\n")
    with pytest.raises(ConfigError, match=r"harvest.*unknown key.*trails"):
        load_section("harvest", path=p)


def test_wrong_type_is_an_error(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("harvest:\n  trials_per_workload: many\n")
    with pytest.raises(ConfigError, match="trials_per_workload"):
        load_section("harvest", path=p)


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_subcommand_has_help(command):
    out = subprocess.run([sys.executable, "-m", "little_dragon.cli", command, "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: dragon" in out.stdout
