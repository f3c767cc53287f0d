"""TIR integer expressions (indices and guards of lowered code) computed in Python at given values of their
variables, with TVM's semantics (``Div``/``Mod`` round toward zero, ``FloorDiv``/``FloorMod`` toward minus infinity).

Why: the end-check rules need an index or a guard at concrete loop values where TVM's analyzer does not fold
(``512 & 511``, a fused loop's lowered guard), and the bounds rule tries an index at every value of its variables.
One operator table serves both: ``evaluate`` walks an expression once, ``python_source`` writes it as Python source to
compile once and call at many points.  Variables are keyed by their C object (``handle``): Python wrappers of one TVM
node differ."""
from __future__ import annotations

import operator
from typing import Any


class NotPlain(Exception):
    """An expression that is not plain integer arithmetic over the given variables (a load, a call, a float, another
    variable)."""


def handle(node: Any) -> Any:
    """``node``'s identity (its C object)."""
    return node.__chandle__() if node is not None else None


def tdiv(a: int, b: int) -> int:
    """C's integer division (toward zero), TVM's ``Div`` of integers."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def tmod(a: int, b: int) -> int:
    return a - tdiv(a, b) * b


# TVM node type name -> (its value in Python, its Python source with {a} and {b})
BINARY = {"Add": (operator.add, "({a} + {b})"), "Sub": (operator.sub, "({a} - {b})"),
          "Mul": (operator.mul, "({a} * {b})"), "FloorDiv": (operator.floordiv, "({a} // {b})"),
          "FloorMod": (operator.mod, "({a} % {b})"), "Div": (tdiv, "_tdiv({a}, {b})"), "Mod": (tmod, "_tmod({a}, {b})"),
          "Min": (min, "min({a}, {b})"), "Max": (max, "max({a}, {b})"), "EQ": (operator.eq, "({a} == {b})"),
          "NE": (operator.ne, "({a} != {b})"), "LT": (operator.lt, "({a} < {b})"), "LE": (operator.le, "({a} <= {b})"),
          "GT": (operator.gt, "({a} > {b})"), "GE": (operator.ge, "({a} >= {b})"),
          "And": (lambda a, b: a and b, "({a} and {b})"), "Or": (lambda a, b: a or b, "({a} or {b})"),
          "BitwiseAnd": (operator.and_, "({a} & {b})"), "BitwiseOr": (operator.or_, "({a} | {b})"),
          "BitwiseXor": (operator.xor, "({a} ^ {b})"), "LShift": (operator.lshift, "({a} << {b})"),
          "RShift": (operator.rshift, "({a} >> {b})")}


def op_name(call: Any) -> str:
    """A call's operator without its namespace (TVM 0.27's ``prim.``, older ``tirx.``/``tir.``): "" for a call of no
    named operator."""
    return str(getattr(call.op, "name", "")).rpartition(".")[2]


def lanes(e: Any) -> int:
    """How many lanes ``e``'s type has (1: a scalar; TVM 0.27 names some nodes' type ``ty``)."""
    from tvm import DataType

    return int(DataType(str(getattr(e, "ty", None) or e.dtype)).lanes)


def _integer_cast(e: Any) -> bool:
    """Whether cast ``e`` is to a scalar integer or boolean type."""
    return lanes(e) == 1 and str(getattr(e, "ty", None) or e.dtype).startswith(("int", "uint", "bool"))


def _is_likely(e: Any) -> bool:
    return op_name(e) == "likely"


def python_source(e: Any, names: dict) -> str:
    """Integer expression ``e`` as Python source over the variables ``names`` (handle -> Python name); raises
    ``NotPlain`` for anything else.  Compile it with ``function``."""
    k = type(e).__name__
    if k == "IntImm":
        return str(int(e.value))
    if k == "Var":
        if handle(e) not in names:
            raise NotPlain(str(e))
        return names[handle(e)]
    if k in BINARY:
        return BINARY[k][1].format(a=python_source(e.a, names), b=python_source(e.b, names))
    if k == "Not":
        return f"(not {python_source(e.a, names)})"
    if k == "Select":
        return (f"({python_source(e.true_value, names)} if {python_source(e.condition, names)} "
                f"else {python_source(e.false_value, names)})")
    if k == "Cast" and _integer_cast(e):
        return python_source(e.value, names)
    if k == "Call" and _is_likely(e):
        return python_source(e.args[0], names)
    raise NotPlain(k)


def function(params: list[str], body: str) -> Any:
    """``lambda *params: body`` (``python_source`` text), compiled with the operators it uses."""
    return eval(f"lambda {', '.join(params)}: {body}", {"_tdiv": tdiv, "_tmod": tmod})  # noqa: S307


def evaluate(e: Any, env: dict) -> int | None:
    """``e``'s value with the variables of ``env`` (handle -> int) replaced; None where it is not plain integer
    arithmetic over them, or divides by zero."""
    k = type(e).__name__
    if k == "IntImm":
        return int(e.value)
    if k == "Var":
        return env.get(handle(e))
    if k == "Cast":
        return evaluate(e.value, env) if _integer_cast(e) else None
    if k == "Call":
        return evaluate(e.args[0], env) if _is_likely(e) else None
    if k == "Not":
        inner = evaluate(e.a, env)
        return None if inner is None else int(not inner)
    if k == "Select":
        cond = evaluate(e.condition, env)
        return None if cond is None else evaluate(e.true_value if cond else e.false_value, env)
    if k not in BINARY:
        return None
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    if a is None or b is None or (b == 0 and k in ("FloorDiv", "FloorMod", "Div", "Mod")):
        return None
    return int(BINARY[k][0](a, b))
