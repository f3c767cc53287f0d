"""DVC dependencies correct by construction: each stage's ``deps`` cover exactly the code it imports.

For every ``dvc.yaml`` stage, the command's CLI module (``dragon <command>`` -> ``little_dragon.cli.COMMANDS``)
is followed through every ``little_dragon`` import, transitively (lazy imports inside functions too, and the
``__init__`` of every package on the way, which Python runs on import).  The stage's ``src/`` deps must
cover each of those files (a dep is a file or a folder above it), and every ``src/`` dep must hold at least
one of them.  A missing dep lets ``dvc repro`` reuse a stale output after that code changed; a dead one
re-runs a stage for nothing.  The top-level ``little_dragon/cli.py`` (argument wiring only) is left out.

A CLI module may hold several subcommands (``dragon train sft`` and ``dragon train rl``): the stage's code
starts from the CLI module's top-level imports, its ``add_parser`` and the handler its subcommand sets
(``set_defaults(func=...)``), with the module's functions that handler names, so sft does not depend on
the RL code beside it.
"""
from __future__ import annotations

import ast
import functools
import shlex
from pathlib import Path

import pytest
import yaml

from little_dragon.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
WIRING = {"little_dragon.cli"}  # `dragon` itself: parses argv and dispatches, imports every CLI lazily


def stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def module_file(name: str) -> Path | None:
    p = SRC.joinpath(*name.split("."))
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return None


@functools.lru_cache(maxsize=None)
def direct_imports(name: str) -> frozenset[str]:
    path = module_file(name)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "little_dragon")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "little_dragon":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if module_file(sub) else node.module)
    # importing a.b.c runs a/__init__ and a/b/__init__ first
    parts = name.split(".")
    out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(m for m in out if m != name and module_file(m))


def _imports_in(nodes: list[ast.AST]) -> set[str]:
    out: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.split(".")[0] == "little_dragon")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "little_dragon":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add(sub if module_file(sub) else node.module)
    return {m for m in out if module_file(m)}


def handler_imports(cli_module: str, argv: list[str]) -> set[str]:
    """What running ``dragon *argv`` imports from ``cli_module`` itself: its top-level imports, ``add_parser``
    and the subcommand's handler (plus the module functions that handler names, transitively)."""
    tree = ast.parse(module_file(cli_module).read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    parsers: dict[str, str] = {}   # variable -> subcommand name it was created for
    handlers: dict[str, str] = {}  # subcommand name -> handler function
    for node in ast.walk(funcs["add_parser"]):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "attr", "") == "add_parser" and node.value.args \
                and isinstance(node.value.args[0], ast.Constant) and isinstance(node.targets[0], ast.Name):
            parsers[node.targets[0].id] = node.value.args[0].value
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "set_defaults" \
                and isinstance(node.func.value, ast.Name):
            for kw in node.keywords:
                if kw.arg == "func" and isinstance(kw.value, ast.Name):
                    handlers[parsers.get(node.func.value.id, "")] = kw.value.id
    names = [h for sub, h in handlers.items() if sub in argv] or list(handlers.values())
    todo, used = list(names), {"add_parser"}
    while todo:
        name = todo.pop()
        if name in used or name not in funcs:
            continue
        used.add(name)
        todo.extend(n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs)
    mods = _imports_in(top + [funcs[n] for n in used if n in funcs])
    parts = cli_module.split(".")
    mods.update(m for m in (".".join(parts[:i]) for i in range(1, len(parts))) if module_file(m))
    return mods | {cli_module}


def closure(root: str | set[str]) -> set[str]:
    seen, todo = set(), ([root] if isinstance(root, str) else list(root))
    while todo:
        m = todo.pop()
        if m in seen or m in WIRING:
            continue
        seen.add(m)
        todo.extend(direct_imports(m))
    return seen


def stage_argv(stage: dict) -> list[str]:
    cmd = stage["cmd"] if isinstance(stage["cmd"], str) else " ".join(stage["cmd"])
    argv = shlex.split(cmd)
    assert argv[0] == "dragon", f"stage command is not a `dragon` call: {cmd!r}"
    return argv[1:]


def code_files(stage: dict) -> set[str]:
    argv = stage_argv(stage)
    cli_module = COMMANDS[argv[0]]
    start = handler_imports(cli_module, argv)
    # the CLI module itself is in `start`; follow everything else it leads to
    seen = {cli_module} | closure(start - {cli_module})
    return {module_file(m).relative_to(ROOT).as_posix() for m in seen}


def src_deps(stage: dict) -> list[str]:
    return [d.rstrip("/") for d in stage.get("deps", []) if str(d).startswith("src/")]


def covered(file: str, deps: list[str]) -> bool:
    return any(file == d or file.startswith(d + "/") for d in deps)


@pytest.mark.parametrize("name", sorted(stages()))
def test_stage_deps_cover_the_code_it_imports(name):
    stage = stages()[name]
    deps = src_deps(stage)
    missing = sorted(f for f in code_files(stage) if not covered(f, deps))
    assert not missing, (f"dvc.yaml stage {name!r} imports code its deps leave out (dvc repro would reuse a "
                         f"stale output after it changes): {missing}")


@pytest.mark.parametrize("name", sorted(stages()))
def test_stage_has_no_dead_code_deps(name):
    stage = stages()[name]
    files = code_files(stage)
    dead = [d for d in src_deps(stage) if not any(covered(f, [d]) for f in files)]
    assert not dead, f"dvc.yaml stage {name!r} depends on code it never imports: {dead}"
    for d in src_deps(stage):
        assert (ROOT / d).exists(), f"dvc.yaml stage {name!r}: dep {d} does not exist"


def test_the_closure_follows_lazy_imports_and_packages():
    """The derivation sees an import inside a function and the package __init__ files on the way."""
    files = code_files(stages()["harvest"])
    assert "src/little_dragon/harvest/stage.py" in files  # imported inside main()
    assert "src/little_dragon/harvest/__init__.py" in files and "src/little_dragon/__init__.py" in files
    assert "src/little_dragon/codec/canonical.py" in files  # harvest records canonical trace JSON


def test_a_subcommand_depends_on_its_own_handler_only():
    """`dragon train sft` follows main (SFT), not the handler of another subcommand in the same module."""
    sft = code_files({"cmd": "dragon train sft"})
    assert "src/little_dragon/training/sft.py" in sft
    assert "src/little_dragon/training/cli.py" in sft
    assert not any(f.startswith("src/little_dragon/evaluator/") for f in sft), sorted(sft)
