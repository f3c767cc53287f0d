"""What a script prefix has defined on its workload: the facts the semantic constraints are built from.

The prefix (complete lines of a codec script) is decoded by the codec and applied to a fresh
``tvm.s_tir.Schedule`` of the workload; the schedule's own trace then lists every random variable the
prefix defined, in definition order, so the codec's implicit names (``b<k>``, ``l<k>``, ``v<k>``: the k-th
block, loop and value defined) map onto TVM objects.  From the live schedule we read, without guessing:

- which block and loop variables still exist (an inlined block or a split loop is gone: referencing it
  is an apply error);
- each live loop's extent (``tile l<k> = ...``: its inner factors divide it; TVM sets the first);
- how many loops sit above each live block (``loops b<k> N``), its child/producer/consumer counts
  (``kids``/``prods``/``cons``), and how many buffers it reads and writes (``cread``/``cwrite`` index);
- which block iters each live loop carries (``par``/``vec``/``bind``: TVM parallelizes, vectorizes or binds a
  loop only if every block iter whose binding uses it is data parallel, or, for a bind to ``threadIdx.*``, a
  reduction iter: ``CheckLoopParallelizableInBlock``), which loop is each loop's only child (``fuse``) and
  which loops are annotated or bound (no ``split``/``fuse``), and which thread axes are bound around each loop
  (enclosing or nested) at another extent (``bind`` takes none of them);
- which live blocks ``inline`` may name (not the root, a reduction or an output block);
- which live loops ``rfactor`` may name (serial, alone above a reduction block, used by none of its data-parallel
  iters: TVM's RFactor checks) and its write buffer's dimension count (the factor axis's range);
- the names of all blocks of the scheduled function (``blk NAME``; cache stages add names such as
  ``C_local``).

Incremental: a line's instructions are applied to a copy of the schedule of the prefix before it
(``extend``; the k attempts of a prompt fork from their common prefix), so a script is applied once, not
once per line (re-applying the whole prefix at every line made a 60-line script cost O(lines^2)).  TVM
applies a JSON trace only with the names it defines itself, so the variables the new line reads are
first re-acquired by name in that JSON (a block by its name, a loop as the i-th loop above a block under
it, a value as a one-candidate categorical of its value); any failure there falls back to applying the
whole prefix to a fresh schedule (``replay``), whose verdict is authoritative.  Tests check that the two
give equal facts on every prefix of real records.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from little_dragon.generation.tir_ints import evaluate, handle
from little_dragon.tvmx.schedule import fingerprint, fresh_schedule


LOOKUP_RUN_FACTOR = 2  # `blk` lines in a row, per block name of the schedule (``ScheduleState.lookups_capped``)


@dataclasses.dataclass
class ScheduleState:
    blocks: dict[int, str]             # live block variable index -> the block's current name
    loops: dict[int, int | None]       # live loop variable index -> constant extent (None: symbolic)
    n_values: int                      # value variables defined (values never disappear)
    block_names: list[str]             # every block of the scheduled function, root first
    n_loops_above: dict[int, int]      # live block -> number of loops above it (``loops b N``)
    n_children: dict[int, int]         # live block -> child blocks (``kids b N``)
    n_producers: dict[int, int]        # live block -> producers (``prods b N``)
    n_consumers: dict[int, int]        # live block -> consumers (``cons b N``)
    n_reads: dict[int, int]            # live block -> buffers read (``cread b i``: i < n)
    n_writes: dict[int, int]           # live block -> buffers written (``cwrite b i``)
    # live loop -> the block iters under it whose bindings use it: "S" only data-parallel ones (or none),
    # "R" a reduction iter too (a bind to threadIdx.x/y/z only), "X" any other kind (no par/vec/bind)
    loop_iters: dict[int, str] = dataclasses.field(default_factory=dict)
    # live "R" loops that one block uses for a data-parallel iter too (a `fuse` of a spatial and a reduction loop): TVM
    # binds one to threadIdx, and LowerCrossThreadReduction then sums over the data-parallel iterations as well, one
    # value for all of them, the others left unwritten (session 41's sealed wrong result: `fuse` of pool_sum's channel
    # and window loops bound to threadIdx.y); MetaSchedule fuses data-parallel loops only before a bind
    loop_mixed: frozenset[int] = frozenset()
    # [drop pipeline] loops whose software pipeline the attempt took back for the shared memory it needs
    # (``constrained.DROP_PIPELINE``): not the schedule's, the attempt's own (``ScriptConstraint._state``); their pipeline
    # keys are masked (``grammar_line._annotate_loop_rules``)
    loop_unpipelined: frozenset[int] = frozenset()
    # [pipeline body] live loops whose body (inside a block realize, where one is its whole body) is not a sequence of
    # statements: TVM lowers no software pipeline there (InjectSoftwarePipeline: "The body of the software pipeline
    # should be SeqStmt"), so their pipeline keys are masked (``grammar_line._annotate_loop_rules``; off:
    # ``constrained.PIPELINE_BODY_RULE``).  MetaSchedule pipelines the loop it cached both inputs at: a sequence of the
    # two copies and the compute.  Session 44's H100 A/B: 10 of the 18 VerifyGPUCode refusals at `post *` were that
    # lowering error, each taking back the ~30 lines from the tiling's first `tile` line
    loop_unsequenced: frozenset[int] = frozenset()
    # live loop -> the live loop variables naming its only child loop (its body is that loop): what `fuse` may
    # join it with (TVM's Fuse: each loop the parent of the next, its body exactly that loop)
    loop_child: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # live loops with an annotation or a thread binding: TVM's Split and Fuse refuse them
    loop_pinned: frozenset[int] = frozenset()
    # live loops bound to a thread axis: TVM's Bind binds one again (to the same axis or another) without complaint; no
    # real trace does (a loop is bound once, when its kernel's loops are), and the H200 sealed run of session 22 had an
    # attempt write `bind l0 by` 150 times until the token budget cut it
    loop_bound: frozenset[int] = frozenset()
    # live blocks TVM's ComputeInline refuses: the root, a block with an init statement (a reduction), an output
    # block (one writing a buffer of the function's parameters)
    not_inlinable: frozenset[int] = frozenset()
    # live loop -> the thread axes ("threadIdx.x", ...) bound on a loop enclosing it, nested in it or under its outermost
    # loop (its kernel) whose extent differs from its own: binding it to one of those puts one axis at two extents in a
    # kernel, which TVM's Bind accepts and lowers to a kernel that leaves outputs unwritten or writes past them
    # (session 11's and 17's sealed wrong results); MetaSchedule binds one axis in a kernel only at one extent
    # (cooperative fetch: the copy loops inside the block's own)
    loop_nested_axes: dict[int, frozenset[str]] = dataclasses.field(default_factory=dict)
    # live blocks naming the function's root block (no scope above it): TVM's GetProducers, GetConsumers, ComputeAt,
    # ReverseComputeAt, ReverseComputeInline, SampleComputeLocation, DecomposeReduction, PadEinsum and
    # TransformBlockLayout refuse it (session 16's CPU sealed runs: 84 of the first pass's 224 failures, most of them
    # `cons`/`prods` of the root)
    root_blocks: frozenset[int] = frozenset()
    # live block ("b<k>") or loop ("l<k>") -> the annotation keys it carries: TVM's Unannotate refuses a key the
    # block or loop does not have (session 16's CPU sealed runs: 29 of the first pass's 224 failures, `unann b producer`)
    annotations: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # live loop -> the number of dimensions of the buffer its block writes, for the loops TVM's RFactor may take
    # (``_rfactor_loops``; the factor axis is then in [-(ndim + 1), ndim]); session 16's CPU sealed runs: `rfactor` of
    # a loop of a block that is no reduction was 41 of the first pass's 124 failures
    loop_rfactor: dict[int, int] = dataclasses.field(default_factory=dict)
    # the prefix leaves the workload's kernel as it was (only lookups and samples so far): a script ending here is the
    # evaluator's ``no_op``, so `post` may not come yet (set by ``schedule_worker.prefix_facts``, which holds the
    # workload; session 17's CPU sealed runs: 38 of the constrained first pass's 177 failures ended so)
    unchanged: bool = False
    # [half bound] a block `post *`'s RewriteUnboundBlock refuses: one under a loop bound to blockIdx and none bound to
    # threadIdx, which the post-processor would bind ("Unsupported case, where blockIdx is bound but threadIdx is not")
    # while a loop above it is still free to take a threadIdx (``half_bound_blocks``): `post` may not come yet.  Session
    # 36's H100 A/B: 51 of 101 line retries and 12 of 128 attempts refused at the end (`fuse l8` of one loop, `bind l16
    # bx`, `post *`).  Its name ("" when none; set by ``schedule_worker.prefix_facts`` on GPU targets)
    half_bound: str = ""
    # the workload's target is a CPU (no GPU thread axes; buffers in `global` or `local` memory): the line grammar's
    # target rules (``grammar_line._target_rules``; set by ``schedule_worker.prefix_facts``, which holds the target)
    cpu: bool = False
    # live block -> the live loops TVM's ComputeAt and ReverseComputeAt may move it under: a loop in the block's own
    # scope (the nearest block above both) that does not enclose it (``_compute_at_loops``; None: not known, the codec's
    # rule).  Session 19's CPU sealed runs: 9 of the 25 failures left were `at`/`rat` to a loop outside the block's
    # scope or above it ("Expected the block ... and loop ... to be under the same block scope, and loop not to be the
    # ancestor of block")
    compute_at: dict[int, tuple[int, ...]] | None = None
    # live block -> the loops of ``compute_at`` that ReverseComputeAt may take: every producer of the block is under the
    # loop (TVM's FindInsertionPoint, "requires all the producer(s) of the given block to be present under the target
    # loop"); ``compute_at`` keeps, for ComputeAt, the loops with every consumer under them, none for an output block.  Session 23's CPU sealed
    # runs: half of the line retries (18 of 36 in the validation A/B) and 2 of the 7 apply errors were `rat` to a loop
    # without the block's producers.  None: not known (``compute_at``'s rule)
    reverse_compute_at: dict[int, tuple[int, ...]] | None = None
    # the prefix ends in a run of ``LOOKUP_RUN_FACTOR`` x (block names) `blk` lines: another `blk` may not follow.  A
    # real trace's runs look each block up at most once (7,135 runs of the H200 and CPU harvests: none repeats a name,
    # none is longer than the blocks); the H200 sealed run of session 20 had 5 attempts that wrote `blk` lines until
    # the token budget cut them (96-121 lines, no instruction: the evaluator's no_op).  Set by
    # ``schedule_worker.prefix_facts``, which holds the prefix text.
    lookups_capped: bool = False
    # the lookup lines (`blk`, `loops`, `kids`, `prods`, `cons`: they name what exists and change nothing) of the run of
    # them that ends the prefix, stripped: none is written again in that run (it would answer the same).  No real
    # record repeats one (1,948 records of the H200, llvm and committed databases), while 12% of the tiny model's CPU
    # sealed lines (196 of 1,578, in 64 of 112 attempts) and 4.8% of SmolLM2's constrained H200 ones (112 of 2,323,
    # session 22) did, `kids b3 0` four times in a row.  Set by ``schedule_worker.prefix_facts``, which holds the text.
    lookup_run: frozenset[str] = frozenset()
    # live loops a `tile` line made (a Split by SamplePerfectTile's factors): not tiled again.  MetaSchedule tiles each
    # loop once (3,838 perfect-tile splits of 1,524 H200 and CPU harvest records: none of a loop an earlier one made),
    # while TVM tiles a tile's unit loops again and again: session 29's H100 A/B had an attempt write 81 `tile` lines
    # (`tile l40 = 1 1 1` ...) until the token budget cut it, its row (and the engine call) running to the step cap.
    # Set by ``live_state`` from the prefix's instructions (``LiveSchedule.tiled``).
    loop_tiled: frozenset[int] = frozenset()
    # live blocks a `blayout` line transformed: not transformed again.  MetaSchedule transforms a block's layout once
    # (1,792 TransformBlockLayout of the same harvests: none of a block transformed before); session 29's H100 A/B had
    # an attempt write the same `blayout b0 ...` 17 times.  Set by ``live_state`` (``LiveSchedule.relaid``).
    block_relaid: frozenset[int] = frozenset()
    # live blocks an `at`/`rat` line moved (ComputeAt, ReverseComputeAt): not moved again.  MetaSchedule moves a block
    # once (1,911 traces of the H200, t64 and llvm harvests: no block moved twice), while TVM moves a moved block again
    # without complaint, the earlier line then dead: session 32's H100 A/B had an attempt move one cache block 5 times
    # on its way to the step cap, its row the batch's last for 764 of 2,150 steps.  Set by ``live_state``
    # (``LiveSchedule.moved``).
    block_moved: frozenset[int] = frozenset()
    # live block -> the indices of the buffers it reads that it also writes (a reduction's output inside a block that
    # `blockize` wrapped: the init went to the outer block, so the inner one reads what it writes).  TVM's CacheRead
    # segfaults on such a read with a consumer list naming the block (`blockize l8` then `cread b0 0 shared c=[b0]`:
    # the block is the buffer's only writer in its scope and its consumer, so no place for the cache is found;
    # session 37's CPU A/B, each crash a TVM worker restarted and every attempt of its process applying its prefix
    # again, seconds of a step)
    reads_written: dict[int, frozenset[int]] = dataclasses.field(default_factory=dict)
    # `ann` as the codec has it (any key on any block or loop) and no `block_moved` rule: the constraint before
    # session 33 (``constrained.ANNOTATION_AND_MOVE_RULES`` False, the bench's +noannmove; on a CPU target always:
    # ``grammar_line._gpu_once_rules``)
    any_annotation: bool = False
    # [outermost loop] live loops directly under the function's root block (no loop above them: on a GPU, the
    # outermost loop of a kernel).  `post *`'s RewriteUnboundBlock (``BindBlockThreadIdx``) fuses a block's loops outside
    # its threadIdx loop to bind blockIdx.x when no loop above the block is bound to blockIdx; when the block's outermost
    # loop is data parallel and already bound to a thread axis there is none to fuse and it raises ("ValueError: Check
    # failed: ... 'fuse' requires at least 1 loop(s)").  Session 38's and 39's H100 A/Bs: 34 of 111 and 28 of 110 line
    # retries and most end refusals.  MetaSchedule binds such a loop to blockIdx only (``grammar_line._parallel_rules``)
    loop_top: frozenset[int] = frozenset()


def _int(x: Any) -> int | None:
    try:
        return int(x.value) if hasattr(x, "value") else int(x)
    except (TypeError, ValueError):
        return None


def _safe(f: Any, default: Any) -> Any:
    try:
        return f()
    except Exception:  # noqa: BLE001 - TVM raises for a variable that is no longer valid
        return default


def state_of(sch: Any, rvs: Any = None, dead: set[int] | None = None) -> ScheduleState:
    """The state of a schedule that has applied a script prefix: ``rvs`` are the prefix's random variables
    in definition order (default: the outputs of the schedule's trace, which then holds the prefix only).
    ``dead``: positions in ``rvs`` of variables known to be gone (skipped: a variable never comes back;
    asking TVM about a gone one raises, ~0.1 ms each); the ones found gone now are added.

    The queries go to TVM's FFI functions directly (the ``Schedule`` methods' Python type checker cost
    ~10x the queries themselves: ~8 ms of a line's ~10 ms); the answers are the same calls' answers."""
    from tvm.s_tir.schedule import LoopRV, SBlockRV, _ffi_api

    get = _ffi_api.ScheduleGet
    blocks: dict[int, str] = {}
    loops: dict[int, int | None] = {}
    loop_vars: dict[int, int] = {}  # live loop -> its loop variable's handle
    loop_rvs: dict[int, Any] = {}
    block_rvs: dict[int, Any] = {}
    annotations: dict[str, frozenset[str]] = {}
    nb = nl = nv = 0
    if rvs is None:
        rvs = [rv for inst in sch.trace.insts for rv in inst.outputs]
    gone = dead if dead is not None else set()
    for i, rv in enumerate(rvs):
        if isinstance(rv, SBlockRV):
            blk = None if i in gone else _safe(lambda: get(sch, rv), None)
            if blk is not None:
                blocks[nb], block_rvs[nb] = blk.name_hint, (rv, blk)
                if blk.annotations:
                    annotations[f"b{nb}"] = frozenset(str(key) for key in blk.annotations)
            else:
                gone.add(i)
            nb += 1
        elif isinstance(rv, LoopRV):
            loop = None if i in gone else _safe(lambda: get(sch, rv), None)
            if loop is not None:
                loops[nl] = _int(loop.extent)
                loop_vars[nl] = hash(loop.loop_var)
                loop_rvs[nl] = rv
                if loop.annotations:
                    annotations[f"l{nl}"] = frozenset(str(key) for key in loop.annotations)
            else:
                gone.add(i)
            nl += 1
        else:
            nv += 1
    # queries below add instructions to the trace; they come after the enumeration above
    st = ScheduleState(blocks, loops, nv, [], {}, {}, {}, {}, {}, {}, annotations=annotations)
    params = _param_buffers(sch.mod)
    not_inlinable, roots, outputs = set(), set(), set()
    producers: dict[int, list[int]] = {}  # live block -> its producers' (consumers') block handles
    consumers: dict[int, list[int]] = {}
    for k, (rv, blk) in block_rvs.items():
        st.n_loops_above[k] = _safe(lambda: _n_loops_above(sch, rv), -1)
        st.n_children[k] = _safe(lambda: len(_query(sch, _ffi_api.ScheduleGetChildBlocks, rv)), -1)
        st.n_reads[k], st.n_writes[k] = len(blk.reads), len(blk.writes)
        written = {hash(w.source) for w in blk.writes}
        both = frozenset(i for i, r in enumerate(blk.reads) if hash(r.source) in written)
        if both:
            st.reads_written[k] = both
        if written & params:
            outputs.add(k)
        if blk.init is not None or k in outputs:
            not_inlinable.add(k)
        if _safe(lambda: _ffi_api.ScheduleGetSRef(sch, rv).parent is None, False):
            not_inlinable.add(k)
            roots.add(k)
            # the root block has no scope above it: TVM raises for its producers and consumers (a raised
            # error costs ~1-10 ms to format); the answer is the same "unknown"
            st.n_producers[k] = st.n_consumers[k] = -1
            continue
        prods = _safe(lambda: _query_blocks(sch, _ffi_api.ScheduleGetProducers, rv), None)
        cons = _safe(lambda: _query_blocks(sch, _ffi_api.ScheduleGetConsumers, rv), None)
        st.n_producers[k] = len(prods) if prods is not None else -1
        st.n_consumers[k] = len(cons) if cons is not None else -1
        if prods is not None and cons is not None:
            producers[k], consumers[k] = prods, cons
    st.block_names = _block_names(sch)
    st.not_inlinable = frozenset(not_inlinable)
    st.root_blocks = frozenset(roots)
    st.compute_at = _safe(lambda: _compute_at_loops(sch, {k: rv for k, (rv, _) in block_rvs.items() if k not in roots},
                                                    loop_rvs), None)
    if st.compute_at is not None:
        under = _safe(lambda: _blocks_under_loops(sch), None)
        if under is None:
            st.reverse_compute_at = st.compute_at
        else:
            def all_under(k: int, m: int, need: dict[int, list[int]]) -> bool:
                return k not in need or all(b in under.get(loop_vars[m], ()) for b in need[k])

            scoped = st.compute_at  # ComputeAt also refuses an output block ("The block ... is an output block")
            st.compute_at = {k: tuple(m for m in ms if all_under(k, m, consumers)) if k not in outputs else ()
                             for k, ms in scoped.items()}
            st.reverse_compute_at = {k: tuple(m for m in ms if all_under(k, m, producers)) for k, ms in scoped.items()}
    if loop_vars:
        kinds, child, pinned, nested, bound, rfactor, top, mixed, unsequenced = _loop_facts(sch)
        st.loop_iters = {k: kinds.get(h, "S") for k, h in loop_vars.items()}
        st.loop_mixed = frozenset(k for k, h in loop_vars.items() if h in mixed)
        st.loop_unsequenced = frozenset(k for k, h in loop_vars.items() if h in unsequenced)
        st.loop_top = frozenset(k for k, h in loop_vars.items() if h in top)
        named: dict[int, list[int]] = {}  # loop variable handle -> the live script variables naming that loop
        for k, h in loop_vars.items():
            named.setdefault(h, []).append(k)
        st.loop_child = {k: tuple(named[child[h]]) for k, h in loop_vars.items() if child.get(h) in named}
        st.loop_pinned = frozenset(k for k, h in loop_vars.items() if h in pinned)
        st.loop_bound = frozenset(k for k, h in loop_vars.items() if h in bound)
        st.loop_nested_axes = {k: nested[h] for k, h in loop_vars.items() if nested.get(h)}
        st.loop_rfactor = {k: rfactor[h] for k, h in loop_vars.items() if h in rfactor}
    return st


def _compute_at_loops(sch: Any, block_rvs: dict[int, Any], loop_rvs: dict[int, Any]) -> dict[int, tuple[int, ...]]:
    """For each live block (not a root), the live loops that TVM 0.27's ComputeAt/ReverseComputeAt scope check takes
    (``s_tir/schedule/primitive/compute_at.cc``: the block and the loop under the same scope block, the loop not an
    ancestor of the block), from the schedule's sref tree: a loop's and a block's scope is the nearest block above
    them; a block's ancestors are the loops between it and its scope.  Every other check of the primitives (the
    producers or consumers under the loop, the regions the block must cover) stays TVM's verdict at the line's end."""
    from tvm.s_tir import SBlock
    from tvm.s_tir.schedule import _ffi_api

    def scope_and_loops(sref: Any) -> tuple[Any, set[Any]]:
        loops, p = set(), sref.parent
        while p is not None and not isinstance(p.stmt, SBlock):
            loops.add(p.stmt)
            p = p.parent
        return (p.stmt if p is not None else None), loops

    where = {}
    for k, rv in loop_rvs.items():
        sref = _ffi_api.ScheduleGetSRef(sch, rv)
        where[k] = (scope_and_loops(sref)[0], sref.stmt)
    out: dict[int, tuple[int, ...]] = {}
    for k, rv in block_rvs.items():
        scope, above = scope_and_loops(_ffi_api.ScheduleGetSRef(sch, rv))
        out[k] = tuple(m for m in sorted(where) if scope is not None and where[m][0] is not None
                       and where[m][0].same_as(scope) and not any(where[m][1].same_as(a) for a in above))
    return out


def _loop_facts(sch: Any) -> tuple[dict[int, str], dict[int, int], set[int], dict[int, frozenset[str]], dict, dict,
                                   set[int], set[int], set[int]]:
    """Nine facts of the loops of the scheduled function, by loop variable handle, from one walk of the IR:

    - "R"/"X" for the loops that some block iter other than a data-parallel one uses in its binding (absent:
      "S").  TVM's ``CheckParallelizability`` visits every block realize under the loop that has a schedule sref
      (the blocks of ``init`` have none: not walked), and for each iter whose binding uses the loop variable
      allows a data-parallel iter, or a reduction iter when binding to threadIdx.x/y/z;
    - the handle of the loop that is a loop's whole body (TVM's Fuse joins a loop only with that one);
    - the loops with an annotation or a thread binding (TVM's Split and Fuse refuse them);
    - the thread axes bound on the loops enclosing each loop or nested in it, or anywhere under its outermost loop
      (its kernel), at an extent other than its own;
    - the bound loops: (thread axis, loop variable name, extent);
    - the loops TVM's RFactor may take, each with its block's write buffer's dimension count (``_rfactor_loops``);
    - the loops directly under a function's root block (no loop above them, inside no block but the root);
    - the loops that one block uses for both a data-parallel iter and a reduction iter (a `fuse` of the two);
    - the loops whose body, inside the block realize that is its whole body if one is, is no ``SeqStmt`` (where
      InjectSoftwarePipeline looks for the pipeline's stages)."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, IfThenElse, SeqStmt, Stmt, analysis

    funcs = list(sch.mod.functions.values())
    kinds: dict[int, str] = {}
    mixed: set[int] = set()
    child: dict[int, int] = {}
    pinned: set[int] = set()
    nested: dict[int, frozenset[str]] = {}
    bound: dict[int, tuple[str, str, Any]] = {}
    above: list[int] = []  # handles of the loop variables enclosing the statement visited
    axes_above: list[tuple[str, int | None]] = []  # (thread axis, extent) of the bound loops among them
    axes_below: list[set[tuple[str, int | None]]] = [set()]  # per enclosing loop: the bound loops inside it
    fors: list[Any] = []  # the enclosing For statements (as ``above``)
    scope: list[int] = [0]  # where in ``above`` the loops of the innermost enclosing block start
    blocks_under: dict[int, list[Any]] = {}  # loop -> the blocks directly under it (TVM's child blocks on the sref tree)
    reductions: list[tuple[Any, Any, list[Any]]] = []  # (realize, block, its loops outer to inner) of blocks with init
    extent_of: dict[int, int | None] = {}
    tree_of: dict[int, int] = {}  # loop -> the outermost loop enclosing it (itself at the top): its kernel, on a GPU
    tree_bound: dict[int, set[tuple[str, int | None]]] = {}  # outermost loop -> (axis, extent) of the bound loops in it
    top: set[int] = set()  # the loops right under a root block (inside the root's realize ``scope`` is two long)
    unsequenced: set[int] = set()

    def visit(stmt: Any) -> None:
        if isinstance(stmt, For):
            h = hash(stmt.loop_var)
            if isinstance(stmt.body, For):
                child[h] = hash(stmt.body.loop_var)
            inner = stmt.body.block.body if isinstance(stmt.body, SBlockRealize) else stmt.body
            if not isinstance(inner, SeqStmt):
                unsequenced.add(h)
            axis = stmt.thread_binding.thread_tag if stmt.thread_binding is not None else None
            extent = _int(stmt.extent)
            if len(stmt.annotations) or axis is not None:
                pinned.add(h)
            if axis:
                bound[h] = (axis, stmt.loop_var.name, stmt.extent)
            extent_of[h] = extent
            tree_of[h] = above[0] if above else h
            if not above and len(scope) == 2:
                top.add(h)
            above.append(h)
            fors.append(stmt)
            axes_below.append(set())
            if axis:
                axes_above.append((axis, extent))
            visit(stmt.body)
            if axis:
                axes_above.pop()
            inside = axes_below.pop()
            # one axis on nested loops of equal extent is one thread index (MetaSchedule's cooperative fetch binds
            # its copy loops so inside the block's own); of different extents it is a wrong kernel.  A virtual thread
            # nested in itself is one index too, and nothing binds one so: the inner loop's iterations are lost
            # (session 24's CPU sealed wrong result, `bind l19 vthread.x` under a `vthread.x` loop of 64).  Both of
            # extent 1 lose none: TVM's LiftThreadBinding makes them one loop of one iteration, and the lowered code
            # is the unbound kernel's (session 24's 3 correct CPU sealed attempts the rule refused)
            nested[h] = frozenset(a for a, e in inside.union(axes_above)
                                  if (e is not None and extent is not None and e != extent)
                                  or (a.startswith("vthread") and (e, extent) != (1, 1)))
            axes_below[-1].update(inside)
            if axis:
                axes_below[-1].add((axis, extent))
            above.pop()
            fors.pop()
            if not above:
                tree_bound[h] = inside | ({(axis, extent)} if axis else set())
        elif isinstance(stmt, SBlockRealize):
            block = stmt.block
            if above:
                reduced: set[int] = set()  # the variables this block's reduction iters use
                for iv, binding in zip(block.iter_vars, stmt.iter_values):
                    kind = int(iv.iter_type)
                    if kind == 0:  # data parallel
                        continue
                    used = {hash(v) for v in analysis.undefined_vars(binding, [])}
                    if kind == 2:
                        reduced |= used
                    for h in above:
                        if h in used and kinds.get(h) != "X":
                            kinds[h] = "R" if kind == 2 else "X"  # 2: a commutative reduction
                if reduced:  # only a block with a reduction iter makes a mixed loop: its data-parallel iters read then
                    spatial = {hash(v) for iv, binding in zip(block.iter_vars, stmt.iter_values)
                               if int(iv.iter_type) == 0 for v in analysis.undefined_vars(binding, [])}
                    mixed.update(h for h in above if h in spatial and h in reduced)
            own = fors[scope[-1]:]
            for loop in own:
                blocks_under.setdefault(hash(loop.loop_var), []).append(block)
            if block.init is not None and own:
                reductions.append((stmt, block, own))
            scope.append(len(above))
            visit(block.body)
            scope.pop()
        elif isinstance(stmt, SeqStmt):
            for s in stmt.seq:
                visit(s)
        elif isinstance(stmt, IfThenElse):
            visit(stmt.then_case)
            if stmt.else_case is not None:
                visit(stmt.else_case)
        else:
            body = getattr(stmt, "body", None)
            if isinstance(body, Stmt):
                visit(body)

    for f in funcs:
        body = getattr(f, "body", None)
        if isinstance(body, Stmt):
            visit(body)
    # one axis at two extents on loops under one outermost loop (one kernel) that are not nested either: TVM launches
    # the kernel at the larger extent and does not guard the other loop's body, whose extra threads write past their
    # part (the H200 sealed run of session 17: `reduce`'s cross-thread sum at threadIdx.x 64 and its consumer at 16, 6,144
    # of 8,192 outputs wrong)
    for h, extent in extent_of.items():
        clash = {a for a, e in tree_bound.get(tree_of[h], ()) if e is not None and extent is not None and e != extent}
        if clash:
            nested[h] = nested.get(h, frozenset()) | clash
    return kinds, child, pinned, nested, bound, _rfactor_loops(reductions, blocks_under), top, mixed, unsequenced


def _rfactor_loops(reductions: list[tuple[Any, Any, list[Any]]], blocks_under: dict[int, list[Any]]) -> dict[int, int]:
    """The loops (by loop variable handle) that pass TVM 0.27's checks of RFactor (``s_tir/schedule/primitive/
    reduction.cc``) that the IR shows, each with the dimension count of its block's write buffer (the factor axis's
    range).  A loop qualifies when:

    - it is serial (no parallel, vectorized, unrolled or thread-bound loop) and has exactly one block directly under
      it (``CheckGetSingleChildBlockRealizeOnSRefTree``), a block with an init statement whose iters are all data
      parallel or reductions and whose written regions use no reduction iter (``CheckReductionBlock``);
    - no data-parallel iter of that block uses it, and the block's loops pass ``LoopPropertyError::
      CheckLoopProperty``: no loop used by both iter kinds, the block first under the outermost loop, one block under
      the outermost loop a reduction iter uses, no loop of extent > 1 that no iter uses inside that one.

    Only what TVM refuses is left out (the reducer pattern and the scope's stage pipeline are left to TVM's verdict at
    the line end): the constraint must never forbid a trace TVM applies."""
    from tvm.tirx import analysis

    out: dict[int, int] = {}
    for realize, block, loops in reductions:
        data_par: set[int] = set()
        reduce: set[int] = set()
        iters_ok = True
        reduce_iters: set[int] = set()
        for iv, binding in zip(block.iter_vars, realize.iter_values):
            kind = int(iv.iter_type)
            if kind not in (0, 2):  # neither data parallel nor a commutative reduction
                iters_ok = False
                break
            used = {hash(v) for v in analysis.undefined_vars(binding, [])}
            (data_par if kind == 0 else reduce).update(used)
            if kind == 2:
                reduce_iters.add(hash(iv.var))
        if not iters_ok or not block.writes:
            continue
        written = {hash(v) for w in block.writes for r in w.region
                   for v in analysis.undefined_vars(r.min, []) + analysis.undefined_vars(r.extent, [])}
        if written & reduce_iters:
            continue
        first = blocks_under.get(hash(loops[0].loop_var), [])
        if not first or not first[0].same_as(block):
            continue
        ok, met = True, False
        for loop in loops:
            h = hash(loop.loop_var)
            if h in data_par and h in reduce:
                ok = False
            elif h in reduce and not met:
                met = True
                ok = len(blocks_under.get(h, ())) == 1
            elif h not in data_par and h not in reduce and met:
                ok = _int(loop.extent) == 1
            if not ok:
                break
        if not ok:
            continue
        ndim = max(len(w.region) for w in block.writes)
        for loop in loops:
            h = hash(loop.loop_var)
            if (h not in data_par and int(loop.kind) == 0 and loop.thread_binding is None
                    and len(blocks_under.get(h, ())) == 1):
                out[h] = ndim
    return out


def nested_thread_bindings(sch: Any) -> list[str]:
    """The loops of the scheduled function bound to a thread axis that a loop enclosing them, nested in them or
    elsewhere in their kernel (under their outermost loop) is bound to at another extent (``_loop_facts``), each
    described.  TVM accepts such a kernel and lowers it to one that leaves outputs unwritten or writes past them (the
    H200 sealed runs of session 11: 8 wrong results, one of them made by ``post *``'s RewriteUnboundBlock binding a loop
    around the model's ``blockIdx.x`` loop; of session 17: 1, sibling loops at threadIdx.x 64 and 16); equal extents
    are one thread index, which only a virtual thread nested in itself misuses (session 24), unless both loops are of
    extent 1 (one iteration either way)."""
    _, _, _, nested, bound, _, _, _, _ = _loop_facts(sch)
    return [f"loop {name} (extent {extent}) is bound to {axis}, and so is another loop of its kernel at "
            + ("another extent" if not axis.startswith("vthread") else "this or another extent (a virtual thread)")
            for h, (axis, name, extent) in bound.items() if axis in nested.get(h, ())]


def _n_loops_above(sch: Any, rv: Any) -> int:
    """``len(sch.get_loops(rv))`` read off the IR (TVM's GetLoops: the For ancestors up to the first
    non-loop), without adding an instruction and variables to the schedule."""
    from tvm.s_tir.schedule import _ffi_api
    from tvm.tirx import For

    n, p = 0, _ffi_api.ScheduleGetSRef(sch, rv).parent
    while p is not None and isinstance(p.stmt, For):
        n, p = n + 1, p.parent
    return n


def _query(sch: Any, fn: Any, *args: Any) -> list:
    """A schedule query whose answer is read and forgotten: its trace instruction and the variables it
    made are removed again (a live schedule is copied at every line: its trace and symbol table would
    otherwise grow by every query of every line before)."""
    from tvm.s_tir.schedule import _ffi_api

    out = list(fn(sch, *args))
    sch.trace.pop()
    for rv in out:
        _ffi_api.ScheduleRemoveRV(sch, rv)
    return out


def _query_blocks(sch: Any, fn: Any, rv: Any) -> list[int]:
    """``_query`` of a query answering blocks (producers, consumers): the handles of the blocks it names."""
    from tvm.s_tir.schedule import _ffi_api

    out = list(fn(sch, rv))
    try:
        return [hash(_ffi_api.ScheduleGet(sch, b)) for b in out]
    finally:
        sch.trace.pop()
        for b in out:
            _ffi_api.ScheduleRemoveRV(sch, b)


def _inner_stmts(stmt: Any) -> list[Any]:
    """The statements directly inside ``stmt`` (a sequence's items, a loop's, branch's or attribute's bodies); a block
    realize's own parts are its walker's business."""
    from tvm.tirx import SeqStmt, Stmt

    if isinstance(stmt, SeqStmt):
        return list(stmt.seq)
    return [x for x in (getattr(stmt, name, None) for name in ("body", "then_case", "else_case")) if isinstance(x, Stmt)]


def _stores(stmt: Any, out: list[Any] | None = None) -> list[Any]:
    """The buffer stores in ``stmt`` (not inside the blocks it realizes: ``_inner_stmts``), appended to ``out``."""
    from tvm.tirx import BufferStore

    out = [] if out is None else out
    if isinstance(stmt, BufferStore):
        out.append(stmt)
    else:
        for x in _inner_stmts(stmt):
            _stores(x, out)
    return out


def _function_bodies(mod: Any) -> list[Any]:
    """The bodies of ``mod``'s functions that are statements (TIR functions)."""
    from tvm.tirx import Stmt

    return [f.body for f in mod.functions.values() if isinstance(getattr(f, "body", None), Stmt)]


def _blocks_under_loops(sch: Any) -> dict[int, set[int]]:
    """Loop variable handle -> the handles of the blocks realized in its body, not counting blocks inside those blocks
    (TVM's ``FindInsertionPoint`` looks for a compute-at's producers and consumers so: a block's body is another
    scope)."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For

    under: dict[int, set[int]] = {}

    def visit(stmt: Any, loops: tuple[int, ...]) -> None:
        if isinstance(stmt, For):
            h = hash(stmt.loop_var)
            under.setdefault(h, set())
            visit(stmt.body, (*loops, h))
        elif isinstance(stmt, SBlockRealize):
            for h in loops:
                under[h].add(hash(stmt.block))
            visit(stmt.block.body, ())
        else:
            for x in _inner_stmts(stmt):
                visit(x, loops)

    for body in _function_bodies(sch.mod):
        visit(body, ())
    return under


def _param_buffers(mod: Any) -> set[int]:
    """Handles of ``mod``'s functions' parameters (a block writing one is an output block: TVM 0.27's
    regions name their buffer variable, ``TensorRegion.source``, and the parameters are those variables)."""
    return {hash(p) for f in mod.functions.values() for p in getattr(f, "params", ())}


def _block_names(sch: Any) -> list[str]:
    """Every block of the scheduled function, root first (depth first); the queries are undone after."""
    from tvm.s_tir.schedule import _ffi_api

    names: list[str] = []
    made: list = []
    queries = 0
    try:
        root = _ffi_api.ScheduleGetSBlock(sch, "root", None)
        queries, made = 1, [root]
    except Exception:  # noqa: BLE001 - no block named root
        return names
    todo = [root]
    while todo:
        b = todo.pop()
        names.append(_ffi_api.ScheduleGet(sch, b).name_hint)
        kids = _safe(lambda: list(_ffi_api.ScheduleGetChildBlocks(sch, b)), None)
        if kids is not None:
            queries += 1
            made += kids
            todo.extend(reversed(kids))
    trace = sch.trace
    for _ in range(queries):
        trace.pop()
    for rv in made:
        _ffi_api.ScheduleRemoveRV(sch, rv)
    return names


def prefix_state(mod: Any, trace_json: list) -> ScheduleState:
    """Apply ``trace_json`` (a decoded prefix) to a fresh schedule of ``mod``; TVM's error propagates when
    the prefix does not apply (the caller rejects the attempt)."""
    live = replay(mod, trace_json)
    return state_of(live.sch, live.rvs.values())


# ------------------------------------------------------------------------------------ live schedules
@dataclasses.dataclass
class LiveSchedule:
    """A schedule that has applied a prefix, and the prefix's random variables by their JSON names
    (``b0``, ``l3``, ``v7``: TVM's names, one counter), in definition order."""
    sch: Any
    rvs: dict[str, Any]
    n_insts: int
    dead: set[int] = dataclasses.field(default_factory=set)  # positions in ``rvs`` known to be gone
    # the structural hash of ``sch.mod`` when it was made: TVM may write into a schedule's nodes through a copy of it
    # (tvmx/schedule.py), so ``extend`` checks it before building on this schedule
    fingerprint: int | None = None
    # the names of SamplePerfectTile's outputs, of the loops a Split by them made, of the blocks TransformBlockLayout
    # transformed and of those ComputeAt or ReverseComputeAt moved (``once_facts``)
    tile_values: frozenset[str] = frozenset()
    tiled: frozenset[str] = frozenset()
    relaid: frozenset[str] = frozenset()
    moved: frozenset[str] = frozenset()


def replay(mod: Any, trace_json: list) -> LiveSchedule:
    """``trace_json`` applied to a fresh schedule of ``mod`` (TVM's error propagates)."""
    from tvm.s_tir import Trace

    sch = fresh_schedule(mod, debug_mask=0)  # ``mod`` is the prompt's workload, shared by its attempts
    Trace.apply_json_to_schedule(trace_json, sch)
    applied = list(sch.trace.insts)
    try:
        return LiveSchedule(sch, _outputs(trace_json[0], applied), len(trace_json[0]), fingerprint=fingerprint(sch.mod),
                            **once_facts(trace_json[0]))
    except RuntimeError:  # not one trace instruction per JSON one: facts from the trace, never extended
        return LiveSchedule(sch, {f"?{i}": rv for i, rv in enumerate(rv for inst in applied for rv in inst.outputs)}, -1)


def _outputs(json_insts: list, applied: Any) -> dict[str, Any]:
    if len(applied) != len(json_insts):
        raise RuntimeError(f"{len(json_insts)} instructions applied as {len(applied)}")
    out: dict[str, Any] = {}
    for inst, done in zip(json_insts, applied):
        names, rvs = inst[3], list(done.outputs)
        if len(names) != len(rvs):
            raise RuntimeError(f"{inst[0]}: {len(names)} outputs named, {len(rvs)} made")
        for name, rv in zip(names, rvs):
            if name != "_" and rv is not None:
                out[name] = rv
    return out


def _names_in(value: Any, found: dict[str, None]) -> None:
    if isinstance(value, str):
        if value[:1] == "{":  # an index map: TVM binds its variables by name, unbound ones stay symbolic
            raise RuntimeError("an index map: replay")
        if value[:1] in "blv" and value[1:].isdigit():
            found[value] = None
    elif isinstance(value, list):
        for v in value:
            _names_in(v, found)


def extend(live: LiveSchedule, json_insts: list, decisions: list) -> LiveSchedule:
    """``live`` followed by ``json_insts`` (decisions: ``[i, decision]`` with ``i`` indexing
    ``json_insts``), on a copy of its schedule.  Raises on anything unexpected (the caller then replays
    the whole prefix: that verdict, success or TVM's error, is the authoritative one)."""
    from tvm.s_tir import Trace
    from tvm.s_tir.schedule import LoopRV, SBlockRV, _ffi_api

    if live.n_insts < 0:
        raise RuntimeError("this prefix's variables are not known by name")
    if live.fingerprint is None or fingerprint(live.sch.mod) != live.fingerprint:
        raise RuntimeError("the prefix's schedule was changed in place by an extension of it (tvmx/schedule.py)")
    sch = live.sch.copy()
    funcs = [gv.name_hint for gv in sch.mod.functions]
    if len(funcs) != 1:
        raise RuntimeError("re-acquiring blocks by name needs a module of one function")
    func = funcs[0]
    get = _ffi_api.ScheduleGet
    preamble: list = []
    pre_decisions: list = []
    referenced: dict[str, None] = {}
    for inst in json_insts:
        _names_in(inst[1], referenced)
    defined_here: set[str] = set()
    for inst in json_insts:  # names a new instruction reads that an earlier new instruction defines
        defined_here.update(n for n in inst[3])
    for j, name in enumerate(referenced):
        rv = live.rvs.get(name)
        if rv is None:
            if name in defined_here:
                continue
            raise KeyError(f"{name} is not defined by the prefix")
        if isinstance(rv, SBlockRV):
            preamble.append(["GetSBlock", [], [get(sch, rv).name_hint, func], [name]])
        elif isinstance(rv, LoopRV):
            loop = get(sch, rv)
            kids = list(_ffi_api.ScheduleGetChildBlocks(sch, rv))
            if not kids:
                raise RuntimeError(f"loop {name} has no block under it")
            above = list(_ffi_api.ScheduleGetLoops(sch, kids[0]))
            at = [i for i, other in enumerate(above) if get(sch, other).same_as(loop)]
            if len(at) != 1:
                raise RuntimeError(f"loop {name} not found above its block")
            tmp = f"_b{j}"
            preamble.append(["GetSBlock", [], [get(sch, kids[0]).name_hint, func], [tmp]])
            preamble.append(["GetLoops", [tmp], [], [name if i == at[0] else f"_l{j}_{i}" for i in range(len(above))]])
        else:
            value = _int(get(sch, rv))
            if value is None:
                raise RuntimeError(f"value {name} is not a constant")
            pre_decisions.append([len(preamble), 0])
            preamble.append(["SampleCategorical", [], [[value], [1.0]], [name]])
    n0 = len(sch.trace.insts)
    trace_json = [preamble + list(json_insts),
                  pre_decisions + [[len(preamble) + i, d] for i, d in decisions]]
    Trace.apply_json_to_schedule(trace_json, sch)
    insts = sch.trace.insts
    applied = [insts[i] for i in range(n0, len(insts))]
    if len(applied) != len(trace_json[0]):
        raise RuntimeError(f"{len(trace_json[0])} instructions applied as {len(applied)}")
    rvs = dict(live.rvs)
    rvs.update(_outputs(trace_json[0][len(preamble):], applied[len(preamble):]))
    return LiveSchedule(sch, rvs, live.n_insts + len(json_insts), set(live.dead), fingerprint(sch.mod),
                        **once_facts(json_insts, live.tile_values, live.tiled, live.relaid, live.moved))


def once_facts(json_insts: list, values: frozenset[str] = frozenset(), loops: frozenset[str] = frozenset(),
               blocks: frozenset[str] = frozenset(), moved: frozenset[str] = frozenset()) -> dict[str, frozenset[str]]:
    """After ``json_insts`` (following a prefix whose SamplePerfectTile outputs are ``values``, whose perfect-tile
    loops are ``loops``, whose relaid blocks are ``blocks`` and whose moved blocks are ``moved``): ``tile_values``, the
    names SamplePerfectTile defined; ``tiled``, the loops a Split by one of them made (a `tile` line's); ``relaid``, the
    blocks TransformBlockLayout took (a `blayout` line's); ``moved``, the blocks ComputeAt or ReverseComputeAt took (an
    `at`/`rat` line's)."""
    vals, tiled, relaid, went = set(values), set(loops), set(blocks), set(moved)
    for inst in json_insts:
        kind, ins, outs = inst[0], inst[1], inst[3]
        if kind == "SamplePerfectTile":
            vals.update(o for o in outs if o != "_")
        elif kind == "Split" and any(isinstance(x, str) and x in vals for x in ins[1:]):
            tiled.update(o for o in outs if o != "_")
        elif kind == "TransformBlockLayout" and ins and isinstance(ins[0], str):
            relaid.add(ins[0])
        elif kind in ("ComputeAt", "ReverseComputeAt") and ins and isinstance(ins[0], str):
            went.add(ins[0])
    return {"tile_values": frozenset(vals), "tiled": frozenset(tiled), "relaid": frozenset(relaid),
            "moved": frozenset(went)}


def live_state(live: LiveSchedule) -> ScheduleState:
    from tvm.s_tir.schedule import LoopRV, SBlockRV

    def script_indices(kind: type, names: frozenset[str], alive: dict) -> frozenset[int]:
        """The live script variables (loop k, block k: the k-th variable of that kind, as ``state_of`` counts them)
        among ``names``."""
        if not names:
            return frozenset()
        order = [name for name, rv in live.rvs.items() if isinstance(rv, kind)]
        return frozenset(k for k, name in enumerate(order) if name in names and k in alive)

    state = state_of(live.sch, list(live.rvs.values()), live.dead)
    state.loop_tiled = script_indices(LoopRV, live.tiled, state.loops)
    state.block_relaid = script_indices(SBlockRV, live.relaid, state.blocks)
    state.block_moved = script_indices(SBlockRV, live.moved, state.blocks)
    return state


KERNEL_AXES = ("blockIdx.", "threadIdx.")


@dataclasses.dataclass(frozen=True)
class LaunchLoop:
    """A loop bound to a thread axis: its identity (``tir_ints.handle``), axis, extent (None: not a constant) and loop
    variable's name."""
    handle: Any
    tag: str
    extent: int | None
    var: str


@dataclasses.dataclass(frozen=True)
class PlacedBlock:
    """A block of a scheduled function, where it runs (``blocks_in_run_order``)."""
    block: Any
    outer: frozenset[int]           # the indices (in run order) of the blocks enclosing it
    launch: tuple[LaunchLoop, ...]  # the thread-bound loops around it (through enclosing blocks), outermost first
    top: bool                       # the function's own root block (no loop, sequence or branch above it)

    @property
    def in_kernel(self) -> bool:
        """Under a loop bound to a ``blockIdx``/``threadIdx`` axis."""
        return any(loop.tag.startswith(KERNEL_AXES) for loop in self.launch)


def blocks_in_run_order(sch: Any) -> list[PlacedBlock]:
    """Every block of the scheduled functions in the order they run (a block before the blocks it encloses, its init
    before its body), with where it runs."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, IfThenElse, SeqStmt, Stmt

    out: list[PlacedBlock] = []

    def visit(stmt: Any, outer: frozenset[int], launch: tuple[LaunchLoop, ...], top: bool) -> None:
        if isinstance(stmt, For):
            if stmt.thread_binding is not None:
                launch = (*launch, LaunchLoop(handle(stmt), str(stmt.thread_binding.thread_tag), _int(stmt.extent),
                                              str(stmt.loop_var.name)))
            visit(stmt.body, outer, launch, False)
        elif isinstance(stmt, SBlockRealize):
            out.append(PlacedBlock(stmt.block, outer, launch, top))
            inner = outer | {len(out) - 1}
            if stmt.block.init is not None:
                visit(stmt.block.init, inner, launch, False)
            visit(stmt.block.body, inner, launch, False)
        elif isinstance(stmt, SeqStmt):
            for s in stmt.seq:
                visit(s, outer, launch, False)
        elif isinstance(stmt, IfThenElse):
            visit(stmt.then_case, outer, launch, False)
            if stmt.else_case is not None:
                visit(stmt.else_case, outer, launch, False)
        else:
            body = getattr(stmt, "body", None)
            if isinstance(body, Stmt):
                visit(body, outer, launch, top)

    for f in sch.mod.functions.values():
        body = getattr(f, "body", None)
        if isinstance(body, Stmt):
            visit(body, frozenset(), (), True)
    return out


def half_bound_blocks(sch: Any, blocks: list[PlacedBlock] | None = None) -> tuple[list[str], bool]:
    """The blocks MetaSchedule's RewriteUnboundBlock refuses to bind, as its ``UnboundBlockFinder`` and
    ``BindBlockThreadIdx`` see them: a block inside no block but the root, under a blockIdx loop and no threadIdx loop,
    not annotated as multi-level tiled (skipped) nor for cooperative fetch (RewriteCooperativeFetch, which runs first,
    binds its threads); and whether every such block has a loop above it that no thread axis binds and nothing
    annotates (a later `bind .. tx` can still make it whole).  ``blocks``: ``blocks_in_run_order(sch)``, when the caller
    has it."""
    from tvm.tirx import For

    skip = ("meta_schedule.tiling_structure", "meta_schedule.cooperative_fetch")
    placed = blocks_in_run_order(sch) if blocks is None else blocks
    roots = {i for i, p in enumerate(placed) if p.top}
    half = [p.block for p in placed if not p.top and p.outer <= roots
            and any(loop.tag.startswith("blockIdx.") for loop in p.launch)
            and not any(loop.tag.startswith("threadIdx.") for loop in p.launch)
            and not any(k in p.block.annotations for k in skip)]

    def free_loop_above(block: Any) -> bool:
        ref = sch.state.get_sref(block).parent
        while ref is not None:
            if isinstance(ref.stmt, For) and ref.stmt.thread_binding is None and not ref.stmt.annotations:
                return True
            ref = ref.parent
        return False

    return [b.name_hint for b in half], all(free_loop_above(b) for b in half)


def leaf_blocks(blocks: list[PlacedBlock]) -> list[PlacedBlock]:
    """The blocks of ``blocks_in_run_order``'s list with no block inside them (the root and other enclosing blocks
    only summarise their children's accesses)."""
    parents = {i for p in blocks for i in p.outer}
    return [p for i, p in enumerate(blocks) if i not in parents]


def host_blocks(sch: Any, blocks: list[PlacedBlock] | None = None) -> list[str]:
    """The blocks of the scheduled function (the root aside) that no loop bound to a ``blockIdx``/``threadIdx`` axis
    encloses.  On a GPU target such a block is computed in the host function, on device pointers: the kernel
    segfaults when it runs.  TVM builds it anyway (0.27's VerifyMemory passes it), and ``post *`` leaves it so when
    the block carries ``meta_schedule.tiling_structure`` (``ann b tiling ..``): RewriteUnboundBlock skips a block
    annotated as multi-level tiled, whose binding the tiling rule writes itself (the H200 sealed run of session 20: 22
    of 96 attempts segfaulted this way).  ``blocks``: ``blocks_in_run_order(sch)``, when the caller has it."""
    return [p.block.name_hint for p in (blocks_in_run_order(sch) if blocks is None else blocks)
            if not p.in_kernel and not p.top]


FRAGMENT_SCOPES = ("wmma.",)  # tensor-core fragments: opaque registers, only the wmma intrinsics may touch them


def fragment_elements(sch: Any, blocks: list[PlacedBlock] | None = None) -> list[str]:
    """The first block of the scheduled function that touches a tensor-core fragment element by element
    (``[block, buffer]``; empty when none does): a block with no block inside it that reads or writes a buffer in a
    ``wmma.*`` scope and stores with a plain statement instead of being one of the wmma intrinsics (whose bodies only
    call ``tvm_fill_fragment``, ``tvm_load_matrix_sync``, ``tvm_mma_sync``, ``tvm_store_matrix_sync``).  Such a block is
    what a tensorization that did not happen leaves: MetaSchedule's RewriteTensorize only warns when a block annotated
    for an intrinsic does not match it ("Tensorize failed ... scope(): global vs wmma.accumulator"), and the block
    stays scalar code on a fragment.  TVM lowers it; nvcc refuses the CUDA it generates ("no operator "+" matches
    these operands": a fragment is not a number), the judge's build error (session 22's H200 sealed run: the 5
    `conv2d_transpose` refinement build errors).  ``blocks``: ``blocks_in_run_order(sch)``, when the caller has it."""
    for p in leaf_blocks(blocks_in_run_order(sch) if blocks is None else blocks):
        fragment = next((r.source for r in list(p.block.reads) + list(p.block.writes)
                         if str(r.source.scope()).startswith(FRAGMENT_SCOPES)), None)
        if fragment is not None and _stores(p.block.body):
            return [p.block.name_hint, str(fragment.name)]
    return []


def read_before_written(sch: Any) -> list[str]:
    """The first block of the scheduled function that reads a buffer another block writes only after it, in the order
    the function runs its blocks (``[reader, buffer, writer]``; empty when every buffer is written before it is read).
    TVM's compute-at primitives check the moved block's producers (``rat``) or consumers (``at``) under the target loop,
    not that the block's other side stays on its side: ``rat b l`` of a block whose consumer runs before the loop
    moves its writes after that consumer (apache/tvm#15911 is another such hole).  The kernel then reads memory
    nobody wrote: session 21's two CPU sealed wrong results (`rat` of a producer of `scores` under the softmax's
    loop; of the `T_cast` that `T_multiply` reads under the reduction's loop).  A block nested in the reader (its
    blockized outer block) is not another block; a block reading what it writes itself is a reduction."""
    blocks = blocks_in_run_order(sch)
    writers: dict[int, list[int]] = {}  # buffer (its handle's hash, as ``_param_buffers``) -> the blocks writing it
    for i, p in enumerate(blocks):
        for region in p.block.writes:
            writers.setdefault(hash(region.source), []).append(i)
    for i, p in enumerate(blocks):
        for region in p.block.reads:
            for j in writers.get(hash(region.source), ()):
                if j > i and i not in blocks[j].outer:
                    return [p.block.name_hint, str(getattr(region.source, "name", region.source)),
                            blocks[j].block.name_hint]
    # an accumulation nothing initializes: a block without an init of its own that reads what it writes, when no block
    # before it (its enclosing ones included) writes that buffer.  Session 24: `reindex` of the update block inside a
    # blockized softmax sum gave it a fresh scalar to accumulate into, while the outer block's init still wrote the
    # old buffer: the sum started from garbage
    params = _param_buffers(sch.mod)
    for i, p in enumerate(blocks):
        if p.block.init is not None:
            continue
        own = {hash(w.source) for w in p.block.writes}
        for region in p.block.reads:
            h = hash(region.source)
            if h in own and h not in params and not any(j < i for j in writers.get(h, ())):
                name = str(getattr(region.source, "name", region.source))
                return [p.block.name_hint, name, f"{p.block.name_hint} (nothing initializes {name})"]
    return []


def _first_iteration_only(predicate: Any, loop: Any, loops: list[Any]) -> bool:
    """Whether a block's ``predicate`` is false at every iteration of ``loop`` but its first, whatever the other
    ``loops`` (each over its whole range): a split's padding that lets one iteration run (`u_0 * 16 + u_1 < 1`, a
    unit loop split by 16).  TVM's analyzer proves it or it is False (a fused loop's `f % 2` over 4 iterations
    runs twice)."""
    from tvm.ir import Range
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import Not

    analyzer = Analyzer()
    for x in loops:
        skip = 1 if x.same_as(loop) else 0
        analyzer.bind(x.loop_var, Range.from_min_extent(x.min + skip, x.extent - skip))
    return bool(analyzer.can_prove(Not(predicate)))


def _idempotent_update(store: Any) -> bool:
    """Whether ``store`` (a block's body, a lowered store) is `X[i] = max(X[i], v)` or `min` (either operand order),
    ``v`` not reading ``X``: running it again over the same ``v`` leaves ``X`` as it was, so an init hoisted above a
    loop that repeats the reduction changes nothing (a softmax's row max, session 23's CPU sealed attempt the judge
    scored correct), and neither does an in-place fold that repeats it.  A sum, a product or any other combiner
    counts every repeat."""
    from tvm.ir import TensorLoad
    from tvm.tirx import BufferStore, Max, Min
    from tvm_ffi import structural_equal

    if not isinstance(store, BufferStore) or not isinstance(store.value, (Max, Min)):
        return False

    def is_x(buffer: Any) -> bool:  # lowered, a fold's alias of X is another buffer object of X's storage
        return buffer.same_as(store.buffer) or _storage(buffer) == _storage(store.buffer)

    def is_own(x: Any) -> bool:
        return isinstance(x, TensorLoad) and is_x(x.source) and structural_equal(list(x.indices), list(store.indices))

    a, b = store.value.a, store.value.b
    other = b if is_own(a) else (a if is_own(b) else None)
    return other is not None and not any(is_x(x.source) for x in _loads(other, []))


def reduction_restarted_by_loop(mod: Any) -> list[str]:
    """The first reduction block that a loop it does not bind makes compute its reduction again and again, and whose
    init MetaSchedule's post-processing will hoist above that loop (``[block, loop, extent]``; empty when none).
    Before post-processing such a block is right, if slow: under a loop of another block's (``rat`` of a layer
    norm's variance under the mean's reduction loop) its init runs whenever its own reduction loops start, once per
    iteration of the foreign loop.  RewriteReductionBlock decomposes every reduction at the first loop above it that
    is not data parallel (TVM's ``GetLoopIterType`` over every block under the loop: the mean's loop is a reduction
    loop), so the init runs once before the foreign loop and the block then sums that loop's extent times over
    (session 23's CPU sealed `layer_norm` wrong result: `rat b10 l2`).  TVM's DecomposeReduction does not check
    that the loops it puts the init outside are the block's own.

    A loop whose iterations past the first nobody sees is not one (session 24's four CPU sealed scripts the judge
    scored correct): the block's predicate runs it at the first only (``_first_iteration_only``: a unit loop split
    with padding, `u_0 * 16 + u_1 < 1`), or what it sums is read only there, by blocks under the loop that run at its
    first iteration only, and by nothing after the loop (an ``rfactor`` block placed under its write-back's padded
    loop): the init runs right before that first iteration (only unit loops between it and the loop), and the sums
    of the others are never read.  Nor is a max or min reducer (``_idempotent_update``) whose inputs that loop
    leaves alone (``inputs_fixed_under``): repeating it gives the value it gave at the first iteration (session 23's
    CPU sealed softmax row max under the exp-sum's reduction loop, which the judge scored correct)."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, analysis

    kinds: dict[int, str] = {}  # loop var hash -> "S" data parallel, "R" reduction, "X" both or other

    def loop_kind(loop: Any) -> str:
        h = hash(loop.loop_var)
        if h not in kinds:
            seen: set[str] = set()

            def visit(stmt: Any) -> None:
                if isinstance(stmt, SBlockRealize):  # as GetLoopIterType: the bindings, not inside the block
                    for iv, binding in zip(stmt.block.iter_vars, stmt.iter_values):
                        if any(hash(v) == h for v in analysis.undefined_vars(binding, [])):
                            seen.add({0: "S", 2: "R"}.get(int(iv.iter_type), "X"))
                else:
                    for x in _inner_stmts(stmt):
                        visit(x)

            visit(loop.body)
            kinds[h] = "X" if "X" in seen or seen == {"S", "R"} else ("R" if "R" in seen else "S")
        return kinds[h]

    # every block realize: its loops in its scope, its loops through the blocks around it, the blocks around it
    placed: list[tuple[Any, list[Any], list[Any], frozenset[int]]] = []

    def walk(stmt: Any, loops: list[Any], chain: list[Any], around: frozenset[int]) -> None:
        if isinstance(stmt, For):
            walk(stmt.body, [*loops, stmt], [*chain, stmt], around)
        elif isinstance(stmt, SBlockRealize):
            placed.append((stmt, loops, chain, around))
            walk(stmt.block.body, [], chain, around | {hash(stmt.block)})  # a block's loops are its scope's own
        else:
            for x in _inner_stmts(stmt):
                walk(x, loops, chain, around)

    for body in _function_bodies(mod):
        walk(body, [], [], frozenset())
    params = _param_buffers(mod)

    def read_at_first_only(realize: Any, loop: Any, around: frozenset[int]) -> bool:
        """Whether what ``realize``'s block writes is read at the first iteration of ``loop`` only (not counting the
        blocks around it or in it: its own reduction)."""
        block = realize.block
        written = {hash(w.source) for w in block.writes}
        if written & params:
            return False  # an output: read after the kernel
        for other, _, chain, outer in placed:
            if hash(other.block) in around or hash(block) in outer or other.block.same_as(block):
                continue
            if any(hash(r.source) in written for r in other.block.reads) and not (
                    any(x.same_as(loop) for x in chain) and _first_iteration_only(other.predicate, loop, chain)):
                return False
        return True

    def inputs_fixed_under(realize: Any, loop: Any, around: frozenset[int]) -> bool:
        """Whether the reduction of ``realize``'s block reads the same at every iteration of ``loop``: no other block
        under the loop writes a buffer it reads (its own output included), and its predicate does not use the loop
        (which would change what it reduces from one iteration to the next)."""
        block = realize.block
        if any(hash(v) == hash(loop.loop_var) for v in analysis.undefined_vars(realize.predicate, [])):
            return False
        read = {hash(r.source) for r in block.reads}
        return not any(any(x.same_as(loop) for x in chain) and any(hash(w.source) in read for w in other.block.writes)
                       for other, _, chain, outer in placed
                       if not other.block.same_as(block) and hash(other.block) not in around
                       and hash(block) not in outer)

    for realize, loops, chain, around in placed:
        if realize.block.init is None:
            continue
        idempotent = _idempotent_update(realize.block.body)
        first = next((i for i, loop in enumerate(loops) if loop_kind(loop) != "S"), None)
        bound = {hash(v) for b in realize.iter_values for v in analysis.undefined_vars(b, [])}
        for i in range(first, len(loops)) if first is not None else ():
            loop = loops[i]
            if getattr(loop.extent, "value", None) == 1 or hash(loop.loop_var) in bound:
                continue
            if _first_iteration_only(realize.predicate, loop, chain):
                continue  # the block runs at the loop's first iteration only
            if (all(getattr(x.extent, "value", None) == 1 for x in loops[first:i])
                    and read_at_first_only(realize, loop, around)):
                continue  # the init runs right before the first iteration, whose sums are the only ones read
            if idempotent and inputs_fixed_under(realize, loop, around):
                continue  # a max or min of the same inputs again: the value the first iteration gave
            return [realize.block.name_hint, str(loop.loop_var.name), str(loop.extent)]
    return []


def block_name_counts(mod: Any) -> dict[str, int]:
    """How many blocks of ``mod``'s functions carry each name (inits and nested blocks included)."""
    from tvm.s_tir import SBlockRealize

    counts: dict[str, int] = {}

    def visit(stmt: Any) -> None:
        if isinstance(stmt, SBlockRealize):
            counts[stmt.block.name_hint] = counts.get(stmt.block.name_hint, 0) + 1
            for part in (stmt.block.init, stmt.block.body):
                if part is not None:
                    visit(part)
        else:
            for x in _inner_stmts(stmt):
                visit(x)

    for body in _function_bodies(mod):
        visit(body)
    return counts



# ------------------------------------------------------------------------------------ StorageRewrite's in-place fold
# TVM's StorageRewrite gives a statement's output the storage of an input it reads last, at the same index, assuming
# each element is written once (apache/tvm#759).  A block that a loop it does not use runs again and again breaks
# that: folded, its second run reads its own output (`rsqrt[i] = f(sum[i])` under a loop over columns becomes
# `sum[i] = f(sum[i])`, applied 256 times).  The kernel is right without the pass, MetaSchedule's builder runs it, and
# the judge calls the result wrong: the most common wrong result of session 24's CPU sealed runs.  The fold is read
# off the lowered kernel the end check builds anyway (no kernel runs), for the kernels whose blocks could fold so.


def in_place_fold_candidates(mod: Any) -> list[list[str]]:
    """The blocks that a loop runs again and again and that read an intermediate buffer at exactly the region they
    write another (``[block, buffer read, buffer written, loop]`` each): where TVM's StorageRewrite may fold the two
    buffers in place (``repeated_in_place_update`` reads whether it did).  The loop is one they do not use (extent >
    1), or one their predicate lets run them at two iterations with the same bindings (``_repeat_witness``: a fused
    loop's `f % 512 < 1`, session 25's CPU sealed `rms_norm` wrong result).  A single element read from a copy stage
    (a `cread` block, ``_copy_sources``) is also a read of what it copies, at whatever index: the pass can fold the
    copy, its source and the output into one buffer (the same attempt), so the source is named in a second entry."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, analysis
    from tvm_ffi import structural_equal

    params = _param_buffers(mod)
    copied = _copy_sources(mod)

    def point(region: Any) -> bool:
        return all(_int(r.extent) == 1 for r in region.region)

    def candidate(realize: Any, loops: list[Any]) -> list[list[str]]:
        used = {hash(v) for b in realize.iter_values for v in analysis.undefined_vars(b, [])}
        in_predicate = {hash(v) for v in analysis.undefined_vars(realize.predicate, [])}
        foreign = next((loop for loop in loops if getattr(loop.extent, "value", None) != 1
                        and hash(loop.loop_var) not in used), None)
        foreign = foreign or next((loop for loop in loops if hash(loop.loop_var) in in_predicate and _repeat_witness(
            list(realize.iter_values), None, [realize.predicate], loop, loops) is not None), None)
        if foreign is None:
            return []
        block, loop = realize.block, str(foreign.loop_var.name)
        pairs = [(r, w) for w in block.writes for r in block.reads
                 if hash(r.source) not in params and not r.source.same_as(w.source)]
        same_region = [[block.name_hint, str(r.source.name), str(w.source.name), loop] for r, w in pairs
                       if structural_equal(list(r.region), list(w.region))]
        through_copy = [[block.name_hint, copied[hash(r.source)], str(w.source.name), loop] for r, w in pairs
                        if hash(r.source) in copied and block.init is None and point(r) and point(w)]
        return same_region[:1] + through_copy[:1]

    found: list[list[str]] = []

    def walk(stmt: Any, loops: list[Any]) -> None:
        if isinstance(stmt, For):
            walk(stmt.body, [*loops, stmt])
        elif isinstance(stmt, SBlockRealize):
            found.extend(candidate(stmt, loops))
            walk(stmt.block.body, [])
        else:
            for x in _inner_stmts(stmt):
                walk(x, loops)

    for body in _function_bodies(mod):
        walk(body, [])
    return found


def _copy_sources(mod: Any) -> dict[int, str]:
    """Buffer handle -> the name of the buffer a copy block copies into it, followed through copies of copies (a
    `cread`/`cwrite` stage: a block whose body stores one element loaded from another buffer, unchanged)."""
    from tvm.ir import TensorLoad
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import BufferStore

    source: dict[int, Any] = {}

    def visit(stmt: Any) -> None:
        if isinstance(stmt, SBlockRealize):
            body = stmt.block.body
            if stmt.block.init is None and isinstance(body, BufferStore) and isinstance(body.value, TensorLoad):
                source[hash(body.buffer)] = body.value.source
            visit(body)
        else:
            for x in _inner_stmts(stmt):
                visit(x)

    for body in _function_bodies(mod):
        visit(body)
    roots: dict[int, str] = {}
    for h, buffer in source.items():
        for _ in range(8):  # a chain of copies, not a cycle
            if hash(buffer) not in source:
                break
            buffer = source[hash(buffer)]
        roots[h] = str(buffer.name)
    return roots


def _storage(buffer: Any) -> str:
    """The storage a lowered buffer uses: the buffer whose data a declared alias points at (StorageRewrite's fold
    declares the output as a buffer over the input's data), else its own.  By name: the pass re-creates the
    allocation it keeps, so the alias and the loads can name two objects of one buffer."""
    for _ in range(8):
        args = getattr(getattr(buffer, "data", None), "args", None)
        if not args or not hasattr(args[0], "data") or args[0].same_as(buffer):
            break
        buffer = args[0]
    return str(buffer.name)


def _loads(expr: Any, out: list[Any]) -> list[Any]:
    """The buffer loads inside ``expr`` (appended to ``out``, in no particular order).  A stack, and each node type's
    sub-expression fields read once (``_node_kind``): nine ``getattr`` and an ABC ``isinstance`` at every node were half
    of a CPU end check's time on unrolled kernels (``repeated_in_place_update``)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        load, fields = _node_kind(e)
        if load:
            out.append(e)
            stack.extend(e.indices)
            continue
        for name in fields:
            x = getattr(e, name)
            if name == "args":
                stack.extend(a for a in (x or ()) if _node_kind(a)[1] is not None)
            elif x is not None and _node_kind(x)[1] is not None:
                stack.append(x)
    return out


# the fields of an expression node that may hold sub-expressions (``_loads``)
_SUB_EXPRESSIONS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body", "args")
_NODE_KINDS: dict[type, tuple[bool, tuple[str, ...] | None]] = {}


def _node_kind(node: Any) -> tuple[bool, tuple[str, ...] | None]:
    """(whether ``node`` is a buffer load, the names of its sub-expression fields; None: not an expression), by type."""
    kind = _NODE_KINDS.get(type(node))
    if kind is None:
        from tvm.ir import Expr, TensorLoad

        if not isinstance(node, Expr):
            kind = (False, None)
        else:
            kind = (isinstance(node, TensorLoad), tuple(n for n in _SUB_EXPRESSIONS if hasattr(node, n)))
        _NODE_KINDS[type(node)] = kind
    return kind


def _runs_twice(cond: Any, loop: Any, loops: list[Any]) -> bool:
    """Whether ``cond`` (a condition above a store) holds at the first two iterations of ``loop``, the other loops at
    their first: a guard that lets the loop run the store at least twice (a split's `i * 12 + j < 256`), not one that
    picks a single iteration (`j == 0`).  Unknown (it does not simplify to a constant): False."""
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import analysis

    if all(hash(v) != hash(loop.loop_var) for v in analysis.undefined_vars(cond, [])):
        # the same at every iteration of the loop; unless it never holds (an unrolled split's padding, `if 3 < 1:`,
        # which the end check's lowering leaves unsimplified: END_CHECK_SKIPPED_PASSES)
        holds = getattr(Analyzer().simplify(cond), "value", None)
        return holds is None or bool(holds)
    for step in (0, 1):
        analyzer = Analyzer()
        for x in loops:
            analyzer.bind(x.loop_var, x.min + step if x.same_as(loop) else x.min)
        value = getattr(analyzer.simplify(cond), "value", None)
        if value is None or not value:
            return False
    return True


REPEAT_PROBES = 16  # first iterations of a loop that ``_repeat_witness`` tries, besides its extent's divisors


def _variable_outside_loads(expr: Any) -> bool:
    """Whether a variable appears in ``expr`` other than in the indices of its loads (a loop's, or a `let`'s that
    may change with a loop)."""
    from tvm.ir import Expr, TensorLoad
    from tvm.tirx import Var

    if isinstance(expr, TensorLoad):
        return False
    if isinstance(expr, Var):
        return True
    parts = [getattr(expr, name, None) for name in ("a", "b", "value", "condition", "true_value", "false_value")]
    parts += list(getattr(expr, "args", ()) or ())
    return any(isinstance(x, Expr) and _variable_outside_loads(x) for x in parts)


def _repeat_witness(indices: list[Any], value: Any, conds: list[Any], loop: Any,
                    loops: list[Any]) -> dict[int, int] | None:
    """Two distinct iterations of ``loop`` (the other ``loops`` at their first) at which every condition of ``conds``
    holds and ``indices`` (a block's bindings, a store's indices) and the loads of ``value`` (a store's value, or None)
    take the same values: the first one, as {loop var handle: value}, or None.  Probes the first ``REPEAT_PROBES``
    iterations and those a divisor of the extent past the first (a fused loop's guard `f % 512 < 1` holds at 0 and
    512, with the same index): a witness found is real; a repeat elsewhere is missed, and so is one whose values
    ``tir_ints.evaluate`` cannot compute.  ``value`` may hold variables only in its loads' indices."""
    extent, first = _int(loop.extent), _int(loop.min)
    if extent is None or first is None or extent < 2 or any(_int(x.min) is None for x in loops):
        return None
    if value is not None and _variable_outside_loads(value):
        return None
    loads = _loads(value, []) if value is not None else []
    divisors = [d for d in range(1, int(extent ** 0.5) + 1) if extent % d == 0]
    steps = sorted({*range(min(extent, REPEAT_PROBES)), *divisors, *(extent // d for d in divisors if d > 1)})
    seen: dict[tuple, dict[int, int]] = {}
    for step in steps:
        env = {handle(x.loop_var): _int(x.min) + (step if x.same_as(loop) else 0) for x in loops}
        if not all(evaluate(c, env) for c in conds):
            continue  # the guard does not hold there, or is not known to
        key = (tuple(evaluate(e, env) for e in indices),
               tuple((_storage(x.source), tuple(evaluate(e, env) for e in x.indices)) for x in loads))
        if None in key[0] or any(None in index for _, index in key[1]):
            continue
        if key in seen:
            return seen[key]
        seen[key] = env
    return None


def _stores_that_run(stmt: Any, loops: list[Any] | None = None, out: list | None = None) -> list[tuple[Any, list]]:
    """The buffer stores in ``stmt`` with the loops around each inside ``stmt`` (``_stores``), not those under a
    condition that never holds (an unrolled split's padding, `if 3 < 1:`: it rewrites nothing)."""
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import BufferStore, For, IfThenElse

    loops, out = loops or [], [] if out is None else out
    if isinstance(stmt, BufferStore):
        out.append((stmt, loops))
    elif isinstance(stmt, For):
        _stores_that_run(stmt.body, [*loops, stmt], out)
    elif isinstance(stmt, IfThenElse):
        holds = getattr(Analyzer().simplify(stmt.condition), "value", None)
        if holds is None or holds:
            _stores_that_run(stmt.then_case, loops, out)
        if stmt.else_case is not None and not holds:
            _stores_that_run(stmt.else_case, loops, out)
    else:
        for x in _inner_stmts(stmt):
            _stores_that_run(x, loops, out)
    return out


def _never_writes(store: Any, loops: list[Any], storage: str, index: list[Any]) -> bool:
    """Whether ``store``, at any iteration of ``loops`` (each over its whole range), provably does not write element
    ``index`` (constants) of ``storage``."""
    from tvm.ir import Range
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import Or

    if _storage(store.buffer) != storage:
        return True
    if len(store.indices) != len(index):
        return False
    analyzer = Analyzer()
    for x in loops:
        analyzer.bind(x.loop_var, Range.from_min_extent(x.min, x.extent))
    differ = [i != c for i, c in zip(store.indices, index)]
    anywhere = differ[0]
    for d in differ[1:]:
        anywhere = Or(anywhere, d)
    return bool(analyzer.can_prove(anywhere))


UNROLLED_LOOKAHEAD = 16  # statements after an update in place searched for its unrolled repeat


def repeated_in_place_update(lowered: list[Any], buffers: set[str]) -> list[str]:
    """The first store ``X[i] = f(.. X[i] ..)``, ``X`` one of ``buffers`` (by name: the candidates' buffers), of the
    lowered modules ``lowered`` (``f`` more than a copy) that a
    loop runs again and again on the same inputs (``[buffer, "loop v"]``; empty when none): a loop of extent > 1 that
    neither ``i`` nor the value uses, whose body stores nothing else to ``X`` or to what the value reads, and that no
    condition on the way keeps from running it twice (``_runs_twice``); or the same store again within the next
    ``UNROLLED_LOOKAHEAD`` statements, nothing it reads stored in between (the loop unrolled,
    ``[buffer, "an unrolled loop"]``).  The loop applies ``f`` to its own output.  A reduction's update reads
    what its reduction loop changes (the loop's index, or a scalar stage computed in it), and a block recomputed under
    the loop rewrites its input there first: neither is one.  Stores under a condition that never holds rewrite
    nothing (``_stores_that_run``: an unrolled split's padding copies of the update, session 25's CPU sealed
    `rms_norm`).  A loop the store uses counts too when its guard lets two iterations run the very same store
    (``_repeat_witness``: `X[a + (f & 511)]` under `f & 511 < 1`) and no other store under the loop can write the
    elements it reads or writes there (``_never_writes``)."""
    from tvm.ir import TensorLoad
    from tvm.tirx import BufferStore, For, IfThenElse, Not, SeqStmt, analysis
    from tvm_ffi import structural_equal

    seen: dict[Any, str] = {}  # store -> ``updates_in_place``: each store is asked twice (its sequence, its loop)

    def updates_in_place(store: Any) -> str:
        """The storage ``store`` updates in place, or ""."""
        key = handle(store)
        if key not in seen:
            seen[key] = _updates_in_place(store)
        return seen[key]

    def _updates_in_place(store: Any) -> str:
        target = _storage(store.buffer)
        if target not in buffers:
            return ""  # not a candidate's: a reduction over an axis its value does not use repeats on purpose
        if isinstance(store.value, TensorLoad) and _storage(store.value.source) == target:
            return ""  # a copy of itself: the same value however often it runs
        if _idempotent_update(store):
            return ""  # a max or min with the same value again: the same value too
        same = any(_storage(x.source) == target and structural_equal(list(x.indices), list(store.indices))
                   for x in _loads(store.value, []))
        return target if same else ""

    def check(store: Any, loops: list[Any], conds: tuple) -> list[str]:
        target = updates_in_place(store)
        if not target:
            return []
        used = {hash(v) for e in (*store.indices, store.value) for v in analysis.undefined_vars(e, [])}
        loop = next((x for x in reversed(loops) if getattr(x.extent, "value", None) != 1
                     and hash(x.loop_var) not in used), None)
        if loop is None or not all(_runs_twice(c, loop, loops) for c in conds):
            return guarded_repeat(store, loops, conds, target)
        written = {_storage(s.buffer) for s, _ in _stores_that_run(loop.body) if not s.same_as(store)}
        if written & {_storage(x.source) for x in _loads(store.value, [])}:
            return []  # X rewritten in the loop, or an input that changes with it: each run has new inputs
        return [target, f"loop {loop.loop_var.name}"]

    def guarded_repeat(store: Any, loops: list[Any], conds: tuple, target: str) -> list[str]:
        """``[target, "loop v"]`` where a loop its guard uses runs the very same store twice."""
        guarded = {hash(v) for c in conds for v in analysis.undefined_vars(c, [])}
        for i in reversed(range(len(loops))):
            loop = loops[i]
            if hash(loop.loop_var) not in guarded:
                continue
            env = _repeat_witness(list(store.indices), store.value, list(conds), loop, loops)
            if env is None:
                continue
            touched = [(_storage(x.source), [evaluate(e, env) for e in x.indices]) for x in _loads(store.value, [])]
            touched.append((target, [evaluate(e, env) for e in store.indices]))
            if all(_never_writes(s, [*loops[:i + 1], *inner], storage, index)
                   for s, inner in _stores_that_run(loop.body) if not s.same_as(store) for storage, index in touched):
                return [target, f"loop {loop.loop_var.name}"]
        return []

    def walk(stmt: Any, loops: list[Any], conds: tuple) -> list[str]:
        if isinstance(stmt, For):
            return walk(stmt.body, [*loops, stmt], conds)
        if isinstance(stmt, BufferStore):
            return check(stmt, loops, conds)
        if isinstance(stmt, IfThenElse):  # the else branch runs where the condition does not hold
            return (walk(stmt.then_case, loops, (*conds, stmt.condition))
                    or (walk(stmt.else_case, loops, (*conds, Not(stmt.condition)))
                        if stmt.else_case is not None else []))
        if isinstance(stmt, SeqStmt):  # the loop unrolled: the same update again, its inputs unchanged in between
            seq = list(stmt.seq)
            for p, a in enumerate(seq):
                target = updates_in_place(a) if isinstance(a, BufferStore) else ""
                if not target:
                    continue
                inputs = {target} | {_storage(x.source) for x in _loads(a.value, [])}
                for b in seq[p + 1:p + 1 + UNROLLED_LOOKAHEAD]:
                    if isinstance(b, BufferStore) and structural_equal(a, b):
                        return [target, "an unrolled loop"]
                    if inputs & {_storage(x.buffer) for x in _stores(b)}:
                        break
        return next((found for x in _inner_stmts(stmt) if (found := walk(x, loops, conds))), [])

    return next((found for mod in lowered for body in _function_bodies(mod) if (found := walk(body, [], ()))), [])


def _device_allocated(devices: list[Any]) -> list[Any]:
    """The buffers the lowered device modules ``devices`` (``tvmx.build.lower_for_target``'s) allocate, in walk
    order."""
    from tvm.tirx import AllocBuffer

    def walk(stmt: Any, out: list[Any]) -> list[Any]:
        if isinstance(stmt, AllocBuffer):
            out.append(stmt.buffer)
        for x in _inner_stmts(stmt):
            walk(x, out)
        return out

    out: list[Any] = []
    for mod in devices:
        for body in _function_bodies(mod):
            walk(body, out)
    return out


def device_global_allocations(devices: list[Any]) -> list[str]:
    """The buffers that the lowered device modules ``devices`` allocate in global memory, in walk order: an
    intermediate computed inside a kernel (a compute-at under its launch loops: its allocation goes where its uses
    meet) that no line gave local or shared storage.  Only the host function's allocations become workspace requests
    (LowerTVMBuiltin); in a kernel, TVM's GPU code generation refuses every one (``CodeGenCUDA::PrintStorageScope``:
    "Cannot allocate global memory when targeting CUDA")."""
    return [str(b.name) for b in _device_allocated(devices) if b.scope() == "global"]


def device_allocations(devices: list[Any]) -> set[str]:
    """The names of the buffers that the lowered device modules ``devices`` allocate inside a kernel.  A tensor-core
    fragment allocated there is a ``nvcuda::wmma::fragment`` in the CUDA, which a plain statement cannot use; one
    allocated at the root is the host's, a kernel parameter that TVM prints as a plain pointer, and nvcc compiles the
    element-by-element code on it (session 21's correct rms_norm attempt refused three times before: the fragment
    stage of a copy at the root; of the 52 H200 scripts ``fragment_elements`` names, the 51 build or verify errors all
    allocate it in a kernel: results/constrained-decoding/cpu-s27/helperB/)."""
    return {str(b.name) for b in _device_allocated(devices)}


def diagonal_thread_bindings(sch: Any) -> list[str]:
    """The blocks of the scheduled function whose iter bindings use two or more loops enclosing them (through enclosing
    blocks too) bound to one ``blockIdx``/``threadIdx`` axis, each of extent above 1 (or unknown), each described.
    TVM lowers the loops of one axis to one thread index, so such a block runs only their diagonal: session 26's H200
    sealed run had a wrong result so (a `T_multiply_red` under `ax1_0` and `ax1_1`, both threadIdx.x 64, bound as
    ``ax1_0 * 64 + ax1_1``: the lowered load is ``threadIdx_x * 65``, 64 of 4,096 elements summed).
    ``nested_thread_bindings`` allows equal extents on purpose: MetaSchedule's cooperative fetch binds a copy block's
    own loop inside its consumer's thread loop at the same axis and extent, and the copy block uses only its own
    (right).  Virtual threads are ``nested_thread_bindings``' business.  A loop the block's predicate uses counts as one
    it uses: session 28's H200 run had a wrong result whose `T_multiply_red` bound its row with one blockIdx.z loop (128)
    and kept ``inner < 1`` of another inside it (128): one index, so only blockIdx.z 0 computed its rows."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, Stmt, analysis

    out: list[str] = []
    bound: list[tuple[int, str, str, int | None]] = []  # (loop var handle, axis, name, extent) of the enclosing loops

    def visit(stmt: Any) -> None:
        if isinstance(stmt, For):
            axis = str(stmt.thread_binding.thread_tag) if stmt.thread_binding is not None else ""
            extent = _int(stmt.extent)
            kept = axis.startswith(KERNEL_AXES) and (extent is None or extent > 1)
            if kept:
                bound.append((hash(stmt.loop_var), axis, str(stmt.loop_var.name), extent))
            visit(stmt.body)
            if kept:
                bound.pop()
        elif isinstance(stmt, SBlockRealize):
            used = {hash(v) for expr in (*stmt.iter_values, stmt.predicate) for v in analysis.undefined_vars(expr, [])}
            by_axis: dict[str, list[str]] = {}
            for h, axis, name, extent in bound:
                if h in used:
                    by_axis.setdefault(axis, []).append(f"{name} ({extent if extent is not None else '?'})")
            out.extend(f"block {stmt.block.name_hint} binds its iters with loops {' and '.join(loops)}, all bound to "
                       f"{axis}: TVM makes them one thread index, so the block runs only their diagonal"
                       for axis, loops in by_axis.items() if len(loops) > 1)
            for part in (stmt.block.init, stmt.block.body):
                if isinstance(part, Stmt):
                    visit(part)
        else:
            for x in _inner_stmts(stmt):
                visit(x)

    for body in _function_bodies(sch.mod):
        visit(body)
    return out


# CUDA's launch limits per axis: threads per block along x and y 1,024, along z 64; blocks along x 2^31 - 1, along y
# and z 65,535 (CUDA C++ Programming Guide, "Technical Specifications" per compute capability: the same for all since
# 3.0).  TVM's VerifyGPUCode checks the per-axis thread limits only when the target gives them (``max_thread_x``...);
# the evaluation's targets give only ``max_threads_per_block``.
CUDA_LAUNCH_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64,
                      "blockIdx.x": 2 ** 31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def launch_over_limits(devices: list[Any], limits: dict[str, int] | None = None) -> list[tuple[str, str, int, int]]:
    """The launch extents of the lowered device modules ``devices`` (``tvmx.build.lower_for_target``'s) over their
    axis's limit (``limits``, default ``CUDA_LAUNCH_LIMITS``), in walk order: (kernel, axis, extent, limit).  CUDA
    refuses such a launch and the kernel leaves its outputs unwritten; session 26's H200 sealed run had one (a kernel
    at threadIdx.z 512, judged a runtime error: an illegal address, then a launch failure)."""
    from tvm.tirx import AttrStmt

    limits = CUDA_LAUNCH_LIMITS if limits is None else limits
    out: list[tuple[str, str, int, int]] = []

    def walk(stmt: Any, kernel: str) -> None:
        if isinstance(stmt, AttrStmt) and stmt.attr_key == "thread_extent":
            axis, extent = str(getattr(stmt.node, "thread_tag", "")), _int(stmt.value)
            if axis in limits and extent is not None and extent > limits[axis]:
                out.append((kernel, axis, extent, limits[axis]))
        for x in _inner_stmts(stmt):
            walk(x, kernel)

    for mod in devices:
        for gv, f in mod.functions.items():
            if hasattr(f, "body"):
                walk(f.body, str(gv.name_hint))
    return out
