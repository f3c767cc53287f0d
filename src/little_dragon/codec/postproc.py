"""``post *``: the post-processing section re-derived from the workload and target.

MetaSchedule builds a candidate by applying the sampled (pre-post-processing) trace to a fresh schedule of
the workload, entering post-processing and running the target's post-processors in order
(``ThreadedTraceApply``); none of them samples, so the section they append is a function of the trace
before it, the workload and the target.  A script may therefore write ``post *`` instead of that section.
The encoder uses the short form only when re-deriving reproduces the record's exact JSON (checked here),
so decoding stays exact; index maps the post-processors create (RewriteLayout) are written in the
database's indented JSON form, as ``database_tuning_record.json`` holds them.

The post-processors are the ones ``tune_tir``'s ``post-order-apply`` space generator picks for the target
(llvm: DisallowDynamicLoop, RewriteParallelVectorizeUnroll, RewriteReductionBlock, RewriteLayout; CUDA
sm_75+: the tensor-core list, with RewriteCooperativeFetch, RewriteUnboundBlock, VerifyGPUCode and
RewriteTensorize), taken from a real ``TuneContext`` rather than listed here.
"""
from __future__ import annotations

import json
from typing import Any

from little_dragon.codec.canonical import canonical_json, dumps, index_maps_indented
from little_dragon.codec.errors import ApplyError
from little_dragon.tvmx.postprocs import needs_tensor_intrinsics  # noqa: F401  (re-exported: codec API)
from little_dragon.tvmx.schedule import fresh_schedule


class DeriveError(Exception):
    """The script before ``post *`` does not apply, or a post-processor rejects the schedule."""


class PostprocContext:
    """The workload (an IRModule) and target (a ``tvm.target.Target``, a target dict or its JSON text)
    that ``post *`` is derived from.  Derivations are cached by the trace before ``post *``, so
    encode -> decode -> re-encode of one record derives once."""

    def __init__(self, mod: Any, target: Any):
        self.mod = mod
        self.target = target
        self._postprocs: list | None = None
        self._cache: dict[str, Any] = {}
        self._pre: dict[str, Any] = {}  # the kernel after the script before `post *`, by that script (``pre_module``)

    def postprocs(self) -> list:
        if self._postprocs is None:
            from little_dragon.tvmx.postprocs import target_postprocs

            # the one list per target, shared with the evaluator (the one tune_tir's space generator picks)
            self._postprocs = target_postprocs(self.mod, self.target)
        return self._postprocs

    def _derive(self, pre_json: list) -> Any:
        """Full trace JSON (pre + EnterPostproc + what the post-processors did), or a DeriveError."""
        key = dumps(pre_json)
        if key not in self._cache:
            try:
                self._cache[key] = self._run(pre_json)
            except DeriveError as e:
                self._cache[key] = e
        return self._cache[key]

    def _run(self, pre_json: list) -> list:
        from tvm.s_tir import Trace

        if needs_tensor_intrinsics(pre_json):
            from little_dragon.tvmx.build import import_tensor_intrinsics

            import_tensor_intrinsics()
        from little_dragon.tvmx.postprocs import PostprocRejected, run_postprocs

        postprocs = self.postprocs()
        sch = fresh_schedule(self.mod, debug_mask=0)  # self.mod serves every script of the workload
        try:
            Trace.apply_json_to_schedule(pre_json, sch)
        except Exception as e:  # noqa: BLE001 - any TVM error: the script before `post *` does not apply
            raise DeriveError(f"the script before `post *` does not apply: {str(e).strip().splitlines()[-1]}") from None
        self._pre[dumps(pre_json)] = sch.mod  # an immutable IRModule: the schedule's later steps make new ones
        try:
            run_postprocs(sch, postprocs)  # enter_postproc, then each once, in tuning order
        except PostprocRejected as e:
            raise DeriveError(str(e)) from None
        got = canonical_json(sch.trace.as_json(remove_postproc=False))
        k = len(pre_json[0])
        if len(got[0]) <= k or got[0][k][0] != "EnterPostproc":
            raise DeriveError("internal: the derived trace does not continue the script")
        # a live trace holds compact IndexMaps: written in the database's indented spelling
        return [list(pre_json[0]) + index_maps_indented(got[0][k:]),
                list(pre_json[1]) + [d for d in got[1] if d[0] >= k]]

    def pre_module(self, pre_json: list) -> Any:
        """The kernel as the script before `post *` left it (before post-processing), where a derivation of that script
        applied it; else None."""
        return self._pre.get(dumps(pre_json))

    def reproduces(self, pre_json: list, full_json: Any) -> bool:
        """Does ``post *`` after ``pre_json`` give exactly ``full_json``?  (The encoder's test.)"""
        got = self._derive(pre_json)
        return not isinstance(got, DeriveError) and dumps(got) == dumps(full_json)

    def derive(self, pre_json: list, lines: list[int] | None = None, text: str = "", post_line: int = 0) -> list:
        """The decoder's ``post *``: the full trace JSON, or an ApplyError naming the failing instruction
        (of the script before ``post *``) or the ``post *`` line (a post-processor rejected it)."""
        got = self._derive(pre_json)
        if not isinstance(got, DeriveError):
            return json.loads(dumps(got))  # a fresh copy: callers may mutate it
        if str(got).startswith("the script before"):
            from little_dragon.codec.apply import apply_json

            apply_json(pre_json, fresh_schedule(self.mod, debug_mask=0), lines, text)  # raises, naming the instruction
        raise ApplyError(f"`post *`: {got}", line=post_line, instruction="post *", reason=str(got))


class SyntaxOnlyContext:
    """A stand-in context that accepts ``post *`` without deriving it: decoding yields the trace before
    ``post *``.  For checks of the text alone (does it parse, what does it say) and for callers that run
    the target's post-processors themselves (the evaluator's verify phase does exactly that)."""

    def derive(self, pre_json: list, lines: list[int] | None = None, text: str = "", post_line: int = 0) -> list:
        return [list(pre_json[0]), list(pre_json[1])]
