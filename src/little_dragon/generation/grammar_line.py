"""The grammar of the next script line: the codec's own Lark grammar, narrowed by what the workload allows.

Built from ``codec.grammar.grammar_text()`` (the grammar the decoder parses with), so every syntax rule
stays the codec's.  Changes, all of them narrowing:

- ``start`` is one instruction (and its line end): the constraint advances line by line, and the facts
  of the next line (``ScheduleState``) come from applying the lines before it.
- variable terminals ``BREF``/``LREF``/``VREF`` list only the variables that exist at this point (live
  blocks and loops, defined values);
- ``blk NAME``: a block of the scheduled function (bare or quoted, as the encoder may write either);
- ``loops b N`` / ``kids`` / ``prods`` / ``cons``: N is that block's (or loop's) real count; ``cread``/
  ``cwrite b i``: i indexes a buffer the block reads / writes;
- ``tile l = t1 .. tN`` as TVM replays it: t2..tN each a divisor of what remains, t1 left to TVM (which sets it
  to what remains: the tile TVM builds is perfect, MetaSchedule's rule) — a context-free rule per divisor of the
  extent; inside a multi-level tiling the factor count of the loop's iter kind (``_tile_rules``); never of a loop
  a `tile` line made (``ScheduleState.loop_tiled``: MetaSchedule tiles a loop once); `blayout` never of a block it
  already transformed (``ScheduleState.block_relaid``); `at`/`rat` never of a block one moved (``block_moved``);
- [annotation keys] ``ann b|l KEY ..``: a key of MetaSchedule's table at the place (root block, block, loop) and target
  MetaSchedule writes it, in the encoder's word; ``ann .. cat``: the keys it samples; never a key the block carries
  (``_annotate_rules``);
- ``par``/``vec``/``bind``, ``split``/``fuse``, ``inline``: the loops and blocks TVM's primitives accept for
  their iter kinds, annotations, nesting and block kind (``_parallel_rules``, ``_split_fuse_rules``); `bind` never
  to a thread axis bound on an enclosing or nested loop (TVM accepts that, and the kernel is wrong), and on a GPU a
  data-parallel loop with no loop above it to blockIdx only (``ScheduleState.loop_top``: RewriteUnboundBlock raises);
- ``rfactor l a``: a serial loop alone above a reduction block and used by none of its data-parallel iters (TVM's
  RFactor checks), a in TVM's factor-axis range (``_rfactor_rules``);
- ``post`` (the script's end) only once the prefix has changed the kernel (``ScheduleState.unchanged``), and not while
  a block is under a blockIdx loop and no threadIdx one that a free loop could still fix (``ScheduleState.half_bound``:
  RewriteUnboundBlock refuses it);
- [compute-at] ``at b l`` / ``rat b l``: l in b's scope and not above b, with b's consumers (`at`) or producers
  (`rat`) under it (``ScheduleState.compute_at``, ``reverse_compute_at``);
- [lookups] no ``blk`` after a run of twice as many ``blk`` lines as the schedule has block names
  (``ScheduleState.lookups_capped``: a real trace looks each block up at most once in a run);
- [target] storage scopes (``cread``/``cwrite``/``scope``) one the target has, and ``bind`` axes the target's: on a
  CPU (``ScheduleState.cpu``) no blockIdx/threadIdx (a kernel binding one does not build for llvm) and memory in
  ``global``/``local`` only (``_target_rules``); ``cread .. c=[..]`` names at most the block itself, and not for a buffer
  the block also writes (TVM's CacheRead segfaults on other consumer lists: ``_index_rule``);
- ``cat c1 .. cN = k`` and ``ann .. cat .. = k``: k < N (named lists: their length).
- integers right after a field are written with their separating space (``SINT``): the grammar's
  ``%ignore`` would otherwise let ``loops b12`` read as ``loops b1 2`` when only ``b1`` exists, which the
  codec (maximal munch) reads as ``b12``.  The encoder always writes that space.

What a line grammar cannot know (the compute-at location count of ``at b = k``, reorder of nested loops,
split factors of a value variable, tensorize preconditions) is checked when the line is complete, by
applying it (``constrained.ScriptConstraint``); a line that fails there ends the attempt, which is counted
and resampled.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any

from little_dragon.codec.kinds import (CANDIDATES, INTRIN_ABBREV, INTRIN_FULL, KEY_ABBREV, KEY_FULL, MS_KEY_PREFIX,
                                       TENSOR_INTRINSICS, THREAD_FULL)
from little_dragon.generation.constrain_state import ScheduleState
from little_dragon.generation.shared_memory import LOOP_PIPELINE

NEVER = r"/[^\s\S]/"  # a terminal that matches nothing (no such variable exists yet)
MAX_LISTED_CANDIDATES = 16   # cat lists longer than this keep the generic decision rule (MetaSchedule's: <= 8)
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


@functools.lru_cache(maxsize=1)
def _base_lines() -> tuple[str, ...]:
    from little_dragon.codec.grammar import grammar_text

    return tuple(grammar_text().splitlines())


def _alts(words: list[str]) -> str:
    return " | ".join(json.dumps(w) for w in words) if words else NEVER


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _tile_rules(loops: dict[int, int | None], levels: tuple[int, ...] = (),
                restricted: frozenset[int] = frozenset(), kinds: dict[int, str] | None = None,
                threads: tuple[int, ...] = ()) -> list[str]:
    """``tile l<k> [m=M] = t1 t2 .. tN`` as TVM replays it.  [perfect tile] SamplePerfectTile given a decision
    keeps t2..tN while each divides what remains, inner to outer, and sets t1 := extent / (t2*..*tN) (TVM's
    sampling.cc: "if the tiling is not perfect ... result[0] = len").  So: t1 any positive integer (``PINT``: TVM
    replaces it; ``constrained._perfect_tile`` writes TVM's value back into the script), then t2..tN each a divisor
    of what remains, product dividing the extent (``h<r>``; ``f<r>``: one such factor): the schedule TVM builds is
    exactly the perfect tile (extent / (t2*..*tN), t2, .., tN).  The constraint used to force t1*..*tN == extent
    left to right, which fixed the *last* factor, where the model (whose training traces have t1 = what remains)
    leaves the outermost to TVM: the forced innermost factor came out large (`88`, `704` on the H200, session 10;
    the constrained arm's correct schedules ran slower in session 9).  Loops of unknown extent keep the generic
    decision.

    [tiling order] the loops in ``restricted`` (those of a multi-level tiling's `loops` line, not yet tiled:
    ``tiling_run``) take exactly N factors, N from ``levels`` = (the tiling structure's S levels, its R levels):
    ``PINT h<E>c<N-1>``.  Otherwise `reorder *`, which the tiling's own `reorder` is, does not follow (the decoder
    derives it only from groups of those lengths).  [iter kind] MetaSchedule's MultiLevelTiling gives a loop that
    carries only data-parallel iters the S count and one carrying a reduction iter the R count (``kinds``:
    ``ScheduleState.loop_iters``); a reduction loop tiled with the S count numbers every later loop off (seen on
    the H200: `tile l2 = 256 1 1 2 4` for k under `SSSRRSRS`, then `bind` of the wrong loops).

    [thread factors] ``threads`` = (low, high, so far) inside a GPU tiling whose S levels bind blockIdx, vthread and
    threadIdx (``tiling_threads``): each S loop's third factor runs on threadIdx, so the block's threads per thread
    block are ``so far`` (the third factors of the run's S loops already tiled, times the warp for a
    ``warp_execution`` block) times this line's third factor times the other S loops' to come.  That factor is kept
    to what leaves the product within [low, high] (MetaSchedule's bounds: the target's warp size and
    ``max_threads_per_block``, written later as `minthreads`/`maxthreads`): ``high // so far`` at most, and at least
    what the other S loops of the run could still multiply up to ``low``.  The bounds line refuses the rest anyway
    (``thread_bounds``) and sends the attempt back to its first `tile` line; here the draw is refused at its token.
    A loop whose bounds no factor meets keeps the plain rule (the bounds line decides)."""
    rules, alts, need_f, need_h, need_c = [], [], set(), set(), set()
    counts = sorted({n for n in levels if n > 0})
    top = max(counts, default=0)
    kinds = kinds or {}
    for k, extent in sorted(loops.items()):
        if extent is not None and extent > 0 and k in restricted and counts:
            alts.append(f"tl{k}")
            own = {"S": levels[:1], "R": levels[1:2]}.get(kinds.get(k, "S"), ()) if len(levels) == 2 else ()
            mine = [n for n in own if n > 0] or counts
            forms = [f'" {extent}"' if n == 1 else "PINT " + (f"f{extent}" if n == 2 else f"h{extent}c{n - 1}")
                     for n in mine]
            if threads and mine == [THREAD_S_LEVELS] and kinds.get(k, "S") == "S":
                bounded = _thread_factor_rules(k, extent, _thread_factor_bounds(k, loops, restricted, kinds, threads))
                if bounded:
                    forms, rules = [f"PINT th{k}"], rules + bounded
            rules.append(f'tl{k}: "l{k}" o_m? "=" (' + " | ".join(forms) + ")")
            need_f.update(_divisors(extent))
            need_c.update((r, n) for r in _divisors(extent) for n in range(2, top))
        elif extent is not None and extent > 0:
            alts.append(f"tl{k}")
            rules.append(f'tl{k}: "l{k}" o_m? "=" PINT h{extent}')
            need_h.update(_divisors(extent))
        else:
            alts.append(f"tg{k}")
            rules.append(f'tg{k}: "l{k}" o_m? pdecision')
    for r in sorted(need_f):  # one factor, a divisor of r
        rules.append(f"f{r}: " + " | ".join(f'" {d}"' for d in _divisors(r)))
    for r in sorted(need_h):  # one or more factors, each a divisor of what remains (a 1 may repeat)
        rules.append(f"h{r}: " + " | ".join(f'" {d}"' for d in _divisors(r)) + " | "
                     + " | ".join(f'" {d}" h{r // d}' for d in _divisors(r)))
    for r, n in sorted(need_c):  # exactly n factors, each a divisor of what remains
        rules.append(f"h{r}c{n}: " + " | ".join(f'" {d}" ' + (f"f{r // d}" if n == 2 else f"h{r // d}c{n - 1}")
                                                 for d in _divisors(r)))
    if not alts:
        return rules + _unreachable("k_tile")
    rules.insert(0, 'k_tile: "tile" (' + " | ".join(alts) + ")")
    return rules


THREAD_S_LEVELS = 5  # `SSSRRSRS`: S levels bound to blockIdx, vthread, threadIdx, then two serial ones
THREAD_LEVEL = 2     # the S level MetaSchedule's GPU tiling binds to threadIdx (its third factor in a `tile` line)


def _thread_factor_bounds(k: int, loops: dict[int, int | None], restricted: frozenset[int], kinds: dict[int, str],
                          threads: tuple[int, ...]) -> tuple[int, int]:
    """[thread factors] The least and greatest third factor of loop ``k``'s `tile` line that keep the threads within
    ``threads``' bounds (``_tile_rules``)."""
    low, high, so_far = threads
    others = 1
    for j in restricted:  # the run's S loops still to tile (``loops``: those not tiled yet)
        if j != k and j in loops and kinds.get(j, "S") == "S":
            e = loops.get(j)
            if e is None or e <= 0:
                return 1, max(high // so_far, 0)  # a loop of unknown extent could reach any count
            others *= e
    return -(-low // (so_far * others)), high // so_far


def _thread_factor_rules(k: int, extent: int, bounds: tuple[int, int]) -> list[str]:
    """``th<k>``: t2 .. t5 of loop ``k``'s S `tile` line (each a divisor of what remains) with t3 within ``bounds``;
    [] when no t3 is (the plain rule stays)."""
    lo, hi = bounds
    alts, rules = [], []
    for d2 in _divisors(extent):
        rest = extent // d2
        d3s = [d for d in _divisors(rest) if lo <= d <= hi]
        if d3s:
            alts.append(f'" {d2}" th{k}r{rest}')
            rules.append(f"th{k}r{rest}: " + " | ".join(f'" {d}" h{rest // d}c2' for d in d3s))
    return [f"th{k}: " + " | ".join(alts)] + rules if alts else []


def tiling_threads(trace_json: list, warp_size: int, max_threads: int) -> tuple[int, int, int] | None:
    """[thread factors] Inside a multi-level tiling of structure ``SSSRRSRS`` on a GPU target (``tiling_run``): (low,
    high, so far) for ``_tile_rules``: MetaSchedule's thread bounds (``warp_size``, ``max_threads``) and the product of
    the third factors of the run's S `tile` lines decided so far (times the warp when the tiled block is annotated
    ``warp_execution``: a tensor-core tiling, whose threadIdx.x is the warp).  None outside such a run."""
    from little_dragon.codec.derive import _structure

    insts, decisions = trace_json[0], dict((i, d) for i, d in trace_json[1])
    run = _run_start(insts)
    if run is None or _structure(insts) != "SSSRRSRS":
        return None
    at, get = run
    so_far = warp_size if _warp_execution(insts[:get], insts[get][1][0]) else 1
    for i in range(get + 1, len(insts), 2):
        factors = decisions.get(i)
        if isinstance(factors, list) and len(factors) == THREAD_S_LEVELS:
            so_far *= int(factors[THREAD_LEVEL])
    return warp_size, max_threads, max(so_far, 1)


def _warp_execution(insts: list, block: str) -> bool:
    return any(x[0] == "Annotate" and x[1][:1] == [block] and x[2] == ["warp_execution"] for x in insts)


def _run_start(insts: list) -> tuple[int, int] | None:
    """(the `tiling` annotation, the `loops` line) of the multi-level tiling in progress at the end of ``insts``
    (``tiling_run``), or None."""
    from little_dragon.codec.derive import _tile_groups
    from little_dragon.codec.kinds import TILING_KEY

    at = next((i for i in range(len(insts) - 1, -1, -1)
               if insts[i][0] == "Annotate" and insts[i][2] == [TILING_KEY]), None)
    if at is None:
        return None
    get = len(insts) - 2 * len(_tile_groups(insts)) - 1
    if get <= at or insts[get][0] != "GetLoops":
        return None
    block = insts[get][1][0]
    # the annotated block's own loops, or (a tensor-core tiling) those of the block `blockize` made of its inner
    # tiles, annotated `warp_execution` since: MetaSchedule tiles that block by the same structure
    if get == at + 1 and [block] == insts[at][1][:1] or _warp_execution(insts[at:get], block):
        return at, get
    return None


def tiling_run(trace_json: list) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """A multi-level tiling in progress at the end of a decoded prefix: the last instructions are the `loops` of a
    block, then only `tile` lines (SamplePerfectTile + Split by its values, as MetaSchedule's MultiLevelTiling writes
    them), the block either the one the last `tiling` annotation names (right before its `loops`) or a block
    annotated `warp_execution` after it (a tensor-core tiling: `blockize` of the annotated block's inner tiles).
    Returns (the S and R level counts of the tiling structure, as (S, R), the TVM names of that `loops` line's loops),
    or None (no such run: the tile lines are free)."""
    from little_dragon.codec.derive import _structure

    insts = trace_json[0]
    run = _run_start(insts)
    structure = _structure(insts)
    if run is None or not structure or set(structure) - {"S", "R"}:
        return None
    return (structure.count("S"), structure.count("R")), tuple(insts[run[1]][3])


def _count_rule(name: str, mnemonic: str, counts: dict[int, int], loops: bool = False,
                skip: frozenset[int] = frozenset()) -> list[str]:
    """``mnemonic b<k> N`` with N the block's real count (a query that failed keeps any count);
    ``loops``: the instruction may name a loop instead (``kids l<k> N``), whose count stays free; ``skip``: blocks
    the instruction may not name (the root for `prods`/`cons`: TVM refuses it)."""
    alts, rules = [], []
    for k, n in sorted(counts.items()):
        if k in skip:
            continue
        r = f"{name}_b{k}"
        alts.append(r)
        rules.append(f'{r}: "b{k}" ' + (f'" {n}"' if n >= 0 else "COUNT"))
    if loops:
        alts.append(f"{name}_loop")
        rules.append(f"{name}_loop: LREF COUNT")
    rules.insert(0, f'{name}: "{mnemonic}" (' + (" | ".join(alts) if alts else f"NEVER{name.upper()}") + ")")
    if not alts:
        rules.append(f"NEVER{name.upper()}: {NEVER}")
    return rules


_LOOKED_UP = re.compile(r"([a-z]+) b(\d+) (\d+)")


def _looked_up(run: frozenset[str], mnemonic: str, counts: dict[int, int]) -> frozenset[int]:
    """[repeated lookup] The blocks ``k`` whose line ``mnemonic b<k> N`` (N their real count: the rule's one line for
    that block) is in the run of lookups ending the prefix (``ScheduleState.lookup_run``): written again it would
    answer the same.  A count not known keeps the block (its rule writes any count)."""
    out = []
    for line in run:
        m = _LOOKED_UP.fullmatch(line)
        if m and m.group(1) == mnemonic and counts.get(int(m.group(2)), -1) == int(m.group(3)) >= 0:
            out.append(int(m.group(2)))
    return frozenset(out)


def _looked_up_names(run: frozenset[str]) -> frozenset[str]:
    """[repeated lookup] The block names a `blk` line of the run of lookups ending the prefix looked up (either form:
    `blk add`, `blk "add"`; a line with `fn=` is another lookup and keeps its name)."""
    out = []
    for line in run:
        if line.startswith("blk ") and "fn=" not in line:
            name = line[4:].strip()
            if name.startswith('"'):
                try:
                    name = json.loads(name)
                except ValueError:
                    continue
            out.append(name)
    return frozenset(out)


def _index_rule(name: str, mnemonic: str, counts: dict[int, int],
                reads_written: dict[int, frozenset[int]] | None = None) -> list[str]:
    """``cread b<k> i scope [c=...]``: i < the number of buffers the block reads (writes); the scope one of the
    target's (``SCOPE``, ``_target_rules``).  [consumers] `c=` (TVM's ``consumer_blocks``) names at most the block
    itself, as MetaSchedule writes it (`cread b8 0 shared.dyn c=[b8]`; its CacheWrite never names one): TVM's
    CacheRead segfaults on a consumer list naming the buffer's producer (`cread b1 0 global c=[b0]`, b0 writing what
    b1 reads; session 18's `cread ... shared.dyn c=[b]` crash of the constraint's worker), and which other blocks
    consume the buffer is not known here; nor the block itself for a buffer it also writes (``reads_written``: the
    inner block of a blockized reduction; another segfault of CacheRead)."""
    alts, rules = [], []
    for k, n in sorted(counts.items()):
        if n <= 0:
            continue
        alts.append(f"{name}_b{k}")
        own = f'"b{k}"?' if mnemonic == "cread" else ""
        self_read = (reads_written or {}).get(k, frozenset())
        free = [i for i in range(n) if i not in self_read]
        parts = ["(" + " | ".join(f'" {i}"' for i in free) + f") SCOPE {name}_c{k}?"] if free else []
        if self_read and mnemonic == "cread":  # its own output: a consumer list names no block
            parts.append("(" + " | ".join(f'" {i}"' for i in sorted(self_read)) + f') SCOPE {name}_n{k}?')
            rules.append(f'{name}_n{k}: " c=" "[" "]"')
        rules.append(f'{name}_b{k}: "b{k}" (' + " | ".join(parts) + ")")
        rules.append(f'{name}_c{k}: " c=" "[" {own} "]"')  # the space before an option: `_option_rules`
    rules.insert(0, f'{name}: "{mnemonic}" (' + (" | ".join(alts) if alts else f"NEVER{name.upper()}") + ")")
    if not alts:
        rules.append(f"NEVER{name.upper()}: {NEVER}")
    return rules


def _buffer_rules(state: ScheduleState) -> list[str]:
    """[buffer indices] ``reindex b<k> r<i>|w<i>`` and ``layout b<k> r<i>|w<i> ..``: i below the block's reads
    (writes); ``scope``/``setdtype``/``align b<k> i ..``: i below its writes (TVM's SetScope, UnsafeSetDType and
    StorageAlign take a write buffer's index).  A block with no such buffer (the root) is not named."""
    rules, bufs, writes = [], [], []
    for k in sorted(state.blocks):
        r, w = state.n_reads.get(k, 0), state.n_writes.get(k, 0)
        if r + w > 0:
            bufs.append(f"xbuf_b{k}")
            rules.append(f'xbuf_b{k}: "b{k}" (' + " | ".join([f'" r{i}"' for i in range(r)] +
                                                              [f'" w{i}"' for i in range(w)]) + ")")
        if w > 0:
            writes.append(f"xwrite_b{k}")
            rules.append(f'xwrite_b{k}: "b{k}" (' + " | ".join(f'" {i}"' for i in range(w)) + ")")
    rules.append("xbuf: " + (" | ".join(bufs) if bufs else "NEVERXBUF"))
    rules.append("xwrite: " + (" | ".join(writes) if writes else "NEVERXWRITE"))
    rules += [f"NEVERXBUF: {NEVER}", f"NEVERXWRITE: {NEVER}"]
    rules += [_fixed_form(_narrowed(name, old, new)) for name, (old, new) in _BUFFER_KINDS.items()
              if name != "k_scope"]
    rules.append(_fixed_form(_narrowed("k_scope", "BREF INT name", "xwrite SCOPE")))
    return rules


# [target] The storage scopes and thread axes a kernel of the target may use.  TVM's CacheRead, CacheWrite and SetScope
# take any scope name its StorageScope parses and Bind any thread tag, and refuse an unknown one only when applied
# (session 18's CPU sealed runs: `cread b5 1 grocast`, `bind l19 l7`, retries spent on them).  On a CPU target there
# are no GPU threads: a kernel with a blockIdx/threadIdx binding left in it does not build for llvm ("Unknown device
# id in current IR", "not implemented": 27 of the 29 build errors of session 18's retries arm, 336 attempts), and
# shared or warp memory has no meaning there (session 18's one NaN-poisoned wrong result: `shared`/`shared.dyn` on
# llvm).  MetaSchedule's llvm search space binds nothing and caches in `global` only (the committed llvm records);
# virtual threads (InjectVirtualThread) and `local` buffers lower on any target and stay allowed.
GPU_SCOPES = ("global", "shared", "shared.dyn", "local", "warp", "wmma.matrix_a", "wmma.matrix_b",
              "wmma.accumulator", "m16n8k8.matrixA", "m16n8k8.matrixB", "m16n8k8.matrixC")
CPU_SCOPES = ("global", "local")


def _compute_at_rules(state: ScheduleState) -> list[str]:
    """[compute-at] `at b l` / `rat b l`: l one of the loops TVM's checks take for b (in b's scope, not above it, and
    with every consumer of b under it for `at` (``ScheduleState.compute_at``), every producer for `rat`
    (``reverse_compute_at``)); the codec's rule (any loop, no root) where those are not known.  [move once] Never a
    block an `at`/`rat` line moved, on a GPU (``_moved``)."""
    if state.compute_at is None:
        return [_fixed_form(_base_rule("k_at")), _fixed_form(_base_rule("k_rat"))]
    rules = []
    for name, tag, table in (("k_at", "cat", state.compute_at),
                             ("k_rat", "crat", state.reverse_compute_at if state.reverse_compute_at is not None
                              else state.compute_at)):
        alts = []
        for k, loops in sorted(table.items()):
            if k in state.blocks and loops and k not in _moved(state):  # [move once]
                alts.append(f"{tag}_b{k}")
                rules.append(f'{tag}_b{k}: "b{k}" (' + " | ".join(f'" l{m}"' for m in loops) + ")")
        rules += [_narrowed(name, "BREF LREF", "(" + " | ".join(alts) + ")")] if alts else _unreachable(name)
    return rules


def _scope_forms(scopes: tuple[str, ...]) -> list[str]:
    """Each scope as the codec's ``name`` field reads it: bare, and quoted."""
    return [f for s in scopes for f in (s, json.dumps(s))]


def _target_rules(state: ScheduleState) -> list[str]:
    """``SCOPE``: the storage scopes of the state's target (``ScheduleState.cpu``)."""
    return ["SCOPE: " + _alts(_scope_forms(CPU_SCOPES if state.cpu else GPU_SCOPES))]


def key_forms(key: str) -> list[str]:
    """Every way the codec's decoder reads as annotation key ``key`` (``codec.script``'s key field): its table
    abbreviation, ``.rest`` for ``meta_schedule.rest``, the bare word (one that is no abbreviation), quoted."""
    forms = []
    if key in KEY_ABBREV:
        forms.append(KEY_ABBREV[key])
    rest = key[len(MS_KEY_PREFIX):]
    if key.startswith(MS_KEY_PREFIX) and NAME_RE.match(rest):
        forms.append("." + rest)
    if NAME_RE.match(key) and key not in KEY_FULL:
        forms.append(key)
    forms.append(json.dumps(key))
    return forms


# [annotation keys] Where MetaSchedule's schedule rules and post-processors annotate each key of the codec's table: on
# the root block (ParallelVectorizeUnroll; the unroll keys on any block, below), on another block (the tiling rules,
# RandomComputeLocation, RewriteLayout) or on a loop (RewriteParallelVectorizeUnroll's pragmas, the software pipeline),
# and for which targets (the GPU rules bind threads and fetch cooperatively; the CPU ones parallelize and rewrite
# layouts).  The line grammar holds to it on GPU targets (``_gpu_once_rules``).  Every `ann` of the H200, t64
# and llvm harvests (1,911 traces, 18 keys) is a key of this table at its place and target; the `ann .. cat` folds are
# the `CATEGORICAL_KEYS` only (3,008 cooperative fetches, 1,904 unrolls); no block is annotated again with a key it
# carries, nor with both unroll keys (a loop may be: RewriteParallelVectorizeUnroll writes its pragmas on the outer loop
# of every block, once for each of the blocks that share it).  Any other key is one TVM's passes do not read (the line
# changes nothing); a key again on a block overwrites the earlier line.  Session 32's H100 A/B had an attempt write
# `ann l5 successivlycyclec []`, `ann l8 minthreads 32` and `ann b1 maxthreads 1024` five times on its way to the step
# cap (its row the batch's last for 764 of 2,150 steps); with the keys narrowed to the table only, session 33's sealed
# run had attempts walk the table (`ann b3 unroll cat ..`, `unroll_implicit cat`, `preproc cat`, `producer cat`,
# `minthreads cat`, `parallel cat` on one block of a CUDA kernel, one line each) until the step cap.
# The unroll keys go on any block: MetaSchedule writes them on the root, but TVM post-processes them on any block, and 5
# of that sealed run's 88 correct attempts unroll a block that is not the root (one of each per block still ends the
# walk: the other keys on it are another target's, or not sampled).
ANNOTATION_PLACES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "meta_schedule.unroll_explicit": (("root", "block"), ("cpu", "gpu")),
    "meta_schedule.unroll_implicit": (("root", "block"), ("cpu", "gpu")),
    "meta_schedule.parallel": (("root",), ("cpu",)),
    "meta_schedule.vectorize": (("root",), ("cpu",)),
    "meta_schedule.tiling_structure": (("block",), ("cpu", "gpu")),
    "meta_schedule.auto_tensorize": (("block",), ("cpu", "gpu")),
    "meta_schedule.auto_tensorize_init": (("block",), ("cpu", "gpu")),
    "warp_execution": (("block",), ("gpu",)),
    "meta_schedule.thread_extent_low_inclusive": (("block",), ("gpu",)),
    "meta_schedule.thread_extent_high_inclusive": (("block",), ("gpu",)),
    "meta_schedule.cooperative_fetch": (("block",), ("gpu",)),
    "meta_schedule.random_compute_producer": (("block",), ("cpu",)),
    "meta_schedule.layout_rewrite_preproc": (("block",), ("cpu",)),
    "pragma_auto_unroll_max_step": (("loop",), ("cpu", "gpu")),
    "pragma_unroll_explicit": (("loop",), ("cpu", "gpu")),
    "software_pipeline_stage": (("loop",), ("gpu",)),
    "software_pipeline_order": (("loop",), ("gpu",)),
    "software_pipeline_async_stages": (("loop",), ("gpu",)),
}
# the keys MetaSchedule annotates with a sampled value (`ann .. cat`), and the two unroll keys, of which it writes one
CATEGORICAL_KEYS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit", "meta_schedule.cooperative_fetch")
# [fetch lanes] ``ann <block> fetch``: only as MetaSchedule writes it, sampled from the vector lanes its tiling rules offer
# (``cat lanes = k``, ``cat lanes8 = k``: 1,920 cooperative fetches of the H200 harvest, every one such a sample, folded
# into its `ann` line).  TVM's RewriteCooperativeFetch divides by the annotated lanes: a fetch of 0 (`ann b3 fetch cat
# unroll_gpu = 0`, the unroll list's first candidate) ends its process with SIGFPE at `post *`.  Session 38's H100 A/B
# had an attempt write one 37 lines before the token budget cut it; finishing it tried 25 prefixes, each crashing a
# TVM worker that then started again: 71 s of the constrained arm's 173, the batch waiting for its last process.
FETCH_KEY = "meta_schedule.cooperative_fetch"
FETCH_LANES = ("lanes", "lanes8")
_EXCLUSIVE = {"meta_schedule.unroll_explicit": "meta_schedule.unroll_implicit",
              "meta_schedule.unroll_implicit": "meta_schedule.unroll_explicit"}


def keys_at(place: str, cpu: bool) -> tuple[str, ...]:
    """The keys allowed at ``place`` ("root", "block": another block, "loop") on a CPU or a GPU target."""
    target = "cpu" if cpu else "gpu"
    return tuple(k for k, (at, targets) in ANNOTATION_PLACES.items() if place in at and target in targets)


def _gpu_once_rules(state: ScheduleState) -> bool:
    """Whether the annotation-key and move-once rules hold for ``state``: on a GPU target, unless switched off
    (``ScheduleState.any_annotation``).  They came from the GPU's stragglers, and every correct attempt of the stored H200
    and H100 runs keeps the key rules (15 of 1,548 moved a block twice, then scored correct).  On a CPU the tiny model's
    correct attempts rely on what they forbid (5,372 of 10,411 in the stored CPU sealed runs: `parallel`/`vectorize` on a
    block that is not the root, a block moved twice, a key again), which TVM post-processes into correct kernels; what
    forbidding them does to the CPU sealed set is not measured, so there the codec's rules stay."""
    return not state.any_annotation and not state.cpu


def _moved(state: ScheduleState) -> frozenset[int]:
    """[move once] The blocks `at`/`rat` may not move again: those a line moved (``ScheduleState.block_moved``), on a
    GPU (``_gpu_once_rules``)."""
    return state.block_moved if _gpu_once_rules(state) else frozenset()


def _annotate_rules(state: ScheduleState) -> list[str]:
    """[annotation keys] ``ann <block or loop> <key> <value>``: a key of ``ANNOTATION_PLACES`` at the place and target
    MetaSchedule writes it, on a block or loop one it does not carry yet (nor the other unroll key); ``ann <block> <key>
    cat ..``: the same with a key of ``CATEGORICAL_KEYS``.  The blocks are grouped by the keys left to them (a few
    groups); the key is the encoder's word with the spaces around it (``_key_terminal``: a word run into the variable
    or into the value would be read as one longer word)."""
    if not _gpu_once_rules(state):
        return _codec_annotate_rules()
    groups: dict[tuple[str, ...], list[str]] = {}
    for k in sorted(state.blocks):
        carried = state.annotations.get(f"b{k}", frozenset())
        carried = carried | {_EXCLUSIVE[c] for c in carried if c in _EXCLUSIVE}
        keys = keys_at("root" if k in state.root_blocks else "block", state.cpu)
        left = tuple(key for key in keys if key not in carried)
        if left:
            groups.setdefault(left, []).append(f"b{k}")
    alts, rules = _annotate_loop_rules(state)
    cats: list[str] = []
    for i, (keys, refs) in enumerate(groups.items()):
        rules.append(f"ANNREF{i}: " + _alts(refs))
        plain = tuple(key for key in keys if key != FETCH_KEY)  # [fetch lanes] the fetch is sampled only
        if plain:
            alts.append(f"ANNREF{i} ANNKEY{i}")
            rules.append(f"ANNKEY{i}: " + _key_terminal(plain))
        sampled = tuple(key for key in plain if key in CATEGORICAL_KEYS)
        if sampled:
            cats.append(f'ANNREF{i} ANNCAT{i} "cat" catsel')
            rules.append(f"ANNCAT{i}: " + _key_terminal(sampled))
        if FETCH_KEY in keys:
            cats.append(f'ANNREF{i} ANNFETCH "cat" fetchsel')
    if any(FETCH_KEY in keys for keys in groups):
        rules += [f"ANNFETCH: {_key_terminal((FETCH_KEY,))}", "fetchsel: " + " | ".join(f"cn_{n}" for n in FETCH_LANES)]
    out = ['k_ann: "ann" annto avalue', "annto: " + " | ".join(alts)] if alts else _unreachable("k_ann")
    out += ['k_anncat: "ann" anncatto', "anncatto: " + " | ".join(cats)] if cats else _unreachable("k_anncat")
    return out + rules


_UNPIPELINED = frozenset(LOOP_PIPELINE)  # [drop pipeline] the keys a dropped loop carries, as the mask sees it


def _annotate_loop_rules(state: ScheduleState) -> tuple[list[str], list[str]]:
    """[annotation keys] on loops: ``ann <loop> <key> <value>`` with a loop key the loop does not carry yet (the
    alternatives of ``annto`` and their rules).  Until a loop carries one, every live loop takes them all: `LREF` itself
    (a second list of every loop costs each line's compile, and only the lines after a pipeline's `ann` pay it then).
    Session 40's sealed run had an attempt write `ann l6 order [0 1 2]` four times (TVM overwrites it); no (loop, key)
    of the H200 harvest's 11,538 `Annotate` instructions is annotated twice.  [drop pipeline]: a loop whose pipeline the
    attempt took back (``ScheduleState.loop_unpipelined``) takes none of ``shared_memory.LOOP_PIPELINE`` again.
    [pipeline body] Nor does a loop whose body is not a sequence (``ScheduleState.loop_unsequenced``): while no loop
    carries a key, the others take them from a list of their own (``ANNLSEQ``, the loops MetaSchedule would pipeline:
    a few), every loop the rest from `LREF`."""
    loop_keys = keys_at("loop", state.cpu)
    own = {k: state.annotations.get(f"l{k}", frozenset()) | (_UNPIPELINED if k in state.loop_unpipelined
                                                              else frozenset()) for k in sorted(state.loops)}
    if not any(key in keys for keys in own.values() for key in loop_keys):
        if not state.loops:
            return [], []
        piped = tuple(key for key in loop_keys if key in _UNPIPELINED)
        if not state.loop_unsequenced or not piped:
            return ["LREF ANNKEYL"], [f"ANNKEYL: {_key_terminal(loop_keys)}"]
        alts = ["LREF ANNKEYL"]
        rules = [f"ANNKEYL: {_key_terminal(tuple(key for key in loop_keys if key not in _UNPIPELINED))}"]
        sequenced = [f"l{k}" for k in sorted(state.loops) if k not in state.loop_unsequenced]
        if sequenced:
            alts.append("ANNLSEQ ANNKEYLP")
            rules += ["ANNLSEQ: " + _alts(sequenced), f"ANNKEYLP: {_key_terminal(piped)}"]
        return alts, rules
    carried = {k: keys | (_UNPIPELINED if k in state.loop_unsequenced else frozenset()) for k, keys in own.items()}
    groups: dict[tuple[str, ...], list[str]] = {}
    for k, keys in carried.items():
        left = tuple(key for key in loop_keys if key not in keys)
        if left:
            groups.setdefault(left, []).append(f"l{k}")
    alts, rules = [], []
    for i, (keys, refs) in enumerate(groups.items()):
        alts.append(f"ANNLREF{i} ANNKEYL{i}")
        rules += [f"ANNLREF{i}: " + _alts(refs), f"ANNKEYL{i}: " + _key_terminal(keys)]
    return alts, rules


def _codec_annotate_rules() -> list[str]:
    """`ann` and `ann .. cat` as the codec has them (any key on any block or loop), with [annotation values] only."""
    return ['k_anncat: "ann" ref_bl key "cat" catsel', _narrowed("k_ann", "key value", "key avalue")]


def _key_terminal(keys: tuple[str, ...]) -> str:
    """The keys ``keys`` as the encoder writes them (the codec table's word: ``KEY_ABBREV`` has every one), each with
    the spaces around it.  The decoder reads a key in other forms too (``key_forms``); allowing them all made every
    line grammar's compile 7% dearer, for forms no encoded script has."""
    return _alts([f" {KEY_ABBREV[key]} " for key in keys])


def _unannotate_rules(state: ScheduleState) -> list[str]:
    """[unannotate] ``unann <block or loop> <key>``: a key that block or loop carries (``state.annotations``),
    in any form the decoder reads as it; TVM's Unannotate refuses any other."""
    alts, rules = [], []
    for ref, keys in sorted(state.annotations.items()):
        live = state.blocks if ref[0] == "b" else state.loops
        if int(ref[1:]) not in live or not keys:
            continue
        alts.append(f"unann_{ref}")
        forms = [f for key in sorted(keys) for f in key_forms(key)]
        rules.append(f'unann_{ref}: "{ref}" (' + " | ".join(json.dumps(" " + f) for f in forms) + ")")
    rules.insert(0, 'k_unann: "unann" (' + (" | ".join(alts) if alts else "NEVERUNANN") + ")")
    if not alts:
        rules.append(f"NEVERUNANN: {NEVER}")
    return rules


def _cat_rules() -> list[str]:
    """Candidates then a decision that indexes them: ``cat c1 .. cN [~ p1 .. pN] = k`` with k < N.

    Written as a chain (``cr<n>``: n candidates read; the decision, or one more) and the decision ``k < n``
    as one terminal per n: the same language as one rule per N with N integers and N alternatives, with
    ~30 terminals instead of ~300 (llguidance's compile time grows with the terminal count: this halves
    the compile of every line grammar).  [probabilities] ``~`` gives exactly one probability per candidate
    (``pr<n>``: the decoder's "wrong number of probabilities")."""
    alts, rules = ["SINT cr1"], []
    for n in range(1, MAX_LISTED_CANDIDATES + 1):
        more = f"SINT cr{n + 1}" if n < MAX_LISTED_CANDIDATES else "SINT SINT* probs? decision"
        rules.append(f'cr{n}: pr{n}? "=" DD{n} | {more}')
        rules.append(f"DD{n}: / {_below(n)}/")
        rules.append(f'pr{n}: "~" pf{n}')
        rules.append(f"pf{n}: FLOAT" + (f" pf{n - 1}" if n > 1 else ""))
    for name, cands in sorted(CANDIDATES.items()):
        alts.append(f"cn_{name}")
        rules.append(f'cn_{name}: "{name}" pr{len(cands)}? "=" DD{len(cands)}')
    rules.insert(0, "catsel: " + " | ".join(alts))
    return rules


def _below(n: int) -> str:
    """A regex of the decimal integers 0 .. n-1 (n <= 20), as character classes: the same language as the
    alternation ``(0|1|..|n-1)``, cheaper for llguidance to compile (every line grammar holds 16 of them)."""
    if n <= 10:
        return f"[0-{n - 1}]"
    return f"([0-9]|1[0-{n - 11}])"


@functools.lru_cache(maxsize=1)
def finished_grammar() -> str:
    """After `post *` only the end of the script may follow (blank lines): ``start: _NL*`` with the codec's own
    line-end terminal and ``%ignore``, nothing else (no other rule is reachable from that start, so the
    language is that of the full grammar with this start).  One text for every schedule state: compiled once,
    not once per finished attempt."""
    keep = [line for line in _base_lines() if line.startswith(("_NL:", "%ignore"))]
    return "\n".join([_line_start(False, True)] + keep) + "\n"


def _line_start(first: bool, finished: bool) -> str:
    if finished:  # after `post *` only the end of the script (or blank lines)
        return "start: _NL*"
    if first:  # a script has at least one instruction
        return "start: _NL* inst _NL?"
    return "start: _NL* (inst _NL?)?"


# What the codec's decoder checks beyond its grammar (codec/script.py ``_Decoder`` and ``decode_line``), written
# into the line grammar so that a line the constraint allows is a line the decoder reads (each marked; the list,
# with what stays checked at the end of a line, is in results/constrained-decoding.md, "What the decoder checks"):
_DECODER_RULES = [
    # [int decision] `loc b = k`, `at b = k`, `cat` of many candidates: exactly one integer ("bad decision")
    'decision: "=" SINT',
    # [tile sizes] `ptile`/`tile` decisions are positive ("N positive tile sizes"); `ptile` has its sizes or `n=`,
    # not both (their lengths must agree: the encoder writes `n=` only without a decision)
    'pdecision: "=" PINT+',
    r"PINT: / [1-9][0-9]*/",
    'k_ptile: "ptile" LREF (o_m? pdecision | " n=" NTILE o_m?)',
    "NTILE: /[1-9][0-9]?/",
    # [outputs] a count field is a count: 0..MAX_OUTPUTS (4096) outputs, never negative
    "COUNT: / (409[0-6]|40[0-8][0-9]|[1-3][0-9][0-9][0-9]|[1-9]?[0-9]?[0-9])/",
    'k_outblks: "outblks" ref_bl COUNT',
    'k_loc: "loc" BNROOT decision?',
    'k_atloc: "at" BMOVE decision',
    # [split factors] a literal factor is positive ("All the constant factors are required to be positive": 8 of the
    # lines session 24's CPU sealed seed drew again wrote a 0)
    "factor: NONE | PINT | VREF",
    # [unit loop] AddUnitLoop of the root block fails ("Cannot add loops on top of the root block": 11 lines drawn again
    # in that seed)
    'k_unitloop: "unitloop" (BNROOT | LREF)',
    r"SINT: / -?[0-9]+/",
    # [attribute values] an attribute (`pad b VALUE`, every option but `c=`) holds a literal, never a variable
    # ("a variable cannot be an attribute value"); [identifiers run together] a number after a variable starts
    # with its space: `pad b17 0412` would be read `b170412`, `[v1 2]` as `[v12]` (a narrowed variable list lets
    # the engine end `b17` where the decoder reads on); within a list every number after the first element
    'k_pad: "pad" BNROOT (SINT | SFLOAT | STRING | SYM | NONE | TRUE | FALSE | llist)',
    "list: \"[\" (lelem lrest*)? \"]\"",
    "lelem: INT | FLOAT | STRING | WSYM | BREF | LREF | VREF | NONE | TRUE | FALSE | list",
    "lrest: SINT | SFLOAT | STRING | WSYM | BREF | LREF | VREF | NONE | TRUE | FALSE | list",
    "lvalue: INT | FLOAT | STRING | SYM | NONE | TRUE | FALSE | llist",
    "llist: \"[\" (INT | FLOAT | STRING | WSYM | NONE | TRUE | FALSE | llist)* \"]\"",
    r"SFLOAT: / (-?([0-9]+\.[0-9]*([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|inf)|nan)/",
    # (in a list an intrinsic is any `$name`, as the codec's grammar has it: a narrowed one there would need every
    # element after it spaced, ~0.4 ms more per line grammar compile, for lists that never hold one; the decoder
    # refuses an unknown one when the line ends)
    r"WSYM: /\$[A-Za-z_][A-Za-z0-9_]*/",
    # [strings] a string is JSON (the decoder reads it with json.loads: no control characters, only JSON's escapes)
    r'STRING: /"([^"\\\x00-\x1f]|\\(["\\bfnrt]|u[0-9a-fA-F]{4}))*"/',
    # [tensor intrinsics] `$name` is one the codec knows ("unknown tensor intrinsic")
    "SYM: /\\$(" + "|".join(sorted((re.escape(k[1:]) for k in INTRIN_FULL), key=lambda w: (-len(w), w))) + ")/",
    # [tensorize] Tensorize takes a registered intrinsic ("TensorIntrin 'l58' is not registered"): one the codec
    # abbreviates, or another of TVM's written out (bare or quoted).  Session 24's CPU sealed runs had 5 of 136
    # attempts end on `tensorize b0 shared.dyn`, `tensorize b3 l58` and the like.
    'k_tensorize: "tensorize" ref_bl (SYM | INTRINNAME) o_pui?',
    "INTRINNAME: /(" + "|".join(sorted((re.escape(f) for n in TENSOR_INTRINSICS if n not in INTRIN_ABBREV
                                        for f in (n, json.dumps(n))), key=lambda w: (-len(w), w))) + ")/",
]


def _option_rules() -> list[str]:
    """``o_<name>: " name=" ...``: [identifiers run together] with the space the encoder writes before an option
    (a narrowed block name or intrinsic followed by `fn=`/`pui=` would otherwise be read as one longer word:
    `blk Cfn=...`); [attribute values] a literal for an attribute, a value (variables too) for an input (`c=`)."""
    from little_dragon.codec.kinds import SPECS

    src: dict[str, set[str]] = {}
    for spec in SPECS:
        for o in spec.options:
            src.setdefault(o.name, set()).add(o.src)
    # [tile attributes] `m=`/`n=` of a tile are integers: TVM's SamplePerfectTile crashes the process (SIGSEGV)
    # on `m=_` (found by a random walk under the constraint before this rule)
    # [split/fuse flags] `pui=` (preserve_unit_iters) and `dp=` (disable_predication) are booleans, written 0/1 as
    # MetaSchedule does: TVM's Fuse crashes the process (SIGSEGV) on `pui=_` (the tiny model wrote
    # `fuse l2 l3 pui= _` in session 10's CPU sealed run, and the whole evaluation died)
    # [compute-at index] `i=` of `at`/`rat` is ComputeAt's integer index: TVM ended the constraint's worker (SIGSEGV) on
    # `at b l i=[_true_true_1 2 3]` (session 18's CPU overhead runs, where line retries wrote more lines); no real
    # record writes `i=` (the default, -1)
    # [function name] `fn=` of `blk` names the function GetSBlock looks in, a string: TVM ended the constraint's
    # worker (SIGSEGV) on `blk T_rms_norm fn=[23_truenan93_trueinf_trueinffalse_truenan14 11]` (session 24's CPU
    # sealed runs: 6-12 crashes a run, each an attempt lost); no real record writes `fn=` (the default, "main")
    # [compute-at flag] `pul=` of `at`/`rat` is ComputeAt's boolean preserve_unit_loops: TVM ended the constraint's
    # worker (SIGSEGV) on `at b0 l8 pul= _` (session 37's CPU A/B); no real record writes `pul=` (the default, 1)
    # [function name] and only the one MetaSchedule tunes: its TuneContext holds one function, `main` (GetSBlock:
    # 'candidates are: ["main"]' for any other, 11 lines drawn again in session 24's first CPU sealed seed)
    typed = {"m": "INT", "n": "INT", "pui": "flag", "dp": "flag", "pul": "flag", "i": "INT", "fn": "MAINFN"}
    rules = [f'o_{n}: " {n}=" ' + typed.get(n, "lvalue" if s == {"at"} else "value") for n, s in sorted(src.items())]
    return rules + ["flag: FLAGBIT | TRUE | FALSE", "FLAGBIT: /[01]/", 'MAINFN: /"main"/']


# rules replaced whole (their codec body is the generic one)
_REPLACED = ("start:", "k_blk:", "k_loops:", "k_kids:", "k_prods:", "k_cons:", "k_cread:", "k_cwrite:",
             "k_tile:", "k_cat:", "k_anncat:", "factor:", "decision:", "BREF:", "LREF:", "VREF:",
             "k_reorder:", "k_ptile:", "k_loc:", "k_atloc:", "k_pad:", "k_outblks:", "list:", "SYM:", "STRING:", "o_",
             "k_par:", "k_vec:", "k_bind:", "k_split:", "k_fuse:", "k_inline:", "k_reindex:", "k_layout:",
             "k_scope:", "k_setdtype:", "k_align:", "k_unann:", "k_rfactor:", "k_post:", "k_ann:", "k_at:", "k_rat:",
             "k_tensorize:", "k_unitloop:")


@functools.lru_cache(maxsize=1)
def _fixed_rules() -> str:
    """The part of every line grammar that does not depend on the schedule (built once)."""
    out: list[str] = []
    for line, in_inst in zip(_base_lines(), _inst_lines()):
        if in_inst or line.startswith(_REPLACED):  # `?inst` is every state's own (``_inst_rule``)
            continue
        # llguidance has no terminal priorities; Lark's FLOAT.2 only breaks ties that the parser state
        # (an integer, a float or a name is expected) already decides here
        line = re.sub(r"^([A-Z_]+)\.\d+:", r"\1:", line)
        out.append(_fixed_form(line))
    out += _DECODER_RULES
    out += _option_rules()
    # [candidate lists] a named list is one the codec knows ("unknown candidate list"); a cat without a decision
    # (never in a trace: MetaSchedule decides every sample) is its candidates alone
    out.append('k_cat: "cat" (catsel | SINT+ | CANDNAME)')
    out.append("CANDNAME: " + _alts(sorted(CANDIDATES)))
    # [annotation values] TVM's Annotate takes a literal, a value variable or a list, never a block or loop variable
    # ("Only strings, integers, floats, ExprRVs and Arrays are supported ... gets: s_tir.LoopRV": 3 of 12 apply
    # errors of a session 19 CPU sealed seed, `ann b1bind l6`, `ann b2cons b0`); `k_ann` and `k_anncat` themselves
    # are the state's (``_annotate_rules``)
    out.append("avalue: INT | FLOAT | STRING | SYM | VREF | NONE | TRUE | FALSE | list")
    out += _cat_rules()
    return "\n".join(out) + "\n"


# [root block] the instructions TVM refuses on the function's root block ("The primitive does not operate on the root
# block"; ``ScheduleState.root_blocks``): their block is a ``BNROOT``.  `inline` has its own narrowing (``BINLINE``),
# `prods`/`cons` theirs (``_count_rule``), `loc`/`at b = k`/`pad` are among the decoder rules
_NOT_ON_ROOT = ("k_at:", "k_rat:", "k_rinline:", "k_decomp:")


def _fixed_form(line: str) -> str:
    """A codec rule as every line grammar has it: every integer field of an instruction with its separating space
    (see the module docstring); the block of an instruction TVM refuses on the root a ``BNROOT``."""
    if line.startswith("k_"):
        line = re.sub(r"\bINT\b", "SINT", line)
    if line.startswith(_NOT_ON_ROOT):
        line = line.replace("BREF", "BNROOT", 1)
    if line.startswith("k_blayout:"):  # [blayout once] not the root, nor a block `blayout` transformed (``BLAYOUT``)
        line = line.replace("BREF", "BLAYOUT", 1)
    return line


# [buffer indices] the instructions that name a buffer of a block by its index in the block's reads or writes
# (TVM: "The block ... has N write regions, so `buffer_index` is required to be in [0, N)"); `cread`/`cwrite` have
# theirs in ``_index_rule``.  Syntax only, the codec's rules; with a schedule state, ``_buffer_rules`` narrows each
# rule's block and buffer to a block and one of its reads or writes (``xbuf``) or one of its writes (``xwrite``)
_BUFFER_KINDS = {"k_reindex": ("BREF BUF", "xbuf"), "k_layout": ("BREF BUF", "xbuf"), "k_scope": ("BREF INT", "xwrite"),
                 "k_setdtype": ("BREF INT", "xwrite"), "k_align": ("BREF INT", "xwrite")}


def _base_rule(name: str) -> str:
    """The codec grammar's rule ``name`` (one line), as the decoder has it."""
    rule = next((line for line in _base_lines() if line.startswith(name + ":")), None)
    if rule is None:
        raise KeyError(f"the codec grammar has no rule {name}")
    return rule


def _narrowed(name: str, old: str, new: str) -> str:
    """The codec's rule ``name`` with its ``old`` part written ``new`` (a codec change that drops ``old`` fails
    here, at the first line grammar, instead of silently leaving the rule unnarrowed)."""
    rule = _base_rule(name)
    if old not in rule:
        raise ValueError(f"codec rule changed: {rule!r} has no {old!r} to narrow")
    return rule.replace(old, new, 1)


_SYNTAX_ONLY = "\n".join([
    "BREF: /b[0-9]+/", "BNROOT: /b[0-9]+/", "BLAYOUT: /b[0-9]+/", "BMOVE: /b[0-9]+/", "LREF: /l[0-9]+/", "VREF: /v[0-9]+/",
    'k_blk: "blk" name o_fn?', 'k_loops: "loops" BREF COUNT', 'k_kids: "kids" ref_bl COUNT',
    'k_prods: "prods" BREF COUNT', 'k_cons: "cons" BREF COUNT', 'k_cread: "cread" BREF SINT name o_c?',
    'k_cwrite: "cwrite" BREF SINT name o_c?', 'k_tile: "tile" LREF o_m? pdecision'])
# rules the semantic grammar narrows and the syntax-only one takes as the codec has them
_CODEC_AS_IS = ("k_par", "k_vec", "k_bind", "k_split", "k_fuse", "k_inline")

# the thread axes MetaSchedule binds (the codec's), and those a loop that carries a reduction iter may be bound to
# (cross-thread reduction)
_AXES = tuple(THREAD_FULL)
_THREAD_IDX_AXES = tuple(a for a in _AXES if a.startswith("threadIdx."))
_CPU_AXES = tuple(a for a in _AXES if a.startswith("vthread."))  # [target] a CPU kernel has no GPU threads
_BLOCK_IDX_AXES = tuple(a for a in _AXES if a.startswith("blockIdx."))  # [outermost loop]


def _axis_forms(axes: tuple[str, ...] | list[str]) -> list[str]:
    """Each axis in every form the codec reads: its abbreviation, its name, its name quoted."""
    return [f for a in axes for f in (THREAD_FULL[a], a, f'"{a}"')]


def _parallel_rules(state: ScheduleState, bind_loop: int | None = None) -> list[str]:
    """[par/vec/bind] TVM parallelizes, vectorizes or binds a loop only if every block iter whose binding uses
    it is data parallel (``LPAR``), or binds it to threadIdx.x/y/z when a reduction iter is among them (``TIDX``,
    cross-thread reduction); a loop that carries any other iter kind is none of these (``state.loop_iters``).
    [mixed loop] Nor is a loop that one block uses for both a data-parallel and a reduction iter (``state.loop_mixed``:
    a `fuse` of the two): TVM binds it to threadIdx, and its cross-thread reduction then sums over the data-parallel
    iterations too (session 41's sealed wrong result).
    [nested axes] A loop is not bound to a thread axis already bound on a loop enclosing it or nested in it at
    another extent (``state.loop_nested_axes``): TVM accepts that and lowers it to a kernel that leaves outputs
    unwritten (session 11's sealed wrong results); such a loop takes the other axes it may take (``bn<k>``).
    [bound] A loop already bound to a thread axis is not bound again (``state.loop_bound``: TVM binds it again, no real
    trace does, and a model can repeat the line until its budget ends).
    [bind the fused loop] Right after a `fuse` (``bind_loop``: the loop it made), a `bind` binds that loop: every
    MetaSchedule trace does (its GPU tilings and AutoBind fuse loops, then bind the fused one; 1,137 of 1,137 such pairs
    in the CUDA split's scripts, session 35), and session 34-35's H100 attempts that bound another loop there (a tiling
    of `pad_temp` binding `l21` after `fuse l4 l9 l14 l19` made `l24`) ran 2 threads a thread block, refused at the
    bounds line and taken back to their tiling (``BIND_FUSED`` in ``constrained``; the bench's +nobindfused).
    [outermost loop] On a GPU a data-parallel loop with no loop above it (``state.loop_top``) is bound to a blockIdx
    axis only: bound to a threadIdx or virtual thread there, with no blockIdx loop over its blocks, `post *`'s
    RewriteUnboundBlock finds no loop to fuse for blockIdx.x and raises (session 38-39's main line retry).  Every bind
    of such a loop in the H200 harvest and the committed CUDA databases is to blockIdx (1,874), threadIdx and vthread
    bind inner loops only (2,803; ``OUTERMOST_BLOCK_IDX`` in ``constrained``; the bench's +noouterbx).  A reduction
    loop there keeps threadIdx (a cross-thread reduction): the post-processor puts a unit loop above it for blockIdx."""
    kind, nested = state.loop_iters, state.loop_nested_axes
    par = [k for k in sorted(state.loops) if kind.get(k, "S") == "S"]
    # [mixed loop] a loop one block uses for a data-parallel and a reduction iter takes no thread axis either
    red = [k for k in sorted(state.loops) if kind.get(k, "S") == "R" and k not in state.loop_mixed]
    free_par = [k for k in par if k not in state.loop_bound]
    free_red = [k for k in red if k not in state.loop_bound]
    all_axes, tidx_axes = (_CPU_AXES, ()) if state.cpu else (_AXES, _THREAD_IDX_AXES)  # [target]: no GPU threads
    rules = ['k_par: "par" LPAR', 'k_vec: "vec" LPAR', "LPAR: " + _alts([f"l{k}" for k in par]),
             "TIDX: " + _alts(_axis_forms(tidx_axes)), "AXIS: " + _alts(_axis_forms(all_axes))]
    if bind_loop is not None:
        free_par = [k for k in free_par if k == bind_loop and all_axes]
        free_red = [k for k in free_red if k == bind_loop and tidx_axes]
        if not free_par and not free_red:  # the fused loop takes no axis here: no `bind` line (not a dead end)
            return rules + _unreachable("k_bind")
    top = frozenset() if state.cpu else state.loop_top  # [outermost loop]: its data-parallel loops take blockIdx only
    bind = ["BPAR AXIS", "BRED TIDX"]
    narrowed: set[int] = set()  # loops with a rule of their own (``bn<k>``): out of BPAR/BRED
    for axes, loops in ((all_axes, free_par), (tidx_axes, free_red)):
        for k in loops:
            outer = axes is all_axes and k in top
            if (nested.get(k) or outer) and axes:
                allowed = [a for a in (_BLOCK_IDX_AXES if outer else axes) if a not in nested.get(k, ())]
                narrowed.add(k)
                if not allowed and outer:  # no axis left: not offered at all (a loop with nothing after it: dead end)
                    continue
                rules.append(f'bn{k}: "l{k}" (' + _alts(_axis_forms(allowed)) + ")")
                bind.append(f"bn{k}")
    rules += ['k_bind: "bind" (' + " | ".join(bind) + ")",
              "BPAR: " + _alts([f"l{k}" for k in free_par if k not in narrowed]),
              "BRED: " + _alts([f"l{k}" for k in free_red if k not in narrowed])]
    return rules


def _split_fuse_rules(state: ScheduleState) -> list[str]:
    """[split/fuse] TVM's Split and Fuse refuse a loop with an annotation or a thread binding
    (``state.loop_pinned``), and Fuse joins a loop only with the loop that is its whole body, outer to inner
    (``state.loop_child``): `fuse` takes a chain ``fc<k>`` = l<k>, then optionally a chain of its only child.
    (The rest of TVM's checks, a loop starting at 0 and extents independent of the outer loops, hold for every
    loop MetaSchedule's schedules have; TVM's verdict at the line end covers them.)"""
    free = [k for k in sorted(state.loops) if k not in state.loop_pinned]
    if not free:  # no such line at all (a keyword with nothing allowed after it would be a dead end)
        return _unreachable("k_split") + _unreachable("k_fuse")
    rules = [_narrowed("k_split", "LREF", "LFREE"), "LFREE: " + _alts([f"l{k}" for k in free])]
    chains = []
    for k in free:
        kids = [c for c in state.loop_child.get(k, ()) if c in state.loops and c not in state.loop_pinned]
        rules.append(f'fc{k}: "l{k}"' + (" (" + " | ".join(f"fc{c}" for c in kids) + ")?" if kids else ""))
        chains.append(f"fc{k}")
    rules.append(_narrowed("k_fuse", "LREF+", "(" + " | ".join(chains) + ")"))
    return rules


def _rfactor_rules(state: ScheduleState) -> list[str]:
    """[rfactor] ``rfactor l<k> a``: a loop TVM's RFactor takes (``state.loop_rfactor``: serial, alone above a reduction
    block, touched by none of its data-parallel iters, ...), the factor axis a in [-(ndim + 1), ndim] for the block's
    write buffer of ndim dimensions (TVM's FactorAxisOutOfRangeError), written as the encoder writes an integer."""
    loops = dict(sorted(state.loop_rfactor.items()))  # live loops only (``state_of``)
    if not loops:
        return _unreachable("k_rfactor")
    rules, alts = [], []
    for k, n in loops.items():
        alts.append(f"rf{k}")
        rules.append(f'rf{k}: "l{k}" ' + (f"RFAX{n}" if n <= 8 else "SINT"))
    for n in sorted({n for n in loops.values() if n <= 8}):
        rules.append(f"RFAX{n}: / (-[1-{n + 1}]|[0-{n}])/")
    return [_narrowed("k_rfactor", "LREF INT", "(" + " | ".join(alts) + ")")] + rules


def _unreachable(name: str) -> list[str]:
    """Rule ``name`` with no sentence: its first terminal matches nothing, so not even its keyword is allowed (a
    keyword that nothing may follow would let an attempt write it and then end at a dead end)."""
    never = "NEVER" + name.upper()
    return [f"{name}: {never}", f"{never}: {NEVER}"]


def _reorder_rule(derived: bool) -> str:
    """[`reorder *`] only right after the `tile` lines of a multi-level tiling that ``codec.derive`` orders
    (the decoder's "`reorder *` follows the `tile` lines ... expected a `tiling` annotation"): known from the
    decoded prefix when the line starts."""
    return 'k_reorder: "reorder" ' + ("(LREF+ | DERIVED)" if derived else "LREF+")


def state_key(state: ScheduleState | None) -> tuple | None:
    """Everything of ``state`` a line grammar depends on, hashable (equal keys: equal grammars)."""
    if state is None:
        return None
    return (tuple(sorted(state.blocks.items())), tuple(sorted(state.loops.items())), state.n_values,
            tuple(state.block_names), tuple(sorted(state.n_loops_above.items())),
            tuple(sorted(state.n_children.items())), tuple(sorted(state.n_producers.items())),
            tuple(sorted(state.n_consumers.items())), tuple(sorted(state.n_reads.items())),
            tuple(sorted(state.n_writes.items())), tuple(sorted(state.loop_iters.items())),
            tuple(sorted(state.loop_mixed)), tuple(sorted(state.loop_unpipelined)), tuple(sorted(state.loop_unsequenced)),
            tuple(sorted(state.loop_child.items())), tuple(sorted(state.loop_pinned)), tuple(sorted(state.loop_bound)),
            tuple(sorted(state.lookup_run)), tuple(sorted(state.loop_tiled)), tuple(sorted(state.block_relaid)),
            tuple(sorted(state.block_moved)), state.any_annotation,
            tuple(sorted((k, tuple(sorted(v))) for k, v in state.reads_written.items())),
            tuple(sorted(state.not_inlinable)),
            tuple(sorted((k, tuple(sorted(v))) for k, v in state.loop_nested_axes.items())),
            tuple(sorted(state.root_blocks)), tuple(sorted((k, tuple(sorted(v))) for k, v in state.annotations.items())),
            tuple(sorted(state.loop_rfactor.items())), tuple(sorted(state.loop_top)), state.unchanged, state.half_bound,
            state.cpu,
            state.lookups_capped,
            tuple(sorted(state.compute_at.items())) if state.compute_at is not None else None,
            tuple(sorted(state.reverse_compute_at.items())) if state.reverse_compute_at is not None else None)


def line_grammar(state: ScheduleState | None, first: bool = False, finished: bool = False,
                 reorder_derived: bool = True, tile_counts: tuple[int, ...] = (),
                 tile_loops: frozenset[int] = frozenset(), tile_threads: tuple[int, ...] = (),
                 bind_loop: int | None = None) -> str:
    """The Lark grammar (llguidance's dialect: the codec's, unchanged syntax) of the next line.

    ``state`` None: syntax only (no workload known, or the facts could not be computed).  ``reorder_derived``:
    whether the decoded prefix ends in tile lines that `reorder *` can follow (``codec.derive.tiling_reorder``;
    ``reorder_derivable``); False forbids `reorder *` (an explicit `reorder` of loops stays allowed).
    ``tile_counts``/``tile_loops``: inside a multi-level tiling (``tiling_run``), its (S, R) level counts and the
    loops (script indices) whose `tile` line has the count of its iter kind; ``tile_threads``: its thread bounds and
    the thread factors so far (``tiling_threads``), on a GPU target.  ``bind_loop``: the loop the line before made
    by `fuse` (script index): a `bind` line binds it (``_parallel_rules``)."""
    if finished:
        return finished_grammar()
    order = _order_key(reorder_derived, tile_counts, tile_loops, tile_threads, bind_loop)
    return _line_grammar(state_key(state), state, first, finished, order)


def _order_key(reorder_derived: bool, tile_counts: tuple[int, ...], tile_loops: frozenset[int],
               tile_threads: tuple[int, ...], bind_loop: int | None = None) -> tuple:
    """The order rules of a line as one hashable key (``_semantic_text`` unpacks it): a run's loops and thread
    bounds count only inside a tiling run."""
    return (reorder_derived, tuple(tile_counts), frozenset(tile_loops) if tile_counts else frozenset(),
            tuple(tile_threads) if tile_counts else (), bind_loop)


def reorder_derivable(trace_json: list) -> bool:
    """Would `reorder *` decode after the decoded prefix ``trace_json`` (the decoder's own derivation)."""
    from little_dragon.codec.derive import tiling_reorder

    return tiling_reorder(trace_json[0]) is not None


def _line_grammar(key: tuple | None, state: ScheduleState | None, first: bool, finished: bool,
                  order: tuple = (True, (), frozenset(), (), None)) -> str:
    hit = _MEMO.get((key, first, finished, order))
    if hit is None:
        hit = _fixed_rules() + _line_start(first, finished) + "\n" + _semantic_text(key, state, order)
        if len(_MEMO) > 4096:
            _MEMO.clear()
        _MEMO[(key, first, finished, order)] = hit
    return hit


def _semantic_text(key: tuple | None, state: ScheduleState | None, order: tuple) -> str:
    hit = _MEMO.get(("semantic", key, order))
    if hit is None:
        reorder_derived, counts, loops, threads, bind_loop = order
        hit = _MEMO[("semantic", key, order)] = _semantic_rules(state, counts, loops, reorder_derived, threads,
                                                                bind_loop) + "\n"
    return hit


_MEMO: dict[tuple, Any] = {}


# ------------------------------------------------------------------------------------------- one kind's grammar
# A line is one instruction: its grammar's language is the union, over the instruction kinds (``?inst``'s
# alternatives ``k_<mnemonic>``), of the lines of that kind.  ``LineKinds`` gives the grammar of one kind alone (the
# line grammar's rules that kind reaches, the same start, white space and line end): the same language restricted to
# lines of that kind, for ~1.3 ms of llguidance matcher instead of ~4.8 ms for the whole line grammar (the tiny
# model's 2,048 tokens; ~0.9 vs ~4.2 ms of grammar alone).  The constraint checks a sampled token on the kinds its
# line can still be (``constrained.ScriptConstraint.allows``).
_LEXEME = re.compile(r'"(?:[^"\\\n]|\\.)*"i?|/(?:[^/\\\n]|\\.)+/[imslux]*|([A-Za-z_][A-Za-z0-9_]*)|.', re.S)
_RULE_HEAD = re.compile(r"[?!]?([A-Za-z_][A-Za-z0-9_]*)(?:\.-?\d+)?\s*:")


def rule_graph(text: str) -> tuple[dict[str, tuple[str, frozenset[str]]], list[str]]:
    """A Lark grammar text as ``{rule or terminal: (its text, the names its body uses)}`` and its ``%`` directives.
    A rule's continuation lines start with white space; names inside string literals and regexes are not uses (an
    alias after ``->`` counts as one: it names no rule, so it adds nothing)."""
    rules: dict[str, list[str]] = {}
    directives: list[str] = []
    name = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("%"):
            directives.append(line)
            continue
        head = None if line[:1] in (" ", "\t") else _RULE_HEAD.match(line)
        if head is not None:
            name = head.group(1)
            rules[name] = [line]
        elif name is not None:
            rules[name].append(line)
    return {n: _rule_uses("\n".join(lines)) for n, lines in rules.items()}, directives


def _rule_uses(rule: str) -> tuple[str, frozenset[str]]:
    """``(rule, the names its body uses)``, cached by the rule's text: consecutive schedule states rewrite only the
    rules of what a line changed, and scanning every rule of every state was ~2.7 ms a state (the tiny model's
    pass: 0.45 of 3.7 s)."""
    hit = _USES.get(rule)
    if hit is None:
        body = rule[_RULE_HEAD.match(rule).end():]
        hit = (rule, frozenset(m.group(1) for m in _LEXEME.finditer(body) if m.group(1)))
        if len(_USES) > 65536:
            _USES.clear()
        _USES[rule] = hit
    return hit


_USES: dict[str, tuple[str, frozenset[str]]] = {}


def _uses(directives: list[str]) -> set[str]:
    return {m.group(1) for d in directives for m in _LEXEME.finditer(d.partition(" ")[2]) if m.group(1)}


@functools.lru_cache(maxsize=1)
def _fixed_graph() -> tuple[dict[str, tuple[str, frozenset[str]]], tuple[str, ...]]:
    """``rule_graph`` of the fixed rules and their directives."""
    graph, directives = rule_graph(_fixed_rules())
    return graph, tuple(directives)


_KEYWORD = re.compile(r'\s*"([a-z]+)"')
_TILE_LOOP = re.compile(r"tile[ \t]*l(\d+)(?=[^0-9])")


class LineKinds:
    """The instruction kinds a line may be in one schedule state, by keyword, and the grammar of each alone.

    ``keywords``: mnemonic -> the kinds whose lines start with it (``ann`` is ``k_ann`` and ``k_anncat``; a kind the
    state leaves no line of, ``_unreachable``, has none and is left out).  ``grammar(kind)``: ``start: _NL* kind
    _NL?`` with the rules and terminals it reaches and the grammar's directives (``%ignore``), as text."""

    def __init__(self, semantic: str):
        fixed, directives = _fixed_graph()
        own, more = rule_graph(semantic)
        self._graph = {**fixed, **own}
        kinds = sorted(k for k in self._graph["inst"][1] if k.startswith("k_"))  # the kinds with a line to write
        self._directives = list(directives) + more
        self._texts: dict[str, str] = {}
        self._tiles: dict[str, str] | None = None
        self.keywords: dict[str, tuple[str, ...]] = {}
        for k in kinds:
            m = _KEYWORD.match(self._graph[k][0].partition(":")[2])
            if m is not None:
                self.keywords[m.group(1)] = self.keywords.get(m.group(1), ()) + (k,)

    def kinds_for(self, line: bytes) -> list[str]:
        """The kinds a line that starts with ``line`` may be, by its first word: a keyword that ``line`` starts
        with, or one that starts with ``line`` (a keyword still being written).  A line starts with its keyword (no
        white space before it: ``constrained.restrict_whitespace``), and the keyword may run into the next field
        (``%ignore`` makes the space optional), so ``blkroot`` may be ``blk root``.

        A `tile` line whose loop is written (``tile l3`` and a byte that is not a digit) is kind ``k_tile@tl3``: the
        `tile` lines of that loop alone (``grammar``).  Past that prefix its lines are exactly the `tile` kind's, so
        its grammar answers as the kind's does; it is much smaller and the same in every state where that loop's
        extent and tiling are (``k_tile`` lists every live loop: it changed with nearly every line)."""
        text = line.decode("latin-1")
        out = [k for w, ks in self.keywords.items() if text.startswith(w) or w.startswith(text) for k in ks]
        m = _TILE_LOOP.match(text) if "k_tile" in out else None
        if m is not None:
            alt = self._tile_alternatives().get(m.group(1))
            if alt is not None:
                out = [f"k_tile@{alt}" if k == "k_tile" else k for k in out]
        return out

    def _tile_alternatives(self) -> dict[str, str]:
        """Loop number -> the `tile` kind's alternative for that loop (``tl<k>``, or ``tg<k>``: unknown extent)."""
        if self._tiles is None:
            uses = self._graph["k_tile"][1] if "k_tile" in self._graph else frozenset()
            self._tiles = {n[2:]: n for n in uses if n[:2] in ("tl", "tg") and n[2:].isdigit()}
        return self._tiles

    def grammar(self, kind: str) -> str:
        hit = self._texts.get(kind)
        if hit is None:
            base, _, alt = kind.partition("@")
            graph = self._graph
            if alt:  # one loop's `tile` lines: the kind's rule narrowed to that loop's alternative
                graph = {**graph, base: (f'{base}: "tile" {alt}', frozenset({alt}))}
            seen, todo = set(), [base, "_NL"] + sorted(_uses(self._directives))
            while todo:
                n = todo.pop()
                if n in seen or n not in graph:
                    continue
                seen.add(n)
                todo += graph[n][1]
            body = [graph[n][0] for n in sorted(seen)]
            hit = self._texts[kind] = "\n".join([f"start: _NL* {base} _NL?", *body, *self._directives]) + "\n"
        return hit


def line_kinds(state: ScheduleState, reorder_derived: bool = True, tile_counts: tuple[int, ...] = (),
               tile_loops: frozenset[int] = frozenset(), tile_threads: tuple[int, ...] = (),
               bind_loop: int | None = None) -> LineKinds:
    """``LineKinds`` of the line grammar ``line_grammar(state, ..)`` (not first or finished: the kinds are the same;
    the start rule differs only in the empty line, which a kind's grammar never needs)."""
    order = _order_key(reorder_derived, tile_counts, tile_loops, tile_threads, bind_loop)
    key = ("kinds", state_key(state), order)
    hit = _MEMO.get(key)
    if hit is None:
        hit = _MEMO[key] = LineKinds(_semantic_text(state_key(state), state, order))
    return hit


def _semantic_rules(state: ScheduleState | None, tile_counts: tuple[int, ...] = (),
                    tile_loops: frozenset[int] = frozenset(), reorder_derived: bool = True,
                    tile_threads: tuple[int, ...] = (), bind_loop: int | None = None) -> str:
    if state is None:
        return "\n".join([_SYNTAX_ONLY, *(_base_rule(r) for r in _CODEC_AS_IS), _base_rule("k_unann"),
                          *_codec_annotate_rules(),
                          _fixed_form(_base_rule("k_rfactor")), _base_rule("k_post"),
                          _fixed_form(_base_rule("k_at")), _fixed_form(_base_rule("k_rat")),
                          *(_fixed_form(_base_rule(r)) for r in _BUFFER_KINDS), _reorder_rule(reorder_derived),
                          _inst_rule(all_kinds())])
    out: list[str] = []
    out.append("BREF: " + _alts([f"b{k}" for k in sorted(state.blocks)]))
    out.append("BNROOT: " + _alts([f"b{k}" for k in sorted(state.blocks) if k not in state.root_blocks]))
    # [blayout once] MetaSchedule transforms a block's layout once (``ScheduleState.block_relaid``)
    out.append("BLAYOUT: " + _alts([f"b{k}" for k in sorted(state.blocks)
                                    if k not in state.root_blocks and k not in state.block_relaid]))
    # [move once] MetaSchedule moves a block once (``_moved``): `at b = k` of another block
    out.append("BMOVE: " + _alts([f"b{k}" for k in sorted(state.blocks)
                                  if k not in state.root_blocks and k not in _moved(state)]))
    out.append("LREF: " + _alts([f"l{k}" for k in sorted(state.loops)]))
    out.append("VREF: " + _alts([f"v{k}" for k in range(state.n_values)]))
    names = []
    seen = _looked_up_names(state.lookup_run)
    for n in state.block_names:
        if n in seen:  # [repeated lookup] `blk n` again in its run of lookups (``ScheduleState.lookup_run``)
            continue
        names.append(json.dumps(n))
        if NAME_RE.match(n):
            names.append(n)
    # [lookups] no `blk` after a run of LOOKUP_RUN_FACTOR x (block names) of them (``ScheduleState.lookups_capped``)
    out += _unreachable("k_blk") if state.lookups_capped or not names else ['k_blk: "blk" BLKNAME o_fn?']
    if names:
        out.append("BLKNAME: " + _alts(names))
    run = state.lookup_run
    out += _count_rule("k_loops", "loops", state.n_loops_above, skip=_looked_up(run, "loops", state.n_loops_above))
    out += _count_rule("k_kids", "kids", state.n_children, loops=True,
                       skip=_looked_up(run, "kids", state.n_children))
    out += _count_rule("k_prods", "prods", state.n_producers,
                       skip=state.root_blocks | _looked_up(run, "prods", state.n_producers))
    out += _count_rule("k_cons", "cons", state.n_consumers,
                       skip=state.root_blocks | _looked_up(run, "cons", state.n_consumers))
    out += _index_rule("k_cread", "cread", state.n_reads, state.reads_written)
    out += _index_rule("k_cwrite", "cwrite", state.n_writes)
    out += _buffer_rules(state)
    out += _target_rules(state)
    out += _compute_at_rules(state)
    out += _unannotate_rules(state)
    out += _annotate_rules(state)
    # [tile once] a loop a `tile` line made is not tiled again (``ScheduleState.loop_tiled``)
    out += _tile_rules({k: e for k, e in state.loops.items() if k not in state.loop_tiled}, tile_counts, tile_loops,
                       state.loop_iters, tile_threads)
    out += _parallel_rules(state, bind_loop)
    out += _split_fuse_rules(state)
    out += _rfactor_rules(state)
    # [no-op] `post` (the script's end) only once the prefix has changed the kernel: else the evaluator's no_op;
    # [half bound] nor while a block is under a blockIdx loop and no threadIdx one (RewriteUnboundBlock refuses it)
    out += _unreachable("k_post") if state.unchanged or state.half_bound else [_base_rule("k_post")]
    # [inline] TVM's ComputeInline refuses the root, a block with an init statement and an output block
    inlinable = [f"b{k}" for k in sorted(state.blocks) if k not in state.not_inlinable]
    out += ([_narrowed("k_inline", "BREF", "BINLINE"), "BINLINE: " + _alts(inlinable)] if inlinable
            else _unreachable("k_inline"))
    out.append(_reorder_rule(reorder_derived))
    out.append(_inst_rule(_productive_kinds("\n".join(out))))
    return "\n".join(out)


# ------------------------------------------------------------------------------- kinds with a line to write
# [dead ends] An instruction whose rule can write no complete line in this state (`unroll` with no loop, `rat b3` with
# no loop, `unann` with nothing annotated: a variable terminal with no variable, ``NEVER``) is left out of ``?inst``.
# llguidance does not prune such rules: it allowed the keyword, then no token but white space (the tiny model's
# `unroll ` after `blk root`: 19 of 39 first-pass rejections of a sealed CPU run, session 18).  Found by a
# productivity pass over the line grammar (a rule is productive when some expansion has only productive parts).
_INST_HEAD = re.compile(r"\?inst:")


@functools.lru_cache(maxsize=1)
def all_kinds() -> tuple[str, ...]:
    """The codec's instruction kinds, ``?inst``'s alternatives in its order."""
    return tuple(k for line, on in zip(_base_lines(), _inst_lines()) if on for k in re.findall(r"\bk_[a-z]+\b", line))


@functools.lru_cache(maxsize=1)
def _inst_lines() -> tuple[bool, ...]:
    """For each line of the codec grammar, whether it is part of ``?inst`` (its head, or a continuation line after it)."""
    out, on = [], False
    for line in _base_lines():
        on = bool(_INST_HEAD.match(line)) or (on and line[:1] in (" ", "\t"))
        out.append(on)
    return tuple(out)


def _inst_rule(kinds: list[str] | tuple[str, ...]) -> str:
    return "?inst: " + " | ".join(kinds)


def _productive_kinds(semantic: str) -> list[str]:
    """The kinds (``all_kinds`` order) whose rule writes some complete line in the grammar of the fixed rules and
    ``semantic`` (the state's rules, which take precedence).  Cached by the shape of the state's rules
    (``_shape``): whether a rule writes something depends on which names it uses where, not on its literals, and most
    states differ only there (another loop's name or extent); the pass was ~2 ms a state, a sixth of the CPU
    constraint's main-thread time in session 31."""
    sem = rule_graph(semantic)[0]
    key = frozenset((n, _rule_shape(text)) for n, (text, _) in sem.items())
    hit = _PRODUCTIVE.get(key)
    if hit is None:
        hit = _productive_kinds_of({**_fixed_graph()[0], **sem})
        if len(_PRODUCTIVE) > 4096:
            _PRODUCTIVE.clear()
        _PRODUCTIVE[key] = hit
    return list(hit)


_PRODUCTIVE: dict[frozenset, tuple[str, ...]] = {}


def _rule_shape(rule: str) -> tuple:
    """``_shape(_expr(rule))``, cached by the rule's text: most of a state's rules are the state before's, and
    folding each again was a third of ``_productive_kinds`` (py-spy, session 32's CPU A/B)."""
    hit = _SHAPES.get(rule)
    if hit is None:
        if len(_SHAPES) > 65536:
            _SHAPES.clear()
        hit = _SHAPES[rule] = _shape(_expr(rule))
    return hit


_SHAPES: dict[str, tuple] = {}


def _shape(e: tuple) -> tuple:
    """``e`` (``_expr``) with what does not decide whether it writes something folded away: an optional part or a
    literal writes something (``("lit",)``), a sequence writes what its parts do, an alternative writes something if
    one branch does (branches deduplicated, in order).  ``_yields`` of the shape is ``_yields`` of ``e``."""
    op = e[0]
    if op in ("lit", "opt"):
        return ("lit",)
    if op in ("never", "name"):
        return e
    parts = [_shape(x) for x in e[1]]
    if op == "seq":
        if ("never",) in parts:
            return ("never",)
        parts = [x for x in parts if x != ("lit",)]
        return parts[0] if len(parts) == 1 else ("seq", tuple(parts)) if parts else ("lit",)
    if ("lit",) in parts:
        return ("lit",)
    parts = list(dict.fromkeys(x for x in parts if x != ("never",)))
    return parts[0] if len(parts) == 1 else ("alt", tuple(parts)) if parts else ("never",)


def _productive_kinds_of(graph: dict[str, tuple[str, frozenset[str]]]) -> tuple[str, ...]:
    """``_productive_kinds`` of a whole rule graph (``rule_graph``'s form)."""
    order: list[str] = []      # the names the kinds reach (a few dozen of the grammar's ~200), uses first
    seen: set[str] = set()

    def visit(n: str) -> None:
        seen.add(n)
        for m in graph[n][1]:
            if m not in seen and m in graph:
                visit(m)
        order.append(n)

    for k in all_kinds():
        if k in graph and k not in seen:
            visit(k)
    productive: set[str] = set()
    changed = True
    while changed:             # one pass in that order settles all but recursive rules
        changed = False
        for n in order:
            if n not in productive and _yields(_expr(graph[n][0]), productive, graph):
                productive.add(n)
                changed = True
    return tuple(k for k in all_kinds() if k in productive)


def _yields(e: tuple, productive: set[str], defined: dict) -> bool:
    op = e[0]
    if op == "lit":
        return True
    if op == "never":
        return False
    if op == "name":
        return e[1] in productive or e[1] not in defined   # an imported or built-in name: productive
    if op == "opt":
        return True
    if op == "seq":
        return all(_yields(x, productive, defined) for x in e[1])
    return any(_yields(x, productive, defined) for x in e[1])   # alt


_EXPRS: dict[str, tuple] = {}


def _expr(rule: str) -> tuple:
    """A rule or terminal's body as ``("alt", [("seq", [item, ..]), ..])``; an item is ``("lit",)`` (a string or a
    regex that matches something), ``("never",)`` (``NEVER``), ``("name", n)``, ``("opt", e)`` (``?``, ``*``, ``[..]``),
    or a group; ``+`` and aliases (``-> name``) change nothing here.  Cached by the rule's text."""
    hit = _EXPRS.get(rule)
    if hit is None:
        body = rule[_RULE_HEAD.match(rule).end():]
        toks = [m.group(0) for m in _LEXEME.finditer(body) if not m.group(0).isspace()]
        hit, _ = _parse_alt(toks, 0)
        if len(_EXPRS) > 65536:
            _EXPRS.clear()
        _EXPRS[rule] = hit
    return hit


def _parse_alt(toks: list[str], i: int) -> tuple[tuple, int]:
    seqs = []
    while True:
        seq, i = _parse_seq(toks, i)
        seqs.append(seq)
        if i < len(toks) and toks[i] == "|":
            i += 1
            continue
        return ("alt", seqs), i


def _parse_seq(toks: list[str], i: int) -> tuple[tuple, int]:
    items = []
    while i < len(toks) and toks[i] not in ("|", ")", "]"):
        t = toks[i]
        if t == "-" and i + 1 < len(toks) and toks[i + 1] == ">":   # an alias: `-> name`
            i += 3
            continue
        if t in ("(", "["):
            e, i = _parse_alt(toks, i + 1)
            i += 1                                                   # the closing bracket
            if t == "[":
                e = ("opt", e)
        elif t[:1] == '"':
            e, i = ("lit",), i + 1
        elif t[:1] == "/":
            e, i = (("never",) if t == NEVER else ("lit",)), i + 1
        elif t[:1].isalpha() or t[:1] == "_":
            e, i = ("name", t), i + 1
        else:                                                        # `~`, a number, `..`: nothing that can end a rule
            i += 1
            continue
        while i < len(toks) and toks[i] in ("?", "*", "+"):
            if toks[i] != "+":
                e = ("opt", e)
            i += 1
        items.append(e)
    return ("seq", items), i
