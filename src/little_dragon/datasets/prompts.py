"""The prompt template of both tasks (documented in the dataset card).

    ### Task: construction                ### Task: refinement
    ### Target: {"kind": "llvm", ...}      ### Target: {"kind": "llvm", ...}
    ### Workload:                          ### Workload:
    <TVMScript of the kernel>              <TVMScript of the kernel>
    ### Script:                            ### Previous script:
                                           <codec text of the starting trace>
                                           ### Script:

The completion is the codec text of the trace that follows ``### Script:``.  The target is the harvest's
target dict as compact JSON with sorted keys, so one model can serve several targets.  The kernel is the
workload's canonical TVMScript (``full``) or, for prompts that would not fit the context, a ``compact``
rendering of the same text: comment lines dropped and each 4-space indent level narrowed to one space.
The compact text is still TVMScript that parses to the same module (tests check it).
"""
from __future__ import annotations

import json
from typing import Any, Literal

Rendering = Literal["full", "compact"]
RENDERINGS: tuple[Rendering, ...] = ("full", "compact")


def render_target(target: dict[str, Any] | str) -> str:
    """Compact JSON of the target dict, keys sorted (``target`` columns hold the same JSON)."""
    d = json.loads(target) if isinstance(target, str) else target
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def render_kernel(tvmscript: str, rendering: Rendering = "full") -> str:
    if rendering == "full":
        return tvmscript.strip()
    if rendering != "compact":
        raise ValueError(f"unknown kernel rendering {rendering!r}; known: {RENDERINGS}")
    lines = []
    for line in tvmscript.splitlines():
        body = line.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(body)
        lines.append(" " * (indent // 4) + " " * (indent % 4) + body)
    return "\n".join(lines)


def construction_prompt(tvmscript: str, target: dict[str, Any] | str, rendering: Rendering = "full") -> str:
    return (f"### Task: construction\n### Target: {render_target(target)}\n"
            f"### Workload:\n{render_kernel(tvmscript, rendering)}\n### Script:\n")


def refinement_prompt(tvmscript: str, target: dict[str, Any] | str, previous_script: str,
                      rendering: Rendering = "full") -> str:
    return (f"### Task: refinement\n### Target: {render_target(target)}\n"
            f"### Workload:\n{render_kernel(tvmscript, rendering)}\n"
            f"### Previous script:\n{previous_script.strip()}\n### Script:\n")


def prompt_for(task: str, tvmscript: str, target: dict[str, Any] | str, previous_script: str = "",
               rendering: Rendering = "full") -> str:
    if task == "construction":
        return construction_prompt(tvmscript, target, rendering)
    if task == "refinement":
        return refinement_prompt(tvmscript, target, previous_script, rendering)
    raise ValueError(f"unknown task {task!r}")
