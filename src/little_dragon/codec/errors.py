"""The codec's errors: every one says where (line, column, instruction) and what went wrong."""
from __future__ import annotations


class CodecError(Exception):
    """Base class of the codec's errors; ``line``/``column`` are 1-based (0 when not about a script position)."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0, expected: str = "", found: str = ""):
        self.message, self.line, self.column, self.expected, self.found = message, line, column, expected, found
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line else ""
        detail = ""
        if self.expected or self.found:
            detail = f" (expected {self.expected or '?'}, found {self.found or '?'})"
        return f"{where}{self.message}{detail}"


class DecodeError(CodecError):
    """A script that does not parse or does not make sense as a trace (undefined variable, bad decision...)."""


class EncodeError(CodecError):
    """A trace the codec cannot represent exactly (unknown instruction kind or attribute, odd value)."""

    def __init__(self, message: str, *, inst_index: int | None = None, kind: str = "", **kw):
        self.inst_index, self.kind = inst_index, kind
        if inst_index is not None:
            message = f"instruction {inst_index} ({kind}): {message}"
        super().__init__(message, **kw)


class ApplyError(CodecError):
    """A script that decodes but fails to apply to the schedule; names the instruction, its line and why."""

    def __init__(self, message: str, *, line: int, instruction: str, reason: str):
        self.instruction, self.reason = instruction, reason
        super().__init__(message, line=line, column=1, expected="an instruction that applies", found=instruction)
