"""``grammar_line.state_key`` is the line grammars' cache key: two states with one key share one compiled grammar, so
every fact of ``ScheduleState`` a grammar reads must be in it. Session 37 added ``reads_written`` (the consumer-list
rule of `cread`) without it: a state differing only there would have been masked by another state's grammar.
"""
from __future__ import annotations

import dataclasses
import types
import typing

from little_dragon.generation.constrain_state import ScheduleState
from little_dragon.generation.grammar_line import state_key


def _sample(tp, n: int):
    """A value of type ``tp`` made from ``n`` (different ``n``, different values)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return bool(n % 2)
    if tp is int:
        return n
    if tp is str:
        return f"x{n}"
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)), n)
    if origin is frozenset:
        return frozenset({_sample(args[0], n)})
    if origin is tuple:
        return (_sample(args[0], n),)
    if origin is list:
        return [_sample(args[0], n)]
    if origin is dict:
        return {_sample(args[0], n): _sample(args[1], n)}
    raise AssertionError(f"no sample of {tp}")


def test_every_fact_of_a_state_is_in_its_grammar_key():
    """Changing any one field of a state changes its key."""
    hints = typing.get_type_hints(ScheduleState)
    base = ScheduleState({}, {}, 0, [], {}, {}, {}, {}, {}, {})
    missing = []
    for f in dataclasses.fields(ScheduleState):
        value = getattr(base, f.name)
        other = next(v for v in (_sample(hints[f.name], 1), _sample(hints[f.name], 2)) if v != value)
        if state_key(dataclasses.replace(base, **{f.name: other})) == state_key(base):
            missing.append(f.name)
    assert missing == []
