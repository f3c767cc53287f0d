"""One set of defaults: every params.yaml section equals its dataclass's defaults, field by field, recursively.

params.yaml is what the pipeline runs; a dataclass default that differs from it makes tests and library
callers run settings the pipeline never uses.  A field the YAML leaves out is fine (it takes the default);
a field with a different value is a failure that names the section, the dotted field and both values.
"""
from __future__ import annotations

import dataclasses
import typing

import pytest

from little_dragon.config import DEFAULT_PARAMS, SECTIONS, load_section, read_params, section_class

# the project's params.yaml itself, whatever $DRAGON_PARAMS an earlier test or the shell points at
PARAMS = DEFAULT_PARAMS


def _defaults(cls: type) -> typing.Any:
    """The dataclass built from its own defaults only (every field must have one)."""
    missing = [f.name for f in dataclasses.fields(cls)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert not missing, f"{cls.__name__}: fields without a default: {missing}"
    return cls()


def _differences(loaded: typing.Any, default: typing.Any, where: str) -> list[str]:
    if dataclasses.is_dataclass(loaded):
        out = []
        for f in dataclasses.fields(loaded):
            out += _differences(getattr(loaded, f.name), getattr(default, f.name), f"{where}.{f.name}")
        return out
    if isinstance(loaded, dict) and isinstance(default, dict):
        out = [f"{where}.{k}: params.yaml {loaded.get(k, '<absent>')!r} != default {default.get(k, '<absent>')!r}"
               for k in sorted(set(loaded) | set(default), key=str)
               if not isinstance(loaded.get(k), dict) and loaded.get(k) != default.get(k)]
        for k in set(loaded) & set(default):
            if isinstance(loaded[k], dict):
                out += _differences(loaded[k], default[k], f"{where}.{k}")
        return out
    if isinstance(loaded, (list, tuple)) and isinstance(default, (list, tuple)):
        return [] if list(loaded) == list(default) else [f"{where}: params.yaml {loaded!r} != default {default!r}"]
    equal = loaded == default or (isinstance(loaded, float) and isinstance(default, float)
                                  and abs(loaded - default) <= 1e-12 * max(abs(loaded), abs(default)))
    return [] if equal else [f"{where}: params.yaml {loaded!r} != default {default!r}"]


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_params_yaml_equals_dataclass_defaults(name):
    cls = section_class(name)
    diffs = _differences(load_section(name, path=PARAMS), _defaults(cls), name)
    assert not diffs, "params.yaml and the dataclass defaults disagree:\n  " + "\n  ".join(diffs)


def test_every_section_is_in_params_yaml():
    """Each typed section is written out in params.yaml (DVC tracks params per stage from the file)."""
    assert sorted(read_params(PARAMS)) == sorted(SECTIONS)


def test_the_checker_sees_a_nested_difference():
    """The comparison is recursive: a changed nested field (sft.model.kind) is reported by its dotted path."""
    cfg = load_section("sft", path=PARAMS, overrides={"model": {"kind": "gguf"}, "tiny": {"hidden_size": 7}})
    diffs = _differences(cfg, _defaults(section_class("sft")), "sft")
    assert any(d.startswith("sft.model.kind:") for d in diffs), diffs
    assert any(d.startswith("sft.tiny.hidden_size:") for d in diffs), diffs
    assert not any(d.startswith("sft.model.path") for d in diffs), diffs


def _absent(cls: type, raw: dict, where: str) -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            out.append(f"{where}.{f.name}")
            continue
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(raw[f.name], dict):
            out += _absent(tp, raw[f.name], f"{where}.{f.name}")
    return out


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_params_yaml_writes_every_field_out(name):
    """A field missing from params.yaml is invisible to DVC (a stage tracks params.yaml keys, not dataclass
    defaults): changing its default in code would not re-run the stage."""
    absent = _absent(section_class(name), read_params(PARAMS).get(name) or {}, name)
    assert not absent, f"params.yaml leaves out {absent}: write them out (value = the dataclass default)"
