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


def test_set_override_changes_one_nested_field_and_keeps_its_siblings():
    """`--set target.kind=cuda` used to replace the whole harvest target (num-cores was lost)."""
    from little_dragon.config import parse_overrides

    base = load_section("harvest")
    cfg = load_section("harvest", overrides=["target.kind=cuda", "builder_workers=16"])
    assert cfg.target == {**base.target, "kind": "cuda"} and "num-cores" in cfg.target
    assert cfg.builder_workers == 16 and cfg.trials_per_workload == base.trials_per_workload
    sft = load_section("sft", overrides=parse_overrides(["model.kind=gguf", "tiny.hidden_size=64"]))
    assert sft.model.kind == "gguf" and sft.model.extend_tokenizer == load_section("sft").model.extend_tokenizer
    assert sft.tiny.hidden_size == 64 and sft.tiny.num_layers == load_section("sft").tiny.num_layers
    assert parse_overrides(["a.b=1", "a.c=[1, 2]", "d=text"]) == {"a": {"b": 1, "c": [1, 2]}, "d": "text"}


@pytest.mark.parametrize("bad", ["novalue", "=1", "a..b=1"])
def test_malformed_set_is_a_config_error(bad):
    from little_dragon.config import parse_overrides

    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides([bad])


def test_set_on_an_unknown_nested_key_names_it():
    with pytest.raises(ConfigError, match="trgt"):
        load_section("harvest", overrides=["trgt.kind=cuda"])
    with pytest.raises(ConfigError, match="knd"):
        load_section("sft", overrides=["model.knd=gguf"])


def test_every_stage_cli_takes_the_shared_set_option():
    """Every stage subcommand accepts `--set` (the one helper, config.add_set_option)."""
    parser = cli.build_parser()
    for argv in (["workloads"], ["harvest"], ["datasets", "build"], ["quality", "check", "--suite", "harvest"],
                 ["train", "sft"], ["codec", "validate", "--harvest", "h", "--out", "o"]):
        args = parser.parse_args([*argv, "--set", "x.y=1"])
        assert args.set == ["x.y=1"], argv


def test_harvest_command_line_merges_into_the_target():
    """`dragon harvest --set target.kind=cuda` keeps the other target fields; `--target` replaces the whole
    target and a `--set target.KEY` still applies on top of it; flags and --set reach the config."""
    from little_dragon.harvest.cli import harvest_config

    parser = cli.build_parser()
    base = load_section("harvest")
    cfg = harvest_config(parser.parse_args(["harvest", "--set", "target.kind=cuda", "--trials", "3"]))
    assert cfg.target == {**base.target, "kind": "cuda"} and cfg.trials_per_workload == 3
    cfg = harvest_config(parser.parse_args(["harvest", "--target", "cuda", "--set", "target.arch=sm_80"]))
    assert cfg.target["kind"] == "cuda" and cfg.target["arch"] == "sm_80" and "num-cores" not in cfg.target


def test_free_cores_counts_other_processes_not_our_own():
    """config.FreeCores (torch threads of sft/generation when cpu_threads is 0): our own busy loop does not
    take a core away; another process's does."""
    import os
    import time

    from little_dragon.config import FreeCores, free_cpu_cores

    cores = len(os.sched_getaffinity(0))
    assert 1 <= free_cpu_cores(0.2) <= cores
    probe = FreeCores()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # our own work
        pass
    own_free, _ = probe.measure()
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 3\nwhile time.time() < t: pass"])
    try:
        time.sleep(1.5)
        busy_free, others = probe.measure()
    finally:
        spin.kill()
        spin.wait()
    assert others >= 0.5 and busy_free <= max(1, cores - 1)
    assert own_free >= busy_free  # (on a loaded machine both may be 1)
