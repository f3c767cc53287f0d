"""The trace codec: a compact, lossless text language for MetaSchedule traces (docs/codec.md).

Public API (other stages code against exactly this):

- ``encode(trace_json, context=None) -> str``: ``[insts, decisions]`` of ``trace.as_json()`` (IntImm as int)
  -> script.  With ``context=PostprocContext(mod, target)`` the post-processing section is written
  ``post *`` when the target's post-processors re-derive it exactly.
- ``decode(text, context=None) -> list``: script -> trace JSON, equal to the encoded one;
  ``encode(decode(t)) == t``.  A ``post *`` script needs the context it was encoded with.
- ``apply(text, sch, context=None)``: apply a script to a fresh ``tvm.s_tir.Schedule`` of its workload.
- errors: ``CodecError`` > ``DecodeError`` (line, column, expected, found), ``EncodeError``, ``ApplyError``.
"""
from little_dragon.codec.apply import apply
from little_dragon.codec.canonical import canonical_json
from little_dragon.codec.errors import ApplyError, CodecError, DecodeError, EncodeError
from little_dragon.codec.postproc import PostprocContext, SyntaxOnlyContext
from little_dragon.codec.script import decode, encode

__all__ = ["encode", "decode", "apply", "canonical_json", "CodecError", "DecodeError", "EncodeError",
           "ApplyError", "PostprocContext", "SyntaxOnlyContext"]
