"""A bounds check of the on-chip buffer accesses in lowered device code: every load and store of a shared, local or warp
buffer must stay inside the buffer, under the thread extents, loop ranges, enclosing conditions and bound values that
reach it.

Why: TVM's LowerCrossThreadReduction drops a block's predicate on the write-back of a cross-thread reduction.  A
spatial axis of extent 1 split and bound to threadIdx.x of 128 (``T.where(ax2_0 * 128 + ax2_1 < 1)``) with the
reduction bound to threadIdx.y of 7 lowers to ``if threadIdx_y == 0: pool_sum_shared[threadIdx_x] =
red_buf0[threadIdx_x * 7]`` where ``pool_sum_shared`` holds 1 float: 127 threads write past the buffer.  TVM lowers and
builds it; on the GPU it is undefined behaviour.  Session 26's H200 sealed run (pool2d refinement prompt
b4746f1f71a1a6da, attempt 7) faulted on it (runtime_error, cudaErrorIllegalAddress); session 22's run of the same
prompt wrote the same kernel and happened not to fault (counted correct).  The lowered code says it, no kernel runs.

The rule: walk each lowered device function with TVM's arithmetic analyzer, which learns the ``thread_extent`` /
``virtual_thread`` attributes (0 <= var < extent), loop ranges, the condition of an enclosing ``if`` (its negation in
the else branch), the branches of ``if_then_else`` and ``Select``, the left side of ``&&`` for its right side, and
``Bind`` / ``LetStmt`` / ``Let`` values; each access to a buffer of scope shared, shared.dyn, local or warp of constant
extent (one dimension after lowering; each dimension checked otherwise) must be provably inside it (a vector index
``Ramp`` at both ends: the analyzer's constant bounds or its proof, then, where the index's free variables take at most
``POINTS`` values, each value in Python integers, skipping those an enclosing condition excludes, then the analyzer's
symbolic bounds), else it is refused.  A view that MergeSharedMemoryAllocations declares on the dynamic shared pool is
indexed from the pool's start: checked against the pool's size.  Global buffers are left out: their extents and
indices come from the host; so is a buffer declared on a kernel parameter, whatever its scope (TVM passes a "shared"
buffer that one kernel fills and the next reads as a parameter: global memory, which the host allocates).  TVM's own
``tirx.analysis.OOBChecker`` does not read the guards (it refuses correct kernels).

Unknown to the walker (a statement or expression kind it does not handle, a predicated or shuffled vector access) is
not refused: those parts are skipped.  Nor is what lies past ``BUDGET``, the work one call may spend (the walk stops
there, counted in ``OVER_BUDGET``; what it found before stands): unrolled kernels of 100,000s of expressions took up
to 1 s.  An exception inside the walk of a function (the analyzer refusing a binding, say) gives no refusal for that
function and is counted in ``ANALYSIS_FAILURES``."""
from __future__ import annotations

import collections
import contextlib
from typing import Any

from little_dragon.generation.tir_ints import NotPlain, function, handle, lanes, op_name, python_source

ON_CHIP_SCOPES = ("shared", "shared.dyn", "local", "warp")
POINTS = 8192  # the most values of an index's free variables tried one by one where the analyzer proves no bound
# The most work one call spends, in steps of ~1-2 us on a CPU core: a statement or expression visited 1, an access
# checked or a condition told to the analyzer ``QUERY_STEPS``, a value tried 1, a proof by symbolic bounds
# ``SYMBOLIC_STEPS``.  Past it the walk stops and what it has not reached is not refused: a kernel out of bounds faults
# at run time, where the judge sees it, while a slow end check costs every attempt.  The value: ~0.1 s at most, where
# the H200 harvest's largest unrolled kernels took up to 1 s (a median kernel walks ~2,000 steps; 29 of its 832 lowered
# kernels more than 100,000, up to 840,000: results/constrained-decoding/cpu-s27/helperB/).
BUDGET = 100_000
QUERY_STEPS = 20  # an analyzer query (bounds and default proof of an index, or a condition entered): ~20-40 us
SYMBOLIC_STEPS = 20_000  # a proof by the analyzer's symbolic bounds: up to 60 ms where it fails
ANALYSIS_FAILURES: collections.Counter = collections.Counter()  # exception type name -> device functions not checked
OVER_BUDGET: collections.Counter = collections.Counter()  # device function name -> calls whose budget it spent

