"""Typed access to ``params.yaml``.

Every stage owns one top-level section of ``params.yaml`` and one dataclass that types it (fields carry
their help text in ``metadata["help"]``).  ``load_section`` turns the YAML mapping into that dataclass and
rejects unknown keys, so a typo in ``params.yaml`` is an error that names the section and the key, never a
silently ignored setting.  ``SECTIONS`` lists every section so one test can parse them all.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import time
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PARAMS = PROJECT_ROOT / "params.yaml"

# section name in params.yaml -> "module:DataclassName" (imported lazily: TVM/torch stay out of start-up)
SECTIONS: dict[str, str] = {
    "project": "little_dragon.config:ProjectConfig",
    "timing": "little_dragon.tvmx.timing:TimingConfig",
    "codec": "little_dragon.codec.validate:CodecConfig",
    "evaluator": "little_dragon.evaluator.config:EvaluatorConfig",
    "workloads": "little_dragon.workloads.config:WorkloadsConfig",
    "harvest": "little_dragon.harvest.config:HarvestConfig",
    "datasets": "little_dragon.datasets.config:DatasetsConfig",
    "quality": "little_dragon.quality.config:QualityConfig",
    "drift": "little_dragon.quality.drift_config:DriftConfig",
    "retraining": "little_dragon.ops.config:RetrainingConfig",
    "sft": "little_dragon.training.config:SFTConfig",
    "generation": "little_dragon.generation.config:GenerationConfig",
    "evaluation": "little_dragon.evaluation.eval_config:EvaluationConfig",
    "promotion": "little_dragon.evaluation.eval_config:PromotionConfig",
    "rl": "little_dragon.training.rl_config:RLConfig",
}


class ConfigError(ValueError):
    """A params.yaml section that does not match its dataclass."""


def field(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING):
    """A dataclass field with help text (shown by ``dragon params --explain``)."""
    kw: dict[str, Any] = {"metadata": {"help": help}}
    if default_factory is not dataclasses.MISSING:
        kw["default_factory"] = default_factory
    else:
        kw["default"] = default
    return dataclasses.field(**kw)


@dataclasses.dataclass(frozen=True)
class ProjectConfig:
    model_name: str = field("little-dragon", help="Name of the model in the MLflow Model Registry.")


def params_path() -> Path:
    return Path(os.environ.get("DRAGON_PARAMS", DEFAULT_PARAMS))


def read_params(path: str | os.PathLike | None = None) -> dict[str, Any]:
    p = Path(path) if path else params_path()
    try:
        with open(p) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError as e:
        raise ConfigError(f"{p}: params file not found") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping of sections")
    return data


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}: {value!r} matches none of {tp}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"{where}: expected int, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def section_class(name: str) -> type:
    try:
        spec = SECTIONS[name]
    except KeyError as e:
        raise ConfigError(f"params.yaml: no section named {name!r}; known: {sorted(SECTIONS)}") from e
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` laid over it key by key: nested mappings merge, anything else replaces.

    ``deep_merge({"target": {"kind": "llvm", "num-cores": 2}}, {"target": {"kind": "cuda"}})`` keeps
    ``num-cores``; the inputs are not modified."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a nested dict (VALUE as JSON when it parses, else a string).

    A dotted key nests: ``model.kind=gguf`` -> ``{"model": {"kind": "gguf"}}``; ``load_section`` deep-merges
    the result over the params.yaml section, so it changes that one field and keeps its siblings."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or "" in key.split("."):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (KEY may be dotted: a.b=1)")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} was already set to a value, not a section")
        if isinstance(node.get(leaf), dict) and isinstance(parsed, dict):
            node[leaf] = deep_merge(node[leaf], parsed)
        else:
            node[leaf] = parsed
    return out


def add_set_option(parser: Any, section: str) -> None:
    """The shared ``--set KEY=VALUE`` option of every stage CLI (read it with ``load_section(..., args.set)``)."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set",
                        help=f"override a field of params.yaml section `{section}` (VALUE parsed as JSON when it "
                             f"parses; dotted keys change one nested field: --set a.b=1); repeatable")


def load_section(name: str, cls: type[T] | None = None, path: str | os.PathLike | None = None,
                 overrides: dict[str, Any] | list[str] | None = None) -> T:
    """Read section ``name`` of params.yaml as its dataclass (missing keys take the dataclass defaults).

    ``overrides`` (a dict, or the raw ``--set`` items) are deep-merged over the section first."""
    cls = cls or section_class(name)
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    raw = deep_merge(dict(read_params(path).get(name) or {}), overrides or {})
    return from_dict(cls, raw, f"{path or params_path()}:{name}")



def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def flat_params(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten a config dataclass into ``a.b.c -> value`` for MLflow params."""
    out: dict[str, Any] = {}
    for k, v in to_dict(cfg).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out[f"{key}.{k2}"] = v2
        else:
            out[key] = v
    return out


def _cpu_jiffies() -> tuple[int, int]:
    """(busy jiffies of all CPUs, this process's own: user + system over all its threads) from /proc."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    return sum(v) - v[3] - v[4], int(own[11]) + int(own[12])


class FreeCores:
    """The cores other processes leave free, measured over a window: torch threads for a CPU stage
    (``sft.cpu_threads`` / ``generation.cpu_threads`` 0).  On the shared 2-core machine two torch threads ran
    a tiny-model step 4x slower than one while other jobs took a core (each op waits for the descheduled
    thread), yet faster on a free machine.  A quarter core of others' work already counts as taken."""

    def __init__(self) -> None:
        self.cores = len(os.sched_getaffinity(0))
        self._hz = os.sysconf("SC_CLK_TCK")
        self._mark = (time.monotonic(), *_cpu_jiffies())

    def seconds(self) -> float:
        return time.monotonic() - self._mark[0]

    def measure(self) -> tuple[int, float]:
        """(free cores, at least 1; cores other processes used) since the last call (or construction)."""
        now, busy, own = time.monotonic(), *_cpu_jiffies()
        t0, busy0, own0 = self._mark
        self._mark = (now, busy, own)
        others = max(0.0, ((busy - busy0) - (own - own0)) / self._hz / max(now - t0, 1e-3))
        return max(1, min(self.cores, self.cores - int(others + 0.75))), others


def free_cpu_cores(window_s: float = 1.0) -> int:
    """Cores other processes leave free over the next ``window_s`` seconds (at least 1); see ``FreeCores``."""
    probe = FreeCores()
    time.sleep(window_s)
    return probe.measure()[0]

