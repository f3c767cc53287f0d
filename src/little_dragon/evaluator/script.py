"""Scripts as text <-> trace JSON: the one place that calls the codec.

Until ``little_dragon.codec`` provides ``decode``/``encode``, a script is the JSON text of the trace
(``[insts, decisions]``, as in the harvest's ``trace_json`` column)."""
from __future__ import annotations

import json
from typing import Any


class ScriptDecodeError(ValueError):
    """A script that does not decode; ``str()`` names line and column when the codec knows them."""


def _codec():
    try:
        from little_dragon import codec

        return codec if hasattr(codec, "decode") and hasattr(codec, "encode") else None
    except ImportError:
        return None


def decode_script(text: str) -> list:
    """Script text -> ``[insts, decisions]`` (plain JSON values)."""
    return decode_script_lines(text)[0]


def decode_script_lines(text: str) -> tuple[list, list[int] | None]:
    """Script text -> (``[insts, decisions]``, the script line of each instruction, when the codec knows)."""
    codec = _codec()
    lines = None
    if codec is not None:
        from little_dragon.codec.script import decode_with_lines

        try:
            # `post *` stands for the target's post-processors, which the worker runs on every schedule
            # anyway (evaluator/replay.py): the trace before it is what gets applied (and cached)
            trace, lines = decode_with_lines(text, codec.SyntaxOnlyContext())
        except Exception as e:  # CodecError subclasses carry line/column/expected/found
            parts = [f"line {getattr(e, 'line', '?')}, column {getattr(e, 'column', '?')}"]
            if getattr(e, "expected", None) is not None:
                parts.append(f"expected {e.expected}")
            if getattr(e, "found", None) is not None:
                parts.append(f"found {e.found!r}")
            raise ScriptDecodeError(f"{type(e).__name__}: {', '.join(parts)}: {e}") from None
    else:
        try:
            trace = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as e:
            raise ScriptDecodeError(f"not a JSON trace: {e}") from None
    if not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list)
            and isinstance(trace[1], list)):
        raise ScriptDecodeError("a trace is [instructions, decisions]")
    return trace, lines


def encode_script(trace_json: list) -> str:
    codec = _codec()
    return codec.encode(trace_json) if codec is not None else canonical_trace(trace_json)


def canonical_trace(trace_json: Any) -> str:
    """The cache's canonical form: compact JSON of the decoded trace (independent of script spelling)."""
    return json.dumps(trace_json, separators=(",", ":"), sort_keys=False)
