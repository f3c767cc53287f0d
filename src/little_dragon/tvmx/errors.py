"""A TVM error as one line: its type and its last meaningful line (the C++ backtrace before it is noise in a message
that names a script's file, workload and line)."""
from __future__ import annotations

BACKTRACE_PREFIXES = ("File ", "at ", "[bt]", "Stack trace", "#")


def tvm_error_reason(e: BaseException, limit: int = 500) -> str:
    """``Type: last line`` of ``e``'s text, backtrace lines skipped, at most ``limit`` characters."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if not ln.startswith(BACKTRACE_PREFIXES):
            return f"{type(e).__name__}: {ln}"[:limit]
    return type(e).__name__