_BINARY = frozenset(("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT", "LE",
                     "GT", "GE", "Or", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LShift", "RShift"))
_LOADS = ("TensorLoad", "BufferLoad")  # TVM 0.27's load (its buffer: ``source``), and the older name


def out_of_bounds_accesses(devices: list[Any]) -> list[str]:
    """The on-chip buffer accesses of the lowered device modules ``devices`` (``tvmx.build.lower_for_target``'s second
    value) that the analyzer cannot prove inside their buffer, in walk order, one description each: the function, the
    buffer, its scope, the index expression, its extent and the index's bounds as the analyzer knows them."""
    out: list[str] = []
    budget = _Budget(BUDGET)
    for mod in devices:
        for gv, func in mod.functions.items():
            if type(func).__name__ != "PrimFunc":
                continue
            walker = _Walker(str(gv.name_hint), budget)
            try:
                out += walker.function(func)
            except _OverBudget:  # what the walk found stands; the rest is not examined
                OVER_BUDGET[walker.name] += 1
                return out + walker.bad
            except Exception as e:  # noqa: BLE001 - an analysis failure refuses nothing
                ANALYSIS_FAILURES[type(e).__name__] += 1
    return out


class _OverBudget(Exception):
    """The call's ``BUDGET`` is spent."""


class _Budget:
    """The steps one call has left (``BUDGET``), shared by the walks of its device functions."""

    def __init__(self, steps: int):
        self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise _OverBudget


def _kind(node: Any) -> str:
    return type(node).__name__


class _Walker:
    """One device function's walk, one analyzer: what it knows grows with the bindings and scopes it passes."""

    def __init__(self, name: str, budget: _Budget | None = None):
        from tvm.sym.analyzer import Analyzer

        self.name, self.ana, self.bad, self.threads = name, Analyzer(), [], set()
        self.budget = budget or _Budget(BUDGET)
        self.params: set = set()  # the function's parameters (handles)
        self.passed: set = set()  # buffers declared on a parameter: host memory, whatever their scope says
        self.conds: list = []  # the conditions known where the walk is (innermost last)
        self.scopes: list = []  # the analyzer's constraint scopes of ``conds[:len(scopes)]`` (``_told``)
        self.bytes: dict = {}  # allocated buffer -> its size in bytes (constant shapes)
        self.views: dict = {}  # buffer declared on an allocation's data (merged dynamic shared memory) -> its extent

    def function(self, func: Any) -> list[str]:
        self.params = {handle(p) for p in func.params}
        self.stmt(func.body)
        return self.bad

    # ------------------------------------------------------------------ accesses
    def access(self, buf: Any, indices: Any, predicate: Any = None) -> None:
        if predicate is not None or not hasattr(buf, "scope") or buf.scope() not in ON_CHIP_SCOPES \
                or handle(buf) in self.passed or len(buf.shape) != len(indices):
            return
        shape = buf.shape
        if handle(buf) in self.views:  # its declared shape is one merged buffer's, its indices the pool's
            if len(indices) != 1:
                return
            shape = [self.views[handle(buf)]]
        for idx, ext in zip(indices, shape):
            ext = _int_imm(ext)
            if _kind(ext) != "IntImm":
                continue
            self._told()
            self.budget.spend(QUERY_STEPS)
            if lanes(idx) > 1 and _kind(idx) not in ("Ramp", "Broadcast"):
                idx = self.ana.simplify(idx)  # a ramp plus a broadcast offset (a merged pool's view): one ramp
            k = _kind(idx)
            if k == "Ramp":
                lo, hi = idx.base, idx.base + idx.stride * (idx.lanes - 1)
            elif k == "Broadcast":
                lo = hi = idx.value
            elif lanes(idx) == 1:
                lo = hi = idx
            else:  # a shuffle or another vector index: not analysed
                continue
            if not self.inside(lo, hi, int(ext)):
                b0, b1 = self.ana.const_int_bound(lo), self.ana.const_int_bound(hi)
                self.bad.append(f"{self.name}: {buf.scope()} buffer {buf.name}[{idx}] of extent {int(ext)} is not "
                                f"provably inside it (index bounds {_bound(b0.min_value)}..{_bound(b1.max_value)})")
                return

    def inside(self, lo: Any, hi: Any, ext: int) -> bool:
        """Whether ``0 <= lo`` and ``hi < ext`` are proven, each end by any of: the analyzer's constant bounds, its
        default prover; then both by the values one by one (``pointwise``); last by its symbolic bounds (which use a
        guard on a sum, ``f * 112 + x < 1440``, for a multiple of it, ``f * 896 + x * 8 + 1 < 11520``), the slowest:
        up to 60 ms on an unrolled fetch's index of divisions that the values settle in 0.1 ms.  Each is a proof, so
        the order changes no verdict, only the cost."""
        from tvm.sym.analyzer import ProofStrength

        low = self.ana.const_int_bound(lo).min_value >= 0 or self.ana.can_prove(lo >= 0)
        high = self.ana.const_int_bound(hi).max_value < ext or self.ana.can_prove(hi < ext)
        if low and high or self.pointwise(lo, hi, ext):
            return True
        for done, fact in ((low, lo >= 0), (high, hi < ext)):
            if not done:
                self.budget.spend(SYMBOLIC_STEPS)
                if not self.ana.can_prove(fact, ProofStrength.SYMBOLIC_BOUND):
                    return False
        return True

    def pointwise(self, lo: Any, hi: Any, ext: Any) -> bool:
        """The bounds checked value by value of the index's free variables, where they take at most ``POINTS``
        values together (an unrolled cooperative fetch's ``(f * 448 + tx * 4 + 1 >> 12) * 4096 + ...`` under ``f * 112
        + tx < 4096``, which the analyzer's rules do not see through), in Python integers: a value that an enclosing
        condition of those variables excludes is skipped.  False where an expression is not plain integer arithmetic."""
        import itertools

        from tvm.tirx.analysis import undefined_vars

        free, names = [], {}
        for v in [*undefined_vars(lo), *undefined_vars(hi)]:
            if handle(v) not in names:
                names[handle(v)] = f"v{len(free)}"
                free.append(v)
        ranges, points = [], 1
        for v in free:
            b = self.ana.const_int_bound(v)
            points *= max(b.max_value - b.min_value + 1, 1)
            if points > POINTS or b.min_value < -POINTS:
                return False
            ranges.append(range(b.min_value, b.max_value + 1))
        self.budget.spend(points)
        try:
            low, high = python_source(lo, names), python_source(hi, names)
            guards = []
            for c in self.conds:
                try:
                    guards.append(python_source(c, names))
                except NotPlain:
                    pass  # a condition of other variables (or not plain): it excludes no point
            test = function(list(names.values()), f"({low}) >= 0 and ({high}) < {int(ext)}")
            excluded = function(list(names.values()), f"not ({' and '.join(guards) or 'True'})")
        except NotPlain:
            return False
        return all(excluded(*p) or test(*p) for p in itertools.product(*ranges))

    def declared(self, buf: Any, data: Any) -> None:
        """A buffer declared on ``data``: a parameter (host memory: not checked), or an allocation's data
        (MergeSharedMemoryAllocations' views of one dynamic shared pool, each indexed from the pool's start: checked
        against the pool's size in its elements), else not checked."""
        if data is None or handle(data) in self.params:
            self.passed.add(handle(buf))
            return
        if _kind(data) == "Call" and op_name(data) == "buffer_data" and len(data.args) == 1:
            size, width = self.bytes.get(handle(data.args[0])), _element_bytes(buf)
            if size is not None and width:
                self.views[handle(buf)] = size // width
                return
        self.passed.add(handle(buf))

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Any) -> None:
        if e is None:
            return
        self.budget.spend(1)
        k = _kind(e)
        if k in _LOADS:
            for i in e.indices:
                self.expr(i)
            self.access(getattr(e, "buffer", None) or e.source, e.indices, getattr(e, "predicate", None))
        elif k == "And":
            self.expr(e.a)
            with self.known(e.a):
                self.expr(e.b)
        elif k in _BINARY:
            self.expr(e.a)
            self.expr(e.b)
        elif k in ("Cast", "Broadcast"):
            self.expr(e.value)
        elif k in ("Not", "BitwiseNot"):
            self.expr(e.a)
        elif k == "Ramp":
            self.expr(e.base)
            self.expr(e.stride)
        elif k == "Select":
            self.branches(e.condition, e.true_value, e.false_value, self.expr)
        elif k == "Let":
            self.expr(e.value)
            self.ana.bind(e.var, e.value)
            self.expr(e.body)
        elif k == "Shuffle":
            for v in e.vectors:
                self.expr(v)
        elif k == "Call":
            if op_name(e) == "if_then_else":
                self.branches(*e.args, self.expr)
            else:
                for x in e.args:
                    self.expr(x)
        # anything else (Var, IntImm, FloatImm, StringImm, an unknown kind): nothing to check

    def branches(self, cond: Any, then: Any, other: Any, visit: Any) -> None:
        from tvm.tirx import Not

        self.expr(cond)
        cond = _unlikely(cond)
        with self.known(cond):
            visit(then)
        if other is not None:
            with self.known(Not(cond)):
                visit(other)

    def known(self, cond: Any) -> contextlib.ExitStack:
        """A scope in which ``cond`` holds: one condition a conjunct (given ``a && b`` whole, the analyzer proves
        neither ``a`` nor ``b``), told to the analyzer only when an access under it is checked (``_told``: an
        unrolled fetch's ``if_then_else`` guards of global loads cost the most and guard nothing checked)."""
        stack = contextlib.ExitStack()
        for c in _conjuncts(cond):
            self.conds.append(c)
            stack.callback(self._forget)
        return stack

    def _told(self) -> None:
        """The analyzer told every condition known where the walk is (in order, outermost first)."""
        while len(self.scopes) < len(self.conds):
            self.budget.spend(QUERY_STEPS)
            scope = self.ana.constraint_scope(self.conds[len(self.scopes)])
            scope.__enter__()
            self.scopes.append(scope)

    def _forget(self) -> None:
        """The innermost condition left: its analyzer scope too, if it was told."""
        if len(self.scopes) == len(self.conds):
            self.scopes.pop().__exit__(None, None, None)
        self.conds.pop()

    # ------------------------------------------------------------------ statements
    def stmt(self, s: Any) -> None:
        if s is None:
            return
        self.budget.spend(1)
        k = _kind(s)
        if k == "SeqStmt":
            for x in s.seq:
                self.stmt(x)
        elif k == "BufferStore":
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            self.access(s.buffer, s.indices, getattr(s, "predicate", None))
        elif k == "Evaluate":
            self.expr(s.value)
        elif k == "Bind":
            self.expr(s.value)
            self.ana.bind(s.var, s.value)
        elif k == "LetStmt":
            self.expr(s.value)
            self.ana.bind(s.var, s.value)
            self.stmt(s.body)
        elif k == "IfThenElse":
            self.branches(s.condition, s.then_case, s.else_case, self.stmt)
        elif k == "For":
            from tvm.ir import Range

            self.expr(s.min)
            self.expr(s.extent)
            self.ana.bind(s.loop_var, Range.from_min_extent(s.min, s.extent))
            self.stmt(s.body)
        elif k == "AttrStmt":
            if s.attr_key in ("thread_extent", "virtual_thread") and _kind(s.node).endswith("IterVar"):
                var = s.node.var
                if str(var.name) not in self.threads:  # one launch axis, its attribute repeated: bound once
                    from tvm.ir import Range

                    self.ana.bind(var, Range.from_min_extent(0, s.value))
                    self.threads.add(str(var.name))
            self.stmt(s.body)
        elif k == "AssertStmt":
            self.expr(s.condition)
            self.stmt(getattr(s, "body", None))
        elif k == "While":
            self.expr(s.condition)
            self.stmt(s.body)
        elif k == "DeclBuffer":
            self.declared(s.buffer, getattr(s, "data", None))
            self.stmt(getattr(s, "body", None))
        elif k == "AllocBuffer":
            size = _size_bytes(s.buffer)
            if size is not None:
                self.bytes[handle(s.buffer)] = size
            self.stmt(getattr(s, "body", None))
        else:  # an unknown kind: its body, if it has one
            self.stmt(getattr(s, "body", None))


def _unlikely(cond: Any) -> Any:
    """``cond`` without its ``likely`` hint (the analyzer does not look through it)."""
    while _kind(cond) == "Call" and op_name(cond) == "likely":
        cond = cond.args[0]
    return cond


def _conjuncts(cond: Any) -> list[Any]:
    """``cond``'s parts joined by ``&&`` (``likely`` hints dropped)."""
    cond = _unlikely(cond)
    if _kind(cond) == "And":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _int_imm(ext: Any) -> Any:
    """An extent as the analyzer takes it (an int32 constant for a Python int)."""
    if isinstance(ext, int):
        from tvm.tirx import IntImm

        return IntImm("int32", ext)
    return ext


def _element_bytes(buf: Any) -> int:
    from tvm import DataType

    t = DataType(str(buf.dtype))
    return t.bits * t.lanes // 8


def _size_bytes(buf: Any) -> int | None:
    """An allocation's size in bytes, None for a shape not constant."""
    n = 1
    for x in buf.shape:
        if _kind(x) != "IntImm":
            return None
        n *= int(x.value)
    return n * _element_bytes(buf)


def _bound(v: int) -> str:
    return "-inf" if v <= -(1 << 62) else ("+inf" if v >= (1 << 62) else str(v))
