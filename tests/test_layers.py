"""The layer order, enforced: a module may import only from its own layer or the layers below it.

The order (docs/stages.md, "Layers"), lowest first:

    foundations  config, errors, atomic, progress, tracking, tokenizer, prefect_api (and the package itself)
    tvmx         tvmx, sandbox: TVM targets, builds, timing; the process sandbox
    codec        the trace language
    workloads    workload generation and the store
    harvest      MetaSchedule tuning
    evaluator    the sandboxed kernel evaluator
    datasets     example sets, splits, the sealed fence, row validity
    quality      Great Expectations gates
    training     SFT, RL (training/rl_*)
    generation   generation, evaluation: use a trained model
    stages       every ``cli`` module (and ``little_dragon.cli``), flows, monitoring, ops (scheduling, services)

A stage's library function (``<package>/stage.py``) sits in its package's layer; its CLI (``<package>/cli.py``)
is a thin script in the top layer.  Every import counts, also one inside a function (a lazy import is
still a dependency).  A package missing from ``LAYERS`` fails the test: declare where it sits.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "little_dragon"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("little_dragon", "config", "errors", "atomic", "progress", "tracking", "tokenizer",
                     "prefect_api", "script_budget")),
    ("tvmx", ("tvmx", "sandbox")),
    ("codec", ("codec",)),
    ("workloads", ("workloads",)),
    ("harvest", ("harvest",)),
    ("evaluator", ("evaluator",)),
    ("datasets", ("datasets",)),
    ("quality", ("quality",)),
    ("training", ("training", "rl")),
    ("generation", ("generation", "evaluation")),
    ("stages", ("cli", "params_cli", "flows", "monitoring", "ops")),
]
RANK = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
TOP = len(LAYERS) - 1

# Known violations, each with its reason; an entry that no longer occurs fails the test (remove it then).
KNOWN: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    """``little_dragon.codec.script`` -> the codec layer; any ``*.cli`` module -> the top layer."""
    parts = module.split(".")
    if parts[-1] == "cli" or parts[-1].endswith("_cli"):
        return TOP
    key = parts[1] if len(parts) > 1 else "little_dragon"
    if key not in RANK:
        raise KeyError(key)
    return RANK[key]


def imports_of(path: Path) -> set[str]:
    """Every ``little_dragon`` module ``path`` imports, anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "little_dragon")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; write the absolute module")
            if not node.module or node.module.split(".")[0] != "little_dragon":
                continue
            for a in node.names:  # `from little_dragon import codec` imports the module little_dragon.codec
                sub = f"{node.module}.{a.name}"
                out.add(sub if _is_module(sub) else node.module)
    return out


def _is_module(name: str) -> bool:
    p = SRC.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def all_modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def violations() -> list[tuple[str, str, str]]:
    found = []
    for path in all_modules():
        mod = module_name(path)
        for imp in sorted(imports_of(path)):
            if layer_of(imp) > layer_of(mod):
                found.append((mod, imp, f"{LAYERS[layer_of(mod)][0]} imports {LAYERS[layer_of(imp)][0]}"))
    return found


def test_every_package_has_a_declared_layer():
    undeclared = set()
    for path in all_modules():
        for mod in (module_name(path), *imports_of(path)):
            try:
                layer_of(mod)
            except KeyError as e:
                undeclared.add(e.args[0])
    assert not undeclared, (f"packages without a layer: {sorted(undeclared)}; add each to LAYERS in "
                            f"tests/test_layers.py and to docs/stages.md")


def test_imports_follow_the_layer_order():
    found = violations()
    bad = [f"{m} -> {i} ({why})" for m, i, why in found if (m, i) not in KNOWN]
    assert not bad, "imports against the layer order (a module may import only its own layer or lower):\n  " \
        + "\n  ".join(bad)
    stale = sorted(set(KNOWN) - {(m, i) for m, i, _ in found})
    assert not stale, f"KNOWN lists violations that are gone; remove them: {stale}"


def test_no_import_cycle_between_modules():
    """Module-level imports (those run at import time) form no cycle."""
    graph: dict[str, set[str]] = {}
    for path in all_modules():
        tree = ast.parse(path.read_text())
        deps = set()
        for node in tree.body:  # top level only: a lazy import inside a function cannot deadlock start-up
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("little_dragon"):
                deps.update(f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                            for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("little_dragon"))
        graph[module_name(path)] = deps
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in graph.get(m, ()):
            if d == m or d in ("little_dragon", *(k for k in graph if m.startswith(k + ".") and k != m)):
                continue  # a module's own package __init__ is not a cycle partner
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(d):], d]))
            if d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("module, imported, expected", [
    ("little_dragon.codec.tokens", "little_dragon.training.tokenizer", True),
    ("little_dragon.training.sft", "little_dragon.codec", False),
    ("little_dragon.codec.cli", "little_dragon.workloads.store", False),
])
def test_the_rule_itself(module, imported, expected):
    """The checker flags an upward import and allows a downward one (and CLIs may import anything)."""
    assert (layer_of(imported) > layer_of(module)) is expected


def test_a_lazy_upward_import_is_found(tmp_path):
    """An import inside a function counts: it is a dependency all the same (this is how codec.tokens once
    reached training.tokenizer)."""
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from little_dragon.training.tokenizer import codec_words\n"
                   "    from little_dragon import codec, config\n")
    found = imports_of(mod)
    assert {"little_dragon.training.tokenizer", "little_dragon.codec", "little_dragon.config"} <= found
    assert any(layer_of(i) > layer_of("little_dragon.codec.tokens") for i in found)
