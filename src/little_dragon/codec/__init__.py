"""The trace codec: a compact, lossless text language for MetaSchedule traces (docs/codec.md).

Public API (other stages code against exactly this):

- ``encode(trace_json) -> str``: ``[insts, decisions]`` of ``trace.as_json()`` (IntImm as int) -> script.
- ``decode(text) -> list``: script -> trace JSON, equal to the encoded one; ``encode(decode(t)) == t``.
- ``apply(text, sch)``: apply a script to a fresh ``tvm.s_tir.Schedule`` of its workload.
- errors: ``CodecError`` > ``DecodeError`` (line, column, expected, found), ``EncodeError``, ``ApplyError``.
"""
from little_dragon.codec.apply import apply
from little_dragon.codec.canonical import canonical_json
from little_dragon.codec.errors import ApplyError, CodecError, DecodeError, EncodeError
from little_dragon.codec.script import decode, encode

__all__ = ["encode", "decode", "apply", "canonical_json", "CodecError", "DecodeError", "EncodeError",
           "ApplyError"]
