"""Constrained decoding: every token keeps the text a prefix of a script the codec decodes, and the
workload's rules that can be known while decoding hold.

How (results/constrained-decoding.md has the library comparison and the A/B):

- **Syntax** is the codec's own Lark grammar (``codec.grammar``), run by ``llguidance`` (a maintained
  Rust engine for Lark-style grammars over subword vocabularies: it computes the allowed-token bitmask of
  a 49k vocabulary in tens of microseconds and handles tokens that span grammar terminals).  Nothing of
  the syntax is re-written by hand.
- **Semantics** come from the workload, one line at a time: when a line is complete it is decoded and
  the script so far is applied to a fresh schedule of the workload (``constrain_state``); the grammar of
  the next line (``grammar_line``) then lists only the block/loop/value variables that exist, real block
  names, real loop/child/producer/consumer counts, buffer indices the block has, tile factors as TVM replays
  them (the inner ones dividing what remains; TVM sets the first, and the script gets its value:
  MetaSchedule's perfect tile), categorical decisions within the candidates, the loops and blocks TVM's
  primitives accept (``grammar_line``).
- **Checked at the end of a line, not while decoding**: whatever TVM alone can decide (compute-at
  location counts, reorder of non-nested loops, split factors of value variables, tensorize
  preconditions).  On the shared-prefix engine a line that does not apply is taken back and drawn again in its
  attempt (``line_retries`` times an attempt, ``generation.constrained_line_retries``; the engine drops its tokens
  and draws again from the logits its first token was drawn from: rejection sampling line by line, each retry
  counted).  A line refused with no retry left ends the attempt (EOS is forced: no tokens are wasted on a
  dead schedule); the attempt counts as rejected (``ConstraintStats``) and ``generate_constrained``
  resamples it, up to ``max_resamples`` times, counting every resample.
- **Checked at the end of the script**: ``post *`` runs the target's post-processors (on CUDA ending in
  VerifyGPUCode: threads per block, shared memory, vector width depend on the whole schedule); the script must
  change the kernel (the judge's two no-op rules), bind no thread axis on nested loops of different extents, and
  on an accelerator lower for the target (the build's TIR passes); a script that fails is rejected like a line that
  does not apply (``rejected_end``, resampled: ``schedule_worker.finish_check``).
- **Draw, then check** (``SAMPLE_FIRST``, the shared-prefix engine on a CPU): the engine draws from the model and
  asks ``ScriptConstraint.allows`` (the mask's bit, from the grammars of the instruction kinds the line may be while
  the whole line grammar is not compiled: ``grammar_line.LineKinds``); a refused draw is drawn again without the
  refused tokens (``shared_prefix.REDRAWS`` times), then masked.  The same masked distribution; most steps compute no
  mask and compile no whole line grammar.
- **TVM runs in a worker process** (``schedule_worker``: the sandbox's pebble worker): a primitive that crashes
  or hangs on a line (TVM's Fuse segfaults on ``pui=_``) ends that attempt as a line that does not apply, and the
  next line gets a new worker; the run goes on.  A step's lines are sent before the model's forward pass and
  collected after it (``request_states``), so the worker applies them on another core meanwhile; end checks that run
  beside decoding have a worker of their own.

**RL log-probabilities.**  A constrained rollout samples from the masked, renormalised distribution
``p_m(t) = p(t) / Z`` over the allowed set.  GRPO's ratio and policy gradient must use that same
distribution, or the update pushes probability onto tokens the sampler can never pick and the
importance ratio is biased by ``Z`` (which changes with the weights).  The constraint is a deterministic
function of the text so far, so ``replay_masks`` rebuilds each completion's per-step allowed sets after
the fact, and ``masked_log_probs`` computes ``log p_m`` from the trainer's own logits with those masks:
rollouts constrained, log-probs masked, exact.  If a trainer cannot take the masks, RL must sample freely
(``generation.constrained: false`` for rollouts) and apply the constraint at evaluation only; mixing
constrained sampling with unmasked log-probs is the one wrong combination.

Entry points: ``logits_processor_factory(tokenizer)`` (the ``generation.sample`` hook: rows belong to
``batch_prompts[i // k]``), ``generate_constrained`` (k attempts per prompt with reject-and-resample),
``replay_masks`` / ``masked_log_probs`` (RL).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import re
import threading
import time
from typing import Any

from little_dragon.codec.canonical import dumps, first_mismatch, index_maps_parsed
from little_dragon.generation.constrain_state import ScheduleState
from little_dragon.generation.grammar_line import (line_grammar, line_kinds, reorder_derivable, tiling_run,
                                                  tiling_threads)
from little_dragon.generation.schedule_worker import _LIVE, LRU, TVMCrashed, TVMTimedOut, finish_check, post_section, prefix_facts
from little_dragon.generation.schedule_worker import worker as tvm_worker
from little_dragon.generation.shared_memory import SHARED_MEMORY, pipeline_loop
from little_dragon.generation.thread_bounds import THREAD_BOUNDS
from little_dragon.tvmx.postprocs import POSTPROC_MARKER

log = logging.getLogger(__name__)

_TARGET_RE = re.compile(r"^### Target: (.*)$", re.M)
_DERIVED_POST = re.compile(r"post[ \t]*\*")
_WORKLOAD_RE = re.compile(r"### Workload:\n(.*?)\n### (?:Script|Previous script):\n", re.S)


# ----------------------------------------------------------------------------------------------- workload
@dataclasses.dataclass(frozen=True)
class Workload:
    """What the semantic constraints need of a prompt: its kernel and target."""
    mod: Any
    target: str  # compact JSON

    @functools.cached_property
    def key(self) -> tuple[int, str]:
        """The cache key of this workload's prefix facts: the kernel's structural hash (not ``id(mod)``:
        a freed module's id is reused by the next one, whose prefixes then hit the old one's facts)."""
        from little_dragon.workloads.store import structural_hash

        return (structural_hash(self.mod), self.target)

    @functools.cached_property
    def post_context(self) -> Any:
        """The ``post *`` context of this kernel and target (it caches its derivations)."""
        from little_dragon.codec import PostprocContext

        return PostprocContext(self.mod, self.target)


@functools.lru_cache(maxsize=256)
def _module(tvmscript: str) -> Any:
    from little_dragon.workloads.store import module_from_script

    return module_from_script(tvmscript, None, where="prompt workload")


def workload_of_prompt(prompt: str) -> Workload | None:
    """The kernel and target a prompt (datasets.prompts template) names; None when the prompt has none
    or its kernel does not parse (the attempt is then constrained by syntax only)."""
    m, t = _WORKLOAD_RE.search(prompt), _TARGET_RE.search(prompt)
    if not m or not t:
        return None
    try:
        return Workload(_module(m.group(1)), t.group(1).strip())
    except Exception as e:  # noqa: BLE001 - a bad kernel must not stop generation; say so once
        log.warning("constrained decoding: the prompt's workload does not parse (%s); syntax only",
                    str(e).splitlines()[0][:200])
        return None


# -------------------------------------------------------------------------------------------- statistics
MARKS_WAIT_BUCKETS = (1, 2, 5, 10, 20, 50, 100)  # ms: the upper ends of ``ConstraintStats.marks_wait_steps``' buckets
# [finish lost] a cut or refused attempt's search for a prefix the post-processors finish stops once this many of its
# checks lost their TVM worker (crashed or timed out): the shorter prefixes hold the same lines, and each lost worker
# is a new process and the kernel sent again (~3 s).  Session 38's H100 A/B: one attempt's 25 prefixes each crashed
# the worker (a fetch of 0 lanes, since masked: ``grammar_line.FETCH_KEY``), 71 s of the arm's 173 s.  Two: a crash
# in the last line written still lets the prefix without it finish.
FINISH_LOST_LIMIT = 2
CUT_EXAMPLES = 4            # attempts cut at the token budget whose last lines are kept (``ConstraintStats.cut_examples``)
RETRY_EXAMPLES = 2          # examples kept per retry reason (``ConstraintStats.retry_examples``)
RETRY_CONTEXT_LINES = 4     # of each, the lines kept before the first line taken back
# ... except an end check's refusal (`post:`), whose example keeps its whole prefix: the kernel refused is the whole
# script, and only the whole can be replayed (session 40: 26 VerifyGPUCode refusals at `post *` on the H100, their
# four lines of context too few to tell which limit)
FULL_CONTEXT_REASONS = ("post:",)
RETRY_BACK_LINES = 60       # and the lines taken back kept


@dataclasses.dataclass
class ConstraintStats:
    attempts: int = 0
    lines: int = 0                 # lines completed and checked
    rejected_decode: int = 0       # a line the grammar allowed and the codec did not decode, its retries spent
    rejected_apply: int = 0        # a line that decoded but did not apply (checked at line end)
    rejected_end: int = 0          # a script refused at `post *` (post-processing, no-op, nested binding, lowering)
    end_checked: int = 0           # scripts checked at `post *`
    resampled: int = 0             # attempts generated again after a rejection (generate_constrained)
    truncated: int = 0             # attempts that hit the token budget mid-line (their complete lines kept)
    mask_s: float = 0.0            # time computing masks
    state_s: float = 0.0           # time decoding lines, applying prefixes, writing line grammars
    compile_s: float = 0.0         # wall time compiling line grammars (llguidance; in parallel when several)
    compiled: int = 0              # line grammars compiled (the rest were cached: same schedule facts)
    setup_s: float = 0.0           # making the attempts' constraints (first states; kernels sent to the worker)
    first_mask_s: float = 0.0      # from an engine call's start to its first masks (its cold start)
    wait_s: float = 0.0            # the decoding loop waiting for masks (shared-prefix engine; with processes: asked apart,
    #                                in ``rpc_s``, ``mask_requests``)
    checked: int = 0               # sampled tokens checked before any mask (``SAMPLE_FIRST``)
    check_refused: int = 0         # of them refused: the attempt draws again (``redraws``), then from its mask
    redraws: int = 0               # tokens drawn again after a refusal, without the refused ones, and checked
    redraw_refused: int = 0        # of them refused (after ``shared_prefix.REDRAWS`` such, the mask decides)
    check_s: float = 0.0           # time checking sampled tokens (kind grammars compiled on demand included)
    line_retries: int = 0          # lines TVM refused that were drawn again in their attempt (``line_retries``)
    retried_tokens: int = 0        # the tokens those lines had (taken back from their attempts)
    pipelines_dropped: int = 0     # [drop pipeline] retries that took back a loop's pipeline only (``DROP_PIPELINE``)
    post_derived: int = 0          # explicit post sections that went astray, finished by `post *` (``_post_line``)
    finished_earlier: int = 0      # attempts ended at an earlier line the post-processors finish (``finish_back``)
    finished_earlier_lines: int = 0  # the lines they dropped (a refused line included)
    finished_untiled: int = 0      # of them, ended without their tiling annotations (a tiled block left unbound)
    runaway_lines: int = 0         # lines cut at ``LINE_MAX_BYTES`` without their end (drawn again, or the attempt ends)
    finish_s: float = 0.0          # time finishing cut and refused attempts (``ScriptConstraint.script``; in ``state_s``)
    finish_checks: int = 0         # the end checks that finishing ran (a prefix and `post *` each; cached ones not)
    tvm_lost: int = 0              # end checks and finishing checks whose TVM worker crashed or timed out (restarted)
    rpc_s: float = 0.0             # the decoding loop waiting for the constraint processes' answers (``PROCESSES``)
    # of the decoding loop's time with constraint processes (session 34: where a step's overhead goes, read off any run):
    marks_s: float = 0.0           # asking and waiting for line marks and the masks that come with them (in ``rpc_s``)
    send_s: float = 0.0            # sending the sampled tokens (``ahead``; not in ``rpc_s``)
    apply_s: float = 0.0           # gathering the mask rows, copying them to the model's device, masking the logits
    mask_requests: int = 0         # masks asked of the processes apart (drawn then checked); else they come with marks
    # the steps' waits for marks by length (``MARKS_WAIT_BUCKETS``, ms): steps, seconds, and the line starts among their
    # attempts (lines just ended), so a run says whether the wait is many short ones or a few bursts, and what bursts
    marks_wait_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    marks_wait_bucket_s: dict[str, float] = dataclasses.field(default_factory=dict)
    marks_wait_starts: dict[str, int] = dataclasses.field(default_factory=dict)
    held_tokens: int = 0           # tokens attempts held while their end check ran (``END_WAIT_STEPS``; taken back)
    lazy_lines: int = 0            # lines whose first token was drawn before their state was known (``LAZY_LINE_STARTS``)
    lazy_refused: int = 0          # of those first tokens, taken back (refused by the line's mask once known, or with
    #                                the line before them, refused by TVM) and drawn again
    end_wait_s: float = 0.0        # time waiting for end checks' verdicts after those steps (not in yet)
    reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    retry_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    # the first RETRY_EXAMPLES lines drawn again for each retry reason: the lines taken back (the refused one last) after
    # the lines before them, so a run's retries can be read, not only counted
    retry_examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # the last RETRY_BACK_LINES checked lines of the first CUT_EXAMPLES attempts cut at the token budget: what the
    # stragglers that hold a batch's last rows for hundreds of steps were writing (their scripts keep a finished prefix)
    cut_examples: list[str] = dataclasses.field(default_factory=list)
    # [process profile] each constraint process's steps under cProfile (``PROFILE_PROCESSES``), as text
    process_profiles: list[str] = dataclasses.field(default_factory=list)

    def add_reason(self, reason: str, retried: bool = False) -> None:
        key, counts = reason[:120], self.retry_reasons if retried else self.reasons
        counts[key] = counts.get(key, 0) + 1

    def add_marks_wait(self, seconds: float, starts: int) -> None:
        ms = 1e3 * seconds
        key = next((f"<{b}" for b in MARKS_WAIT_BUCKETS if ms < b), f">={MARKS_WAIT_BUCKETS[-1]}")
        self.marks_wait_steps[key] = self.marks_wait_steps.get(key, 0) + 1
        self.marks_wait_bucket_s[key] = self.marks_wait_bucket_s.get(key, 0.0) + seconds
        self.marks_wait_starts[key] = self.marks_wait_starts.get(key, 0) + starts

    def add_retry_example(self, reason: str, text: str) -> None:
        seen = self.retry_examples.setdefault(reason[:120], [])
        if len(seen) < RETRY_EXAMPLES:
            seen.append(text)

    def add(self, other: dict[str, Any]) -> None:
        """Add ``other`` (``dataclasses.asdict`` of another's counts: the constraint process's of one call) to these."""
        for name, value in other.items():
            if name == "cut_examples":
                self.cut_examples.extend(value[:max(0, CUT_EXAMPLES - len(self.cut_examples))])
            elif name == "process_profiles":
                self.process_profiles.extend(value)
            elif name == "retry_examples":
                for key, texts in value.items():
                    for text in texts:
                        self.add_retry_example(key, text)
            elif isinstance(value, dict):
                counts = getattr(self, name)
                for key, n in value.items():
                    counts[key] = counts.get(key, 0) + n
            else:
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name in ("reasons", "retry_reasons"):
            d[name] = dict(sorted(getattr(self, name).items(), key=lambda kv: -kv[1])[:20])
        return d


# ------------------------------------------------------------------------------------------ token engine
MATCHER_CACHE_BYTES = 512 << 20  # compiled line grammars kept per engine (~550 for SmolLM2; the k attempts of a
# prompt reuse theirs within a few decoding steps, so the hits are recent ones)
MATCHER_BYTES_PER_TOKEN = 20


class TokenEngine:
    """llguidance's view of one tokenizer, and compiled line grammars (a matcher per grammar text, copied
    for each use: compiling is the expensive part, copying is cheap)."""

    def __init__(self, tokenizer: Any, vocab_size: int | None = None):
        import llguidance

        from little_dragon.generation.llg_tokenizer import llg_tokenizer

        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        # checked: the bytes llguidance gives each token are the tokenizer's (a misread decoder, as in
        # transformers 5.17's GGUF conversion, is repaired or refused: llg_tokenizer)
        self.lltok = llg_tokenizer(tokenizer, vocab_size)
        self.vocab_size = self.lltok.vocab_size
        self._llg = llguidance
        # compiled matchers, least recently used first; each holds ~19 bytes per vocabulary token (0.9 MB for SmolLM2's
        # 49k: measured), so the cache is bounded by bytes, not entries (4,096 of them had pytest at 17 GB)
        self._cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.cache_entries = max(64, MATCHER_CACHE_BYTES // (MATCHER_BYTES_PER_TOKEN * max(1, self.vocab_size)))
        self._inflight: dict[str, Any] = {}  # grammar -> Future of its compile (started ahead: ``start``)
        self._lock = threading.Lock()
        self._bytes: dict[int, bytes] = {}
        self._ws_masks: dict[int, Any] = {}
        self._hold_masks: dict[int, Any] = {}
        self._start_masks: dict[int, Any] = {}
        self._ws_ok: list[bytes] | None = None
        self._newline: list[tuple[int, bytes]] | None = None
        self.compile_work_s = 0.0  # seconds spent compiling line grammars, all threads (not only waiting)
        # a line grammar is compiled once per line: not precomputing large lexemes makes that ~3x faster
        # (10 ms instead of 30 for SmolLM2's 49k vocabulary) and masks stay ~30 us
        self._limits = llguidance.LLParserLimits(precompute_large_lexemes=False)

    def _compile(self, grammar: str) -> Any:
        t0 = time.perf_counter()
        m = self._llg.LLMatcher(self.lltok, self._llg.LLMatcher.grammar_from_lark(grammar),
                                log_level=0, limits=self._limits)
        with self._lock:
            self.compile_work_s += time.perf_counter() - t0  # in whichever thread compiled it
        if m.is_error():
            raise ValueError(f"line grammar rejected by llguidance: {m.get_error()}")
        return m

    def matcher(self, grammar: str) -> Any:
        return self.matchers([grammar])[grammar].deep_copy()

    def start(self, grammars: list[str]) -> None:
        """Begin compiling ``grammars`` in the background (``matchers`` collects them): started while the
        model computes the next step, the compile (GIL released) costs that step nothing."""
        if _workers() < 2:
            return
        with self._lock:
            for g in grammars:
                if g not in self._cache and g not in self._inflight:
                    self._inflight[g] = _pool().submit(self._compile, g)

    def matchers(self, grammars: list[str], stats: ConstraintStats | None = None,
                 parallel: bool = True) -> dict[str, Any]:
        """Compiled matchers of ``grammars`` (cached by text, i.e. by the schedule facts the text is written
        from): the missing ones are compiled in parallel (``parallel``: llguidance drops the GIL while
        compiling), or collected from ``start``.  The caller deep-copies before use."""
        with self._lock:
            out = {g: self._cache.get(g) for g in grammars}
            for g, m in out.items():
                if m is not None:
                    self._cache.move_to_end(g)
            waiting = {g: self._inflight[g] for g, m in out.items() if m is None and g in self._inflight}
        todo = [g for g, m in out.items() if m is None and g not in waiting]
        if not (todo or waiting):
            return out
        t0 = time.perf_counter()
        if parallel and len(todo) > 1 and _workers() > 1:
            futures = {g: _pool().submit(self._compile, g) for g in todo}
            compiled = {g: f.result() for g, f in futures.items()}
        else:
            compiled = {g: self._compile(g) for g in todo}
        for g, f in waiting.items():
            try:
                compiled[g] = f.result()
            finally:
                with self._lock:
                    self._inflight.pop(g, None)
        with self._lock:
            for g, m in compiled.items():
                self._cache[g] = out[g] = m
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
        if stats is not None:
            stats.compile_s += time.perf_counter() - t0  # time spent waiting for compiles
            stats.compiled += len(compiled)
        return out

    def newline_tokens(self) -> list[tuple[int, bytes]]:
        """The tokens whose bytes hold a newline (the only ones that can end a line), with their bytes."""
        if self._newline is None:
            self._newline = [(t, b) for t in range(self.vocab_size) if b"\n" in (b := self.token_bytes(t))]
        return self._newline

    def token_bytes(self, tok: int) -> bytes:
        b = self._bytes.get(tok)
        if b is None:
            b = self._bytes[tok] = self.lltok.decode_bytes([tok])
        return b

    def whitespace_ok(self, token: int, state: int) -> bool:
        """``whitespace_masks``' bit of ``token`` in white-space state ``state`` (``WS_*``), without a tensor."""
        if self._ws_ok is None:
            words = (self.vocab_size + 31) // 32
            bits = self.whitespace_masks(words)
            self._ws_ok = [bytes(int((int(row[t // 32]) >> (t % 32)) & 1) for t in range(self.vocab_size))
                           for row in bits.tolist()]
        return token < self.vocab_size and bool(self._ws_ok[state][token])

    def whitespace_masks(self, words: int) -> Any:
        """``[3, words]`` int32 bitmasks (llguidance layout) of the tokens the canonical-white-space rule
        allows in each ``WS_*`` state of a line (``restrict_whitespace``); cached per width."""
        hit = self._ws_masks.get(words)
        if hit is None:
            import torch

            n = words * 32
            toks = [self.token_bytes(t) for t in range(min(n, self.vocab_size))]
            toks += [b"x"] * (n - len(toks))  # past the vocabulary: llguidance's mask decides (never allowed)
            # white space the encoder never writes, anywhere; starts with white space; with a space or tab
            bad = torch.tensor([any(w in b for w in _NON_CANONICAL_WS) for b in toks])
            lead_ws = torch.tensor([b[:1] in (b" ", b"\t", b"\n", b"\r") for b in toks])
            lead_blank = torch.tensor([b[:1] in (b" ", b"\t") for b in toks])
            ok_mid = ~bad
            rows = torch.stack([ok_mid & ~lead_ws, ok_mid & ~lead_blank, ok_mid])  # WS_START, WS_SPACE, WS_MID
            hit = self._ws_masks[words] = _packed_bits(rows.view(3, words, 32))
        return hit

    def line_start_mask(self, words: int) -> Any:
        """``[words]`` int32 bitmask of every token a line may start with whatever the schedule (``LAZY_LINE_STARTS``):
        not the end, not white space the canonical-white-space rule refuses at a line's start (``restrict_whitespace``);
        every line's mask at its start is inside it.  Cached per width."""
        hit = self._start_masks.get(words)
        if hit is None:
            hit = self._start_masks[words] = self.hold_mask(words) & self.whitespace_masks(words)[WS_START]
        return hit

    def allowed_at(self, mask: Any, token: int) -> bool:
        """Whether the int32 bitmask row ``mask`` allows ``token``."""
        return token < mask.shape[-1] * 32 and bool((int(mask[token // 32]) >> (token % 32)) & 1)

    def hold_mask(self, words: int) -> Any:
        """``[words]`` int32 bitmask of every token but the end (a step held for an end check's verdict:
        ``ScriptConstraint._hold``); cached per width."""
        hit = self._hold_masks.get(words)
        if hit is None:
            import torch

            ok = torch.arange(words * 32) < self.vocab_size
            ok[self.eos_id] = False
            hit = self._hold_masks[words] = _packed_bits(ok.view(words, 32))
        return hit


def _packed_bits(bits: Any) -> Any:
    """``[..., 32]`` booleans as ``[...]`` int32 words, bit i of a word its i-th boolean (llguidance's mask layout)."""
    import torch

    weights = torch.ones(32, dtype=torch.int64) << torch.arange(32, dtype=torch.int64)
    packed = (bits.to(torch.int64) * weights).sum(-1)
    return torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32)


# threads for line-grammar compiles (``_pool``): None = the host's cores, at most 8.  A constraint process sets its
# share of the cores (``constraint_process``): N children with 8 threads each, and torch's and TVM's own pools,
# oversubscribed a 16-core host (session 29: four children 1.46x slower than the thread).
WORKERS: int | None = None


def _workers() -> int:
    import os

    if WORKERS is not None:
        return max(1, WORKERS)
    return max(1, min(8, os.cpu_count() or 1))


@functools.lru_cache(maxsize=1)
def _pool() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(_workers(), thread_name_prefix="line-grammar")


# the next step's constraint work in a background thread during the forward pass: None = where the model
# runs on an accelerator (its forward pass leaves the host free), True/False = always/never (tests, benchmarks)
BACKGROUND: bool | None = None
# line grammars compiled in worker threads (started as soon as a line ends, several of a step in parallel):
# None = where the model runs on an accelerator, True/False = always/never.  On a CPU the model's own step
# needs the cores: compile threads beside it were slower there (GIL hand-offs after every compile and torch op,
# cores oversubscribed; results/constrained-decoding.md, session 7), so the compiles run inline in order.
COMPILE_THREADS: bool | None = None


# draw each attempt's token from the model first and compute its mask only when the constraint refuses that token
# (``ScriptConstraint.allows``; the shared-prefix engine): the same masked distribution, and most steps need no mask
# and no compile of a whole line grammar.  None = where the model runs on a CPU (there the masks and compiles are
# the step's critical path; on an accelerator they run beside the forward pass: ``BACKGROUND``), True/False = always/never.
SAMPLE_FIRST: bool | None = None
# the shared-prefix engine's constraint work in N processes of its own (``constraint_process``; attempts dealt out
# among them: [spread] below) instead of a thread of the model's: the constraint's Python then holds no GIL the model's forward pass
# needs, and N processes do a step's work side by side.  The same masks and scripts (a test checks it).  0 = the
# thread.  Session 28 on the H200, one process: the model's loop stays at the free step's cost, but waits on the one
# process's ~67 ms of work a step, so the step is no faster (results/constrained-decoding.md); N > 1 is unmeasured there.
PROCESSES: int = 0
# the constraint processes' niceness (``os.nice``; their TVM workers inherit it): above 0 the model's loop, the critical
# path, takes a core first where the children and their workers outnumber the host's cores.  10 since session 42: on its
# H100 (16 x 8 attempts, the same draws) the model's call beside them stayed at free decoding's (27.3 and 31.3 ms
# against 28.6 and 31.0) where at 0 it was 2.8-6.6 ms slower, a step 1.21-1.35x free's against 1.44-1.50x
# (results/constrained-decoding.md "Session 42"; session 35's host B read 47.4 against 44.5 ms in calls apart).  0: as
# the parent; the bench's +niceN.
PROCESS_NICE: int = 10
# [keep cores] the constraint processes (and their TVM workers, which inherit it) kept off the first N cores this
# process may run on (``os.sched_setaffinity``), left to the model's loop: niceness orders a core's run queue, this keeps
# the children off the loop's cores altogether (session 40's host: the model's own call 6-14 ms slower beside them).
# 0: every core (the default); ignored where N leaves the children no core.  The bench's +keepN.
PROCESS_KEEP_CORES: int = 0
# [drop pipeline] where [shared memory] (``schedule_worker.SHARED_MEMORY_RULE``) refuses the line that completes a loop's
# software pipeline, the attempt takes back that pipeline's lines and goes on without one on that loop
# (``ScriptConstraint._drop_pipeline``; a retry) instead of going back to its tiling's first `tile` line and drawing
# ~30 lines again: session 42's H100 A/B spent 45 of 91 retries on VerifyGPUCode at `post *`, both stored examples the
# pipeline's three stages tripling 16,640 bytes of shared memory to 49,920, and each script without its pipeline
# lines passes (results/constrained-decoding.md, "Session 42").  Off by default: on session 43's H100 A/B it dropped 2
# pipelines a run, [shared memory] (which it needs) refused 2 lines of 66-86 retries and its arms stepped 1.27-1.48x
# free against the default's 1.17x; most `post *` refusals there were not the pipeline's ("Session 43").  The bench's
# +droppipe (with +shared).
DROP_PIPELINE: bool = False
# [spread] with several constraint processes, each prompt's attempts are dealt out among them (``gcd(k, N)`` groups of a
# prompt's k attempts, its group g to process g, later prompts' groups round robin after them) instead of prompt p to
# process p % N.  A prompt's attempts start their lines, and reach `post *`, within a few steps of each other: dealt out
# by prompt, that work queued on one process's TVM worker and end worker (session 35's H100: 24 of 1,792 steps waited
# 100 ms or more for their processes, 10.5 of the loop's 19 s of waiting, ~14 line starts among their attempts).  Each
# process then parses every prompt's kernel and computes the lines its attempts share (side by side).  The same masks
# and scripts either way (a test checks it).  Session 36's H100 (16 CUDA prompts x 8, four processes, the same
# scripts in one call): 47.9 ms a step by prompt, 38.4 spread (free: ~24-29).  False: by prompt (before session 36; the
# bench's +byprompt).
SPREAD_ATTEMPTS = True
# [end wait] a script's end check at `post *` while the attempt has retries left: the check runs in the end worker and
# the attempt holds this many decoding steps (it feeds the model whatever it draws but the end, and takes those tokens
# back), then reads the verdict, waiting for it only if it is not in yet (``ScriptConstraint._end_verdict``).  Until
# session 30 every such check ran at once, in the step of `post *`: on the 2-core CPU ~35-80 ms a check that the whole
# batch waited for.  A count of steps, not "when it is in", so a seed draws the same attempts on every run.  None = by
# the model's device (``_end_wait``): 4 on a CPU, 3 on an accelerator; 0 = at once (before session 31).  Session 35's
# H100 (16 CUDA prompts x 8, four processes): with 1 step the processes waited 6.7 s for verdicts and the loop 22.4 s
# for its processes; with 3, 2.5 s and 15.3 s, and the same attempts' sampled tokens/s was 12% higher (506 -> 569).
END_WAIT_STEPS: int | None = None

# [thread factors] Inside a GPU tiling, each S loop's third factor (the one bound to threadIdx) is drawn within what keeps
# the block's threads per thread block inside MetaSchedule's bounds (``grammar_line._tile_rules``); False: drawn free and
# checked at the bounds line only (``thread_bounds``; before session 32, and the bench's +nothreadfactors).
THREAD_FACTORS = True

# [annotation keys] `ann` of MetaSchedule's keys at their place and target, no block or loop annotated again with a key
# it carries (``grammar_line._annotate_rules``), and [move once] no block moved again by `at`/`rat` (``ScheduleState.block_moved``),
# on GPU targets (``grammar_line._gpu_once_rules``); False: the codec's `ann` and moves (before session 33, and the
# bench's +noannmove).
ANNOTATION_AND_MOVE_RULES = True

# [bind the fused loop] right after a `fuse`, a `bind` binds the loop it made (``grammar_line._parallel_rules``: every
# MetaSchedule trace does); False: any free loop (before session 35, and the bench's +nobindfused).
BIND_FUSED = True

# [half bound] no `post` (the script's end) while a block is under a blockIdx loop and no threadIdx loop that a free loop
# above it could still fix (``ScheduleState.half_bound``: `post *`'s RewriteUnboundBlock refuses it; session 36's H100
# A/B: 51 of 101 line retries, 12 of 128 attempts refused at the end); False: the end check refuses it and the attempt
# goes back (before session 37, and the bench's +nohalfbound).
HALF_BOUND_RULE = True

# [pipeline body] on GPU targets the software pipeline's keys (`ann l stage`, `order`, `async`) only on a loop whose body is a
# sequence of statements, where TVM's InjectSoftwarePipeline lowers one (``ScheduleState.loop_unsequenced``); False: on
# any loop, the lowering's ValueError found by the end check at `post *` (before session 44, and the bench's
# +nopipebody).  Session 44's H100 A/B: 10 of its 18 VerifyGPUCode refusals at `post *` were that error, each a retry
# back to the tiling's first `tile` line.
PIPELINE_BODY_RULE = True

# [outermost loop] on GPU targets a data-parallel loop with no loop above it is bound to blockIdx only
# (``ScheduleState.loop_top``, ``grammar_line._parallel_rules``: `post *`'s RewriteUnboundBlock raises on a kernel whose
# outermost loop is bound to a thread axis and none to blockIdx; session 38-39's H100 A/Bs: a quarter of the line
# retries); False: any axis the other rules allow (before session 39, and the bench's +noouterbx).
OUTERMOST_BLOCK_IDX = True


# [lazy line starts] A line's first token is drawn before TVM has applied the line before it.  A line ended at step t
# sends its prefix to the TVM worker and the attempt draws its next token at step t+1 from every token a line may start
# with (``TokenEngine.line_start_mask``: not the end, no leading white space); at step t+2 the line's facts are in (they
# had a whole step more), its grammar compiles, and the token is kept if the line's mask allows it, else taken back and
# drawn again from the same logits under that mask (the engine keeps a line start's logits; a refused line before it is
# taken back with it, as before).  The kept token's law is the masked one: for an allowed token t (mask A inside the
# start mask S), P(t) = p(t)/p(S) + (p(S\A)/p(S)) * p(t)/p(A) = p(t)/p(A).  Every line start of an attempt is drawn so
# (not only those whose facts are not cached), so a seed draws the same attempts however the prompts are dealt out among
# processes.  Needs an engine that takes tokens back (line retries on).  Off by default: on session 34's H100 (16 CUDA
# prompts x 8, four processes) it was no faster, 58.6 and 59.2 ms a step against 56.5 eager (free 34.9-39.3 on that
# host): the decoding loop's wait for its processes (``rpc_s``, ~10-12 ms a step) is not the line work's latency, which
# each line now has two steps for.  It pays where a step is shorter than a line's TVM work and compile (~17 ms), e.g. a
# forward pass under CUDA graphs.  True: the bench's +lazy.
LAZY_LINE_STARTS: bool = False

# [process profile] each constraint process profiles its steps (cProfile; the slow ones, >= PROFILE_SLOW_MS, apart) and hands the
# listing back with its counts (``ConstraintStats.process_profiles``): what the decoding loop's long waits for its
# processes are made of.  Times inflated; the bench's +procprofile.
PROFILE_PROCESSES: bool = False
PROFILE_SLOW_MS: float = 100.0  # a profiled step this long or longer is a slow one

# [intrinsics at start] the TVM workers register the tensor-core intrinsics when they start (beside the model's load),
# not at the first line that needs them: on session 39's H100 host that line waited ~2.6 s, in three of the four
# constraint processes at once (the decoding loop waits for every process), ~4% of a constrained arm.  None: when this
# process sees a CUDA device (a CPU run's workers would spend ~5 s of a 2-core host on intrinsics its llvm kernels
# never use); True/False: always/never.
TENSOR_INTRINSICS_AT_START: bool | None = None


def tensor_intrinsics_at_start() -> bool:
    """``TENSOR_INTRINSICS_AT_START`` resolved: None is whether torch sees a CUDA device here."""
    if TENSOR_INTRINSICS_AT_START is not None:
        return TENSOR_INTRINSICS_AT_START
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, no CUDA: no GPU kernels to expect
        return False


def _end_wait(device: Any) -> int:
    """The steps an attempt holds at `post *` for its end check's verdict, for a model on ``device`` (``END_WAIT_STEPS``)."""
    if END_WAIT_STEPS is not None:
        return END_WAIT_STEPS
    return 4 if getattr(device, "type", "cpu") == "cpu" else 3


def _sample_first(device: Any) -> bool:
    """Whether the shared-prefix engine checks a drawn token before masking for a model on ``device``."""
    if SAMPLE_FIRST is not None:
        return SAMPLE_FIRST
    return getattr(device, "type", "cpu") == "cpu"


def _background(device: Any) -> bool:
    """Whether a step's constraint work runs beside the forward pass for a model on ``device`` (``BACKGROUND``)."""
    on = BACKGROUND if BACKGROUND is not None else getattr(device, "type", "cpu") != "cpu"
    return bool(on) and _workers() > 1


def _compile_threads(device: Any) -> bool:
    """Whether line grammars compile in worker threads for a model on ``device`` (``COMPILE_THREADS``)."""
    if COMPILE_THREADS is not None:
        return COMPILE_THREADS
    return getattr(device, "type", "cpu") != "cpu" and _workers() > 1


# [end workers] deferred end checks run in this many TVM workers of their own (roles "end", "end1", ...), side by side:
# a prompt's k attempts often reach `post *` within a few steps of each other, and on one worker their checks queue (on
# this CPU a CUDA attempt's check takes ~70 ms, up to 430; eight queued outlast any end wait).  Session 35's H100 A/B
# (16 x 8, four processes, end wait 3): 24 of 1,792 steps waited >= 100 ms for the processes' answers, 10.5 of the loop's
# 19 s of waiting, at ~14 line starts a step, while the processes waited 4.9 s for verdicts.  The verdicts and the step
# that reads each are the same however many workers check (the same draws); only the waits change.  1: one worker (the
# default until a device A/B measures more; the bench's +endworkersN).
END_CHECK_WORKERS: int = 1
_END_ROLE = threading.local()  # an end-check thread's worker role


def end_roles(n: int | None = None) -> list[str]:
    """The TVM worker roles of the deferred end checks (``END_CHECK_WORKERS``)."""
    return ["end" if i == 0 else f"end{i}" for i in range(max(1, END_CHECK_WORKERS if n is None else n))]


def worker_roles() -> list[str]:
    """Every TVM worker role of this process: the lines' and the end checks' (``end_roles``)."""
    return ["lines", *end_roles()]


@functools.lru_cache(maxsize=4)
def _end_check_pool(n: int) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    roles = iter(end_roles(n))

    def take_role() -> None:  # each thread of the pool its own worker
        _END_ROLE.name = next(roles)

    return ThreadPoolExecutor(n, thread_name_prefix="end-check", initializer=take_role)


def _end_checks() -> Any:
    """``END_CHECK_WORKERS`` threads for deferred end checks (``ScriptConstraint.defer_end``), each waiting on a TVM
    worker of its own beside the decoding loop, which goes on with the next step."""
    return _end_check_pool(max(1, END_CHECK_WORKERS))


@functools.lru_cache(maxsize=1)
def _line_worker() -> Any:
    """One thread for the constraint work of a decoding step (``CodecLogitsProcessor.ahead``): one step
    at a time, its rows in order, as in the caller's thread."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, thread_name_prefix="line-work")


@functools.lru_cache(maxsize=8)
def _engine_for(tokenizer_id: int, tokenizer: Any, vocab_size: int | None) -> TokenEngine:
    return TokenEngine(tokenizer, vocab_size)


def engine_for(tokenizer: Any, vocab_size: int | None = None) -> TokenEngine:
    return _engine_for(id(tokenizer), tokenizer, vocab_size)


# ------------------------------------------------------------------------------------- prefix facts, cached
_DECODED = LRU(8192)  # prefix -> its decode
_STATES = LRU(8192)   # (workload, prefix) -> its schedule facts (or the error applying it)


@dataclasses.dataclass(frozen=True)
class _Decoded:
    """A decoded prefix: its trace JSON and the decoder's names after it (to decode one more line)."""
    trace: list
    defined: dict
    counts: dict
    total: int


_EMPTY = _Decoded([[], []], {}, {"b": 0, "l": 0, "v": 0}, 0)


def _without_last_line(text: str) -> str:
    """``text`` (complete lines) without its last line."""
    head = text[:-1].rpartition("\n")[0] if text.endswith("\n") else text.rpartition("\n")[0]
    return head + "\n" if head else ""


def _decode(text: str) -> list:
    """The trace JSON of ``text`` (complete lines), as ``codec.decode(text)`` gives it.  Incremental: a
    line is decoded on the decoder state of the prefix before it (cached: the prefix was decoded when its
    own last line ended), so a script is parsed once, not once per line (``test_incremental_decode``
    checks it equals the codec's whole-text decode on every prefix of real records)."""
    return _decoded(text).trace


@functools.lru_cache(maxsize=64)
def _target_thread_bounds(target: str) -> tuple[int, int] | None:
    """(warp size, max threads per block) of a GPU target's compact JSON (the attributes MetaSchedule's GPU tiling
    reads for its thread bounds); None when the target does not name ``max_threads_per_block``."""
    try:
        attrs = json.loads(target)
    except ValueError:
        return None
    if not isinstance(attrs, dict) or "max_threads_per_block" not in attrs:
        return None
    return int(attrs.get("thread_warp_size", 32)), int(attrs["max_threads_per_block"])


def _decoded(text: str) -> _Decoded:
    hit = _DECODED.get(text)
    if hit is None:
        head = text[:-1].rpartition("\n")[0] if text.endswith("\n") else None
        parent = None
        if head is not None:
            parent = _EMPTY if not head else _DECODED.get(head + "\n")
        try:
            if isinstance(parent, _Decoded):
                hit = _extend(parent, text[len(head) + 1 if head else 0:])
            else:
                hit = _extend(_EMPTY, text)
        except Exception as e:  # noqa: BLE001 - cached and re-raised
            hit = e
        _DECODED.put(text, hit)
    if isinstance(hit, BaseException):
        raise hit
    return hit


def _extend(parent: _Decoded, text: str) -> _Decoded:
    """``parent`` followed by the instructions of ``text``: ``codec.script.decode_line`` (the per-line step
    of the codec's own decode) on the parent's decoder state (no ``post *`` here: the constraint handles it
    apart)."""
    from little_dragon import codec
    from little_dragon.codec.grammar import parse
    from little_dragon.codec.script import _Decoder, _is_derived_post, decode_line

    tree = parse(text)
    dec = _Decoder()
    dec.defined, dec.counts, dec.total = dict(parent.defined), dict(parent.counts), parent.total
    insts, decisions = list(parent.trace[0]), list(parent.trace[1])
    for node in tree.children:
        if _is_derived_post(node):  # not expected here; the codec's own decode says what is wrong
            codec.decode(text, codec.SyntaxOnlyContext())
            raise codec.DecodeError("`post *` is derived: not decodable line by line")
        decode_line(dec, node, insts, decisions)
    return _Decoded([insts, decisions], dec.defined, dec.counts, dec.total)


# TVM's work for the constraint (applying lines, post-processing cut attempts) in a child process
# (``schedule_worker``): a primitive that crashes or hangs on a line ends that attempt, not the run.  False: in
# this process (benchmarks measure the isolation's cost side by side; a crash then ends the process).
ISOLATE_TVM: bool = True


def _prefix_state(mod: Any, text: str, key: Any = None) -> ScheduleState:
    """The facts of ``text`` (complete lines) on ``mod``, computed in this process (``schedule_worker.prefix_facts``:
    the prefix one line shorter extended by the last line, or the whole prefix replayed)."""
    return prefix_facts(mod, text, _decode(text) if text else [[], []], key)


def _workload_state(workload: Workload, text: str) -> ScheduleState:
    """The facts of ``text`` on ``workload``: in the worker process (``ISOLATE_TVM``) or here."""
    if not ISOLATE_TVM:
        return _prefix_state(workload.mod, text, workload.key)
    return tvm_worker().state(workload.key, workload.mod, text, _decode(text) if text else [[], []])


def prefetch_states(constraints: list["ScriptConstraint"], tokens: list[int]) -> None:
    """Before ``constraints[i].advance(tokens[i])``: the schedule facts of every line these tokens end, asked of the
    worker in one request (``ScheduleWorker.states``) and cached where ``_state`` looks (``_STATES``).  A decoding
    step ends a line in many attempts at once (the tiny model writes about a line a token); one request per line
    cost a round trip each.  Only a cache: a line whose fact is not prefetched is asked alone, as before."""
    request_states(constraints, tokens, least=2).store()


class StatesAhead:
    """The facts ``request_states`` asked the worker for, on their way; ``store()`` waits for them and caches them in
    ``_STATES`` (once)."""

    def __init__(self, keys: list, pending: Any, stats: ConstraintStats | None):
        self.keys, self.pending, self.stats = keys, pending, stats

    def store(self) -> None:
        if self.pending is None:
            return
        t0 = time.perf_counter()
        pending, self.pending = self.pending, None
        for key, state in zip(self.keys, pending.result()):
            _STATES.put(key, state)
        if self.stats is not None:
            self.stats.state_s += time.perf_counter() - t0


def request_states(constraints: list["ScriptConstraint"], tokens: list[int], least: int = 1) -> StatesAhead:
    """``prefetch_states`` without waiting: the request goes to the worker now (at least ``least`` lines), and the
    caller ``store()``s the answers when it needs them.  Sent before the model's forward pass, the worker applies the
    lines on another core while the model computes (``AttemptLogitsProcessor.ahead``)."""
    stats = constraints[0].stats if constraints else None
    if not ISOLATE_TVM or not constraints:
        return StatesAhead([], None, stats)
    t0 = time.perf_counter()
    items, keys = [], []
    for c, tok in zip(constraints, tokens):
        if c.done or c.dead or c.workload is None or c.finished or tok == c.engine.eos_id:
            continue
        line = c.ended_line(c.engine.token_bytes(tok))
        if line is None or _DERIVED_POST.fullmatch(line.strip()):
            continue
        text = c.text + line + "\n"
        key = (c.workload.key, text)
        if key in keys or _STATES.get(key) is not None:
            continue
        try:
            trace = _decode(text)
        except Exception:  # noqa: BLE001 - the line's own check says so, in advance
            continue
        items.append((c.workload.key, c.workload.mod, text, trace))
        keys.append(key)
    pending = tvm_worker().submit_states(items) if len(items) >= least else None
    stats.state_s += time.perf_counter() - t0
    return StatesAhead(keys, pending, stats)


def clear_caches() -> None:
    """Forget every prefix's facts, here and in the worker (benchmarks: each timed arm starts cold)."""
    for cache in (_DECODED, _STATES):
        cache.data.clear()
    _LIVE.data.clear()
    if ISOLATE_TVM:
        for role in worker_roles():
            tvm_worker(role).clear()


# a tiling annotation of a block (MetaSchedule's ``meta_schedule.tiling_structure``) and its removal, as whole lines
_TILING_ANNOTATION = re.compile(r"^(?:ann b\d+ tiling .*|unann b\d+ tiling)\n", re.M)
_TILE_LINE = re.compile(r"tile\s+l(\d+)(?:\s+m=\d+)?\s*=\s*(\d+)((?:\s+\d+)+)\s*$")


def _perfect_tile(line: str, state: ScheduleState | None) -> str | None:
    """``line`` with the first factor TVM runs, when it is a `tile` line whose first factor TVM replaces, else None.

    TVM's SamplePerfectTile, replaying a decision, keeps t2..tN while each divides what remains (inner to outer)
    and sets t1 to what is left (sampling.cc); the line grammar lets the model leave t1 to TVM (``grammar_line``:
    the inner factors divide the extent, t1 is any positive integer).  Writing TVM's t1 back keeps the script the
    trace that ran and its tile perfect (the product is the extent), as every MetaSchedule trace is."""
    m = _TILE_LINE.match(line)
    if m is None or state is None:
        return None
    extent = state.loops.get(int(m.group(1)))
    if not extent or extent <= 0:
        return None
    factors = [int(m.group(2))] + [int(x) for x in m.group(3).split()]
    left = extent
    for t in reversed(factors[1:]):  # TVM's order: innermost first
        if t <= 0 or left % t:
            return None  # not what the grammar allows: leave the text as sampled (TVM's verdict stands)
        left //= t
    if left == factors[0]:
        return None
    return line[:m.start(2)] + str(left) + line[m.end(2):]


def _post_hazard(insts: list) -> str | None:
    """Why one of ``insts`` (a line's trace JSON) would stop the post-processing, or None.  Checked at the line's
    end: the annotation keys RewriteParallelVectorizeUnroll reads take a non-negative integer literal (a value
    variable, sampled, is checked by ``tvmx.postprocs.check_root_annotations`` when post-processing), and the
    grammar's generic `key value` cannot exclude a few key spellings from its name terminal."""
    from little_dragon.tvmx.postprocs import parallel_vectorize_unroll_error

    for inst in insts:
        if inst[0] != "Annotate" or len(inst[1]) < 2 or not inst[2]:
            continue
        value = inst[1][1]
        if isinstance(value, str) and value[:1] == "v" and value[1:].isdigit():
            continue
        why = parallel_vectorize_unroll_error(str(inst[2][0]), value)
        if why is not None:
            return why
    return None


def _same_instruction(derived: Any, written: Any) -> bool:
    """The judge's test of a written post-processing section, instruction by instruction (``evaluator.replay.
    _check_written_post``, which generation may not import: `dragon train sft` imports this module and must not
    depend on the evaluator): equal with their IndexMaps parsed (both spellings of a map); None (past the end of a
    list) is never the same."""
    return derived is not None and written is not None and index_maps_parsed(derived) == index_maps_parsed(written)


# ------------------------------------------------------------------------------------- one attempt's state
@dataclasses.dataclass(frozen=True)
class _Start:
    """What a line of an attempt started from (``ScriptConstraint._starts``): to go back to it."""
    text: str
    n_insts: int
    post_section: bool
    order: dict
    grammar: str | None
    state: Any
    n_tokens: int
    post_left: int | None


class ScriptConstraint:
    """The constraint of one attempt, advanced token by token.

    ``workload`` None: syntax only.  ``dead`` once a completed line failed its check (reason in
    ``error``); from then on only EOS is allowed."""

    def __init__(self, engine: TokenEngine, workload: Workload | None, stats: ConstraintStats | None = None):
        self.engine, self.workload = engine, workload
        self.stats = stats if stats is not None else ConstraintStats()
        self.text = ""            # complete lines so far (each with its newline)
        self.line = b""           # bytes of the current line
        self.n_insts = 0
        self.finished = False     # `post *` written: only the end may follow
        self.post_section = False  # an explicit `post` line written (the self-contained form): it may end
        # [post section] the instructions the target's post-processors write after the script's explicit `post` line
        # (``_post_line``), the lines before that `post` line, how many of them the script has still to write (None:
        # not known, no workload), and whether the section went astray and the script is those lines and `post *`
        self._post: list | None = None
        self._post_pre: str | None = None
        self.post_left: int | None = None
        self.post_derived = False
        self.done = False         # EOS consumed
        self.dead = False
        self.error = ""
        self.state: ScheduleState | None = None
        self.pending: str | None = None  # the next line's grammar, until its matcher is compiled
        self.repaired: dict[int, tuple[str, str]] = {}  # line index -> (tile line as sampled, as TVM ran it)
        self._matcher: Any = None
        self._line_tokens: list[int] = []  # the tokens the current line's matcher has consumed
        self._kinds: Any = None            # the line's ``LineKinds`` (a sampled token checked by kind: ``allows``)
        self._kind_matchers: dict[str, Any] | None = None  # kind -> its matcher, the kinds the line may still be
        self._line_order: dict[str, Any] = {}  # the line grammar's order rules (``_order``), for its kinds
        self.defer_end = False    # the end check runs beside decoding; ``settle`` applies its verdict
        self._lost = 0            # this attempt's end checks whose TVM worker was lost (``FINISH_LOST_LIMIT``)
        self._end: Any = None     # the Future of a deferred end check
        # [end wait] with retries left, a deferred end check's verdict is read ``end_wait`` steps after `post *` (0: at
        # once, in the line's step); meanwhile ``_hold`` is [its Future, the tokens consumed at `post *`'s end, the
        # tokens held since, the text before `post *`]
        self.end_wait = 0
        self._hold: list | None = None
        # [lazy line starts] (``LAZY_LINE_STARTS``; set by ``attempt_processor`` where the engine takes tokens back):
        # ``_lazy`` while the current line's state is on its way and its first token is drawn from the line-start mask;
        # ``_first`` once it is known (``_resolve_lazy``): "check" (the line's mask decides that token) or "drop" (the line
        # before it was refused and taken back: so is the token)
        self.lazy = False
        self._lazy = False
        self._first: str | None = None
        # line retries: a line TVM refuses (or a script the end check refuses) is taken back and drawn again, at most
        # ``line_retries`` times an attempt (set by an engine that can take tokens back: ``shared_prefix``'s
        # ``line_marks``); ``take_back`` is how many tokens the engine must drop now; ``_starts[k]`` what line k
        # started from (``_Start``), ``n_tokens`` the tokens consumed so far
        self.line_retries = 0
        self.retried = 0
        self.take_back = 0
        self.n_tokens = 0
        self._starts: list[_Start] = []
        self.refused: set[bytes] = set()   # lines TVM refused at this line's start: never completed again here
        self.unpipelined: set[int] = set()  # [drop pipeline] loops whose pipeline this attempt took back (``_drop_pipeline``)
        # an attempt that stops short of a finished kernel (a line or its end refused, retries spent; cut at the token
        # budget) ends at the longest prefix of its checked lines, at most this many lines shorter, that the target's
        # post-processors finish (``script``; 0: a dead attempt keeps its refused line, a cut one is finished at its
        # last line only; set by ``ConstrainedDecoding``: ``generation.constrained_finish_back``)
        self.finish_back = 0
        self._new_line(first=True)

    @property
    def matcher(self) -> Any:
        """The current line's llguidance matcher (compiled on first use unless ``prepare`` compiled it
        together with other attempts' grammars)."""
        if self.pending is not None:
            g = self.pending
            self.take_matcher(self.engine.matchers([g], self.stats)[g])
        return self._matcher

    def take_matcher(self, compiled: Any) -> None:
        """Use (a copy of) ``compiled``, the matcher of the pending line grammar, from here on: it consumes the
        tokens the line has so far (the line was checked by kind until now: ``allows``)."""
        m = compiled.deep_copy()
        self._matcher, self.pending, self._kind_matchers = m, None, None
        if self._line_tokens and not m.consume_tokens(self._line_tokens):  # the kinds' union is the line grammar:
            self._kill("decode", f"the line grammar refuses what its kinds allowed: {m.get_error()}")  # never (tested)

    # -- line bookkeeping
    def _grammar(self, first: bool) -> str:
        if self.finished:
            return line_grammar(self.state, first=first, finished=True)
        self._line_order = self._order()
        return line_grammar(self.state, first=first, finished=False, **self._line_order)

    def _order(self) -> dict[str, Any]:
        """The order rules of the next line: `reorder *` only where the decoder derives it (right after the tile
        lines of a `tiling` annotation's `loops`), and inside such a run each of those loops' `tile` line has as
        many factors as the structure has S levels (R levels for a reduction loop); from the decoded prefix."""
        if not self.text:
            return {"reorder_derived": False}
        decoded = _decoded(self.text)
        derived = reorder_derivable(decoded.trace)
        run = tiling_run(decoded.trace)
        names = {tvm: mine for mine, tvm in decoded.defined.items()}
        base: dict[str, Any] = {"reorder_derived": derived}
        insts = decoded.trace[0]
        if BIND_FUSED and insts and insts[-1][0] == "Fuse" and insts[-1][3] and insts[-1][3][0] in names:
            base["bind_loop"] = int(names[insts[-1][3][0]][1:])  # [bind the fused loop] a `bind` next binds it
        if run is None:
            return base
        counts, tvm_loops = run
        loops = frozenset(int(names[t][1:]) for t in tvm_loops if t in names)
        order = {**base, "tile_counts": counts, "tile_loops": loops}
        bounds = self._thread_bounds() if THREAD_FACTORS else None
        threads = tiling_threads(decoded.trace, *bounds) if bounds else None
        return {**order, "tile_threads": threads} if threads else order

    def _thread_bounds(self) -> tuple[int, int] | None:
        """MetaSchedule's thread bounds on this prompt's GPU target (its warp size, ``max_threads_per_block``), which
        its GPU tiling annotates the tiled block with; None on a CPU target or without a workload
        (``grammar_line.tiling_threads``)."""
        if self.workload is None or self.state is None or self.state.cpu:
            return None
        return _target_thread_bounds(self.workload.target)

    def _new_line(self, first: bool = False, now: bool = False) -> None:
        """The next line starts: its schedule state, grammar and start record; unless ``now``, lazily where
        ``lazy`` says so (its first token drawn before them: ``_resolve_lazy``)."""
        if (self.lazy and not (first or now) and self.workload is not None and not self.finished
                and not self.post_section):
            self._begin_line(None)
            self._lazy = True
            self.stats.lazy_lines += 1
            return
        t0 = time.perf_counter()
        if self.workload is not None and not self.finished:
            try:
                self.state = self._state()
            except Exception as e:  # noqa: BLE001 - the prefix does not apply: retried, or the attempt is dead
                # a block's threads outside the bounds its line just gave it, a kernel's shared memory over the limit
                # once its pipeline is annotated: the end check's verdict, known now (``thread_bounds``,
                # ``shared_memory``), so back to the tiling as at `post *`
                end = "threads" if THREAD_BOUNDS in str(e) else "shared" if SHARED_MEMORY in str(e) else ""
                if end == "shared" and DROP_PIPELINE and self._drop_pipeline(_last_message(e)):
                    return
                if not (self._retry_end(_last_message(e), end) if end else self._retry(e)):
                    self._kill("apply", e)
                return
        self._begin_line(self._grammar(first))
        self._starts.append(_Start(self.text, self.n_insts, self.post_section, self._line_order, self.pending,
                                   self.state, self.n_tokens, self.post_left))
        self.refused = set()
        self.stats.state_s += time.perf_counter() - t0

    def _resolve_lazy(self) -> None:
        """[lazy line starts] The current line's state, grammar and start record, now (its state was asked of the worker
        when the line before ended; cached by now, or computed here); its first token, drawn meanwhile, is then checked
        by ``advance``.  A refused line before it goes back as at once (``_new_line``), taking that token with it."""
        self._lazy = False
        retried = self.retried
        self._new_line(now=True)
        self._first = None if self.dead else "drop" if self.retried > retried else "check"

    def _begin_line(self, grammar: str | None) -> None:
        """A line starts: its grammar ``grammar`` (compiled on first use), nothing of it written yet."""
        self._lazy, self._first = False, None
        self.pending, self._matcher = grammar, None
        self.line = b""
        self._line_tokens, self._kinds, self._kind_matchers = [], None, None

    def _retry(self, e: BaseException | str, what: str = "apply") -> bool:
        """Take back the line TVM just refused (``e``) and start it again, if this attempt has retries left: its
        tokens are dropped by the engine (``take_back``), the prefix is the one before it, and the line is drawn again
        from the logits its first token was drawn from.  The attempt then samples its lines from the constrained
        distribution given that TVM applies them (rejection sampling, line by line; each retry counted), except that
        a refused line is never completed again at that start (``refused``: the token that would end it is masked, so
        a confident model does not spend its retries writing the same line again)."""
        if self.retried >= self.line_retries or not self._starts:
            return False
        self.refused.add(self.text[len(self._starts[-1].text):].strip().encode())
        self._go_back(len(self._starts) - 1, f"{what}: {_last_message(e)}")
        return True

    def _retry_end(self, why: str, label: str = "post") -> bool:
        """Take back the end of a script the end check refused (``why``), if this attempt has retries left: back to
        the first `tile` line of its last tiling when it has one (on CUDA nearly every refusal is a thread count
        outside the tiling's bounds, which its tile factors decide: 46 of 50 VerifyGPUCode refusals of session 18's
        H200 A/B), else to its last line; its lines from there are drawn again (rejection sampling of that suffix
        given the end check, counted).  Not where it would go back to the script's start.  The last line is `post *`
        (``label`` "post") or the line that gave a block thread bounds its threads miss ("threads", ``thread_bounds``:
        the same verdict, before the lines after it are drawn)."""
        if self.retried >= self.line_retries or len(self._starts) < 2:
            return False
        lines = self.text.split("\n")[:-1]          # the lines up to the last (line k started at ``_starts[k]``)
        tiles = [k for k, ln in enumerate(lines) if ln.startswith("tile")]
        if not tiles and label != "post":  # no tiling to go back to: the line itself, never completed again there
            return self._retry(why, label)
        to = len(lines) - 1
        if tiles:
            to = tiles[-1]
            while to > 0 and lines[to - 1].startswith("tile"):
                to -= 1
        if to <= 0:
            return False
        self._go_back(to, f"{label}: {why}")
        return True

    def _drop_pipeline(self, why: str) -> bool:
        """[drop pipeline] The kernel's shared memory is over the target's limit once the line just written completed a
        loop's software pipeline (``shared_memory``): take back that loop's pipeline lines, from the first of them, and
        mask its pipeline keys for the rest of the attempt, if it has retries left; the tiling stays.  The pipeline's
        stages are what is over (TVM keeps a version of each cached buffer per stage), and a stage without its order
        does not lower (InjectSoftwarePipeline: "Order of the software pipeline is not defined"), so both go.  Whether
        the attempt went back so."""
        if self.retried >= self.line_retries:
            return False
        lines = self.text.split("\n")[:-1]
        loop = pipeline_loop(lines[-1]) if lines else None
        if loop is None:
            return False
        first = next((k for k, ln in enumerate(lines) if pipeline_loop(ln) == loop), None)
        if not first or first >= len(self._starts):
            return False
        self.unpipelined.add(loop)
        self._go_back(first, f"shared: {why}")
        self.stats.pipelines_dropped += 1
        # the line gone back to is drawn from a grammar without that loop's pipeline (its start kept the old one)
        self.state = self._state()
        grammar = self._grammar(False)
        self._starts[-1] = dataclasses.replace(self._starts[-1], state=self.state, grammar=grammar,
                                               order=self._line_order)
        self._begin_line(grammar)
        return True

    def _go_back(self, k: int, why: str) -> None:
        """Return to the start of line ``k`` (``_starts[k]``): the engine drops every token consumed since (``take_back``)
        and draws line k again from the logits its first token was drawn from."""
        start = self._starts[k]
        earlier = k < len(self._starts) - 1  # an earlier line than the current one: its refusals were for this start
        del self._starts[k + 1:]
        n = self.n_tokens - start.n_tokens
        self.retried += 1
        self.take_back += n
        self.stats.line_retries += 1
        self.stats.retried_tokens += n
        reason = re.sub(r"\d+", "N", why[:300])
        self.stats.add_reason(reason, retried=True)
        before = start.text.split("\n")[:-1]
        if not why.startswith(FULL_CONTEXT_REASONS):
            before = before[-RETRY_CONTEXT_LINES:]
        back = self.text[len(start.text):].split("\n")[:-1][:RETRY_BACK_LINES]  # the refused line last (or `post *`)
        writing = self.line.decode("utf-8", "replace")  # what the attempt had written of its next line (taken back too)
        if back and writing.partition("\n")[0].strip() == back[-1].strip():  # refused as it ended: that line itself
            writing = ""
        self.stats.add_retry_example(reason, "\n".join([*before, "~~~ taken back:", *back]
                                                       + ([f"~~~ and the line being written: {writing!r}"] if writing
                                                          else [])))
        self.text, self.n_insts, self.post_section, self._line_order = (start.text, start.n_insts, start.post_section,
                                                                         start.order)
        self.state, self.n_tokens, self.finished, self.post_left = start.state, start.n_tokens, False, start.post_left
        self.repaired = {i: r for i, r in self.repaired.items() if i < k}
        if earlier or why.startswith("post:"):
            self.refused = set()   # lines refused at the line gone back to are forgotten: its prefix is the same, but
            #                        those refusals were for other, later starts (``_starts`` ended there)
        self._begin_line(start.grammar)

    def completes_refused(self, b: bytes) -> bool:
        """Whether a token of bytes ``b`` would end the current line as one TVM refused at its start (``refused``)."""
        return bool(self.refused) and b"\n" in b and (self.line + b).partition(b"\n")[0].strip() in self.refused

    def refused_completions(self) -> list[int]:
        """The tokens that would end the current line as one TVM refused at its start (masked: ``restrict_whitespace``)."""
        if not self.refused:
            return []
        return [t for t, b in self.engine.newline_tokens() if self.completes_refused(b)]

    def taken_back(self) -> int:
        """The tokens the engine must drop now (a retried line's), and from here on none."""
        n, self.take_back = self.take_back, 0
        return n

    def at_line_start(self) -> bool:
        """Whether the next token is a line's first (the engine keeps the logits it is drawn from: ``line_marks``); also
        the token after `post *` while its end check runs (``_hold``): the attempt draws it again there at the verdict."""
        if self._hold is not None:
            return self.n_tokens == self._hold[1]
        return not (self.dead or self.done or self.finished or self.line or self._line_tokens)

    def _state(self) -> ScheduleState:
        key = (self.workload.key, self.text)
        hit = _STATES.get(key)
        if hit is None:
            try:
                hit = _workload_state(self.workload, self.text)
            except Exception as e:  # noqa: BLE001 - cached too: k attempts often share a failing prefix
                hit = e
            _STATES.put(key, hit)
        if isinstance(hit, BaseException):
            raise hit
        if not HALF_BOUND_RULE and hit.half_bound:
            hit = dataclasses.replace(hit, half_bound="")
        if not OUTERMOST_BLOCK_IDX and hit.loop_top:
            hit = dataclasses.replace(hit, loop_top=frozenset())
        if not PIPELINE_BODY_RULE and hit.loop_unsequenced:
            hit = dataclasses.replace(hit, loop_unsequenced=frozenset())
        if self.unpipelined:  # [drop pipeline] this attempt's own: not the prefix's (cached for every attempt)
            hit = dataclasses.replace(hit, loop_unpipelined=frozenset(self.unpipelined))
        if not ANNOTATION_AND_MOVE_RULES:
            return dataclasses.replace(hit, any_annotation=True)
        return hit

    def _kill(self, what: str, e: BaseException | str) -> None:
        self.dead = True
        self.error = f"{what}: {_last_message(e)}"[:300]
        if what == "decode":
            self.stats.rejected_decode += 1
        elif what == "post":
            self.stats.rejected_end += 1
        else:
            self.stats.rejected_apply += 1
        self.stats.add_reason(re.sub(r"\d+", "N", self.error))

    def _post_line(self, line: str, candidate: str, insts: list) -> bool:
        """[post section] A line of an explicit post-processing section (the `post` line, or one after it): the judge
        scores such a script only if its section is what the target's post-processors write after the lines before it
        (``evaluator.replay._check_written_post``: 25 of 28 verify errors of session 18's CPU retries arm, 336 attempts,
        were sections that differed).  At the `post` line the script before it must pass the end check of `post *`
        (refused: an end retry, as at `post *`), and the worker derives the section (``schedule_worker.post_section``);
        each later line's instructions must be the next ones of it, and the script may end only once all of it is
        written, and then must.  A line that is not the section's next (or `post *` inside it) ends the attempt as the
        lines before `post` and `post *` (``_derive_post``): the very kernel the section would have given, so no retry
        is spent on it.  Whether the line passes."""
        if line.strip() == "post" and not self.post_section:
            self.stats.end_checked += 1
            why, self._post = self._post_section(self.text)
            if why:
                if self.retried < self.line_retries and self._retry_end(why):
                    return False
                self.finished, self.text = True, candidate  # kept as written: the judge's verdict is the one given here
                self._kill("post", why)
                return False
            self._post_pre = self.text
        at = next(i for i, inst in enumerate(insts) if inst[0] == POSTPROC_MARKER)
        written = insts[at:]
        hit = first_mismatch(self._post[:len(written)], written, _same_instruction)
        if hit is None:
            self.post_left = len(self._post) - len(written)
            return True
        i, want, got = hit
        self._derive_post(f"post section: instruction {i} is {dumps(got)[:150]}; the post-processors write "
                          f"{dumps(want)[:150] if want is not None else 'nothing more'}")
        return False

    def _derive_post(self, why: str) -> None:
        """End the attempt as the lines before its explicit `post` line and `post *` (they passed the end check there):
        its section went astray (``why``), counted."""
        self.stats.post_derived += 1
        self.stats.add_reason(re.sub(r"\d+", "N", why))
        self.text = self._post_pre + "post *\n"
        self.post_section, self.post_left, self.finished, self.post_derived = False, None, True, True
        self._begin_line(self._grammar(False))

    def _post_section(self, text: str) -> tuple[str, list | None]:
        """``schedule_worker.post_section`` of the lines ``text`` (in the worker unless ``ISOLATE_TVM`` is off; cached:
        the attempts of a prompt write the same prefixes)."""
        wl = self.workload
        key = ("post", wl.key, text)
        hit = _STATES.get(key)
        if hit is None:
            t0 = time.perf_counter()
            try:
                pre = _decode(text) if text else [[], []]
                if ISOLATE_TVM:
                    hit = tvm_worker().post_section(wl.key, wl.mod, wl.target, text, pre)
                else:
                    hit = post_section(wl.mod, wl.post_context, text, pre, wl.key)
            except Exception as e:  # noqa: BLE001 - TVM crashed or hung on it (the worker names line and workload)
                hit = (str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__, None)
            finally:
                self.stats.state_s += time.perf_counter() - t0
            _STATES.put(key, hit)
        return hit

    def _line_done(self, line: str) -> None:
        self.stats.lines += 1
        candidate = self.text + line + "\n"
        if self.post_section and self._post_pre is not None and _DERIVED_POST.fullmatch(line.strip()):
            self._derive_post("post section: `post *` inside it")
            return
        if _DERIVED_POST.fullmatch(line.strip()):  # `post *` (also `post*`: the codec reads it so)
            # `post *`: the post-processing is derived; the finished kernel is checked here
            retry = self.retried < self.line_retries  # then the verdict is needed now: a refused script goes back
            if self.workload is not None:
                self.stats.end_checked += 1
                if self.defer_end and ISOLATE_TVM and not retry:  # its verdict waits for ``settle``; only the end follows
                    self._end = _end_checks().submit(self._finish_check, candidate, "end")
                elif self.defer_end and ISOLATE_TVM and self.end_wait > 0:  # its verdict after ``end_wait`` steps
                    self._hold = [_end_checks().submit(self._finish_check, candidate, "end"), self.n_tokens, 0,
                                  self.text]
                else:
                    why = self._finish_check(candidate)
                    if why and retry and self._retry_end(why):
                        return
                    if why:  # the script keeps its `post *`: the judge's verdict on it is the one given here
                        self.finished, self.text = True, candidate
                        self._kill("post", why)
                        return
            self.finished, self.text = True, candidate
            self._begin_line(self._grammar(False))
            return
        try:
            insts = _decode(candidate)[0]
        except Exception as e:  # noqa: BLE001 - a rule the line grammar leaves to the decoder: drawn again, counted
            # the line grammar is context-free: an index map's scopes (its body names its own indices, `@k` an earlier
            # span, `$k` an earlier shared sub-expression) are the decoder's to check, at the line's end
            if not self._retry(e, "decode"):
                self._kill("decode", e)
            return
        if self.workload is not None and (self.post_section or line.strip() == "post") and not self._post_line(
                line, candidate, insts):
            return
        why = _post_hazard(insts[len(_decode(self.text)[0]) if self.text else 0:])
        if why is not None:  # the line is left out: the checked lines before it are finished by `post *`
            self._kill("annotation", why)
            return
        fixed = _perfect_tile(line, self.state)
        if fixed is not None:
            self.repaired[self.text.count("\n")] = (line, fixed)
        self.text = candidate
        self.n_insts += 1
        self.post_section = self.post_section or line.strip() == "post"
        self._new_line()

    # -- the two operations of a decoding step
    def advance(self, token: int) -> None:
        if self.done:
            return
        if token == self.engine.eos_id:
            self.done = True
            return
        if self.dead:
            return
        if self._lazy:  # [lazy line starts] this token was drawn from the line-start mask: the line's state decides
            self._resolve_lazy()
        if self._first is not None:
            first, self._first = self._first, None
            if first == "drop" or not self._line_start_allows(token):
                if self.dead:  # a dead end at the line's start: ended, as at its mask
                    return
                self.take_back += 1  # the engine draws the line's first token again, from the same logits, masked
                self.stats.lazy_refused += 1
                return
        if self._hold is not None:  # a step held while the end check runs: taken back at its verdict
            self.n_tokens += 1
            self._hold[2] += 1
            self.stats.held_tokens += 1
            if self._hold[2] >= self.end_wait:
                self._end_verdict()
            return
        b = self.engine.token_bytes(token)
        if self.pending is not None and self._kind_matchers is not None:  # checked by kind (``allows``)
            names = self._kind_candidates(self.line + b)
            self._kind_matchers = {n: self._kind_matchers[n] for n in names
                                   if self._kind_matchers[n].consume_token(token)}
            if not self._kind_matchers:
                self._kill("decode", f"token {token} not allowed: no instruction kind takes "
                           f"{(self.line + b).decode('utf-8', 'replace')[-60:]!r}")
                return
        elif not self.matcher.consume_token(token):
            self._kill("decode", f"token {token} not allowed: {self.matcher.get_error()}")
            return
        self._line_tokens.append(token)
        self.n_tokens += 1
        line = self.ended_line(b)
        self.line += b
        if line is not None:
            self._line_done(line)
        elif b"\n" in b:  # blank lines before an instruction: the same matcher goes on
            self.line = self.line.partition(b"\n")[2].lstrip(b"\n")
        elif len(self.line) > LINE_MAX_BYTES:
            self._runaway()

    def _line_start_allows(self, token: int) -> bool:
        """Whether the mask ``fill_mask`` writes at this line's start allows ``token`` (a refused line's completions,
        white space and a dead end included: the attempt is then ended, as at its mask)."""
        row = allocate_bitmask(1, self.engine.vocab_size)
        self.fill_mask(row, 0)
        return not self.dead and self.engine.allowed_at(row[0], token)

    def _end_verdict(self) -> None:
        """[end wait] The verdict of the end check `post *` started, ``end_wait`` steps ago: the held tokens are taken
        back either way.  Accepted, the attempt's next token is drawn from the logits after `post *` (the engine kept
        them: ``at_line_start``), as if it had had the verdict at once; refused, it goes back to its tiling
        (``_retry_end``) as at once, or, that not possible, is dead with its `post *` (the same script and counts)."""
        future, at, held, before = self._hold
        self._hold = None
        t0 = time.perf_counter()
        why = future.result()
        self.stats.end_wait_s += time.perf_counter() - t0
        self.take_back += held
        self.n_tokens = at
        if not why:
            return
        candidate, self.text, self.finished = self.text, before, False
        if self._retry_end(why):
            return
        self.text, self.finished = candidate, True
        self._kill("post", why)

    def _runaway(self) -> None:
        """[runaway] The current line grew past ``LINE_MAX_BYTES`` without ending: refused as TVM refusing it would
        be (drawn again from its start while the attempt has line retries, else the attempt ends at its checked
        lines, finished as a cut one is: ``script``)."""
        self.stats.runaway_lines += 1
        why = (f"a line of over {LINE_MAX_BYTES} bytes without its end "
               f"({self.line[:40].decode('utf-8', 'replace')!r}..)")
        if self.retried < self.line_retries and self._starts:
            self._go_back(len(self._starts) - 1, "runaway: " + why)
        else:
            self._kill("runaway", why)

    def ended_line(self, b: bytes) -> str | None:
        """The line a token of bytes ``b`` ends (its text, without the newline), or None: no newline in ``b``, or
        only blank lines before it."""
        if b"\n" not in b:
            return None
        head = (self.line + b).partition(b"\n")[0]
        return head.decode("utf-8", errors="replace").rstrip("\r") if head.strip() else None

    def settle(self) -> None:
        """Apply the verdict of a deferred end check (``defer_end``): a script it refuses is dead, as if checked at
        its `post *` (it keeps its `post *`; only blank lines or the end came after it).  An attempt cut at the token
        budget while it held steps for its verdict (``_hold``) gets it here, without a retry (no step follows)."""
        if self._lazy:  # the attempt's last token ended a line (its budget): checked now, no step left to retry it in
            retries, self.line_retries = self.line_retries, self.retried
            try:
                self._resolve_lazy()
            finally:
                self.line_retries, self._first = retries, None
        hold, self._hold = self._hold, None
        if hold is not None:
            self.n_tokens = hold[1]
            why = hold[0].result()
            if why and not self.dead:
                self._kill("post", why)
        end, self._end = self._end, None
        if end is not None:
            why = end.result()
            if why and not self.dead:
                self._kill("post", why)

    def script(self, generated: str) -> str:
        """The attempt's script: the generated text; when generation stopped mid-line (the token budget ran out)
        or a decode check or dead end killed it, its complete checked lines, finished by ``post *``; when TVM
        refused a line or the end check refused the script (its retries spent), the longest prefix of the lines
        before it, at most ``finish_back`` lines shorter, that the post-processors finish, and `post *` (else the lines
        up to and including the refused one: the verdict names it).  Tile lines carry the first factor TVM ran
        (``_perfect_tile``): the script is the trace that was applied."""
        if self.post_derived:  # an explicit section gone astray: the lines before it and `post *` (``_derive_post``)
            return self._repair(self.text)
        if self.post_section and self._post_pre is not None and not self.done:  # cut or ended inside its section:
            return self._repair(self._post_pre + "post *\n")                   # the lines the end check passed
        if self.dead:
            if self.error.startswith(("apply:", "post:")):  # its last line (TVM's refusal, `post *` or `post`) dropped
                return self._repair(self._finish_earlier(_without_last_line(self.text), refused=True) or self.text)
            return self._repair(self._finished(self.text))
        if self.done:
            return self._repair(generated)
        self.stats.truncated += 1
        if len(self.stats.cut_examples) < CUT_EXAMPLES:
            lines = self.text.split("\n")[:-1]
            self.stats.cut_examples.append("\n".join([f"~~~ {len(lines)} lines, the last {RETRY_BACK_LINES}:",
                                                       *lines[-RETRY_BACK_LINES:]]))
        return self._repair(self._finished(self.text))

    def _repair(self, text: str) -> str:
        if not self.repaired:
            return text
        lines = text.split("\n")
        for i, (sampled, fixed) in self.repaired.items():
            if i < len(lines) and lines[i].rstrip("\r") == sampled:
                lines[i] = fixed
        return "\n".join(lines)

    def _finished(self, text: str) -> str:
        """Checked lines that stop short of ``post *``, finished by the target's post-processors, as MetaSchedule
        finishes every candidate; the lines alone when the post-processors refuse them.  Without ``post *`` a
        CUDA prefix is an unfinished kernel: blocks left unbound, cooperative fetches not rewritten (session 8's
        H200 A/B scored such prefixes: 23 apply errors and 3 wrong results among 32 first-pass attempts)."""
        if self.workload is None or self.finished or not text.strip():
            return text
        return self._finish_earlier(text) or text

    def _finish_earlier(self, text: str, refused: bool = False) -> str | None:
        """The longest prefix of the checked lines ``text`` that the target's post-processors finish, and `post *`, at
        most ``finish_back`` lines shorter than what the attempt wrote (None: none within reach).  ``refused``: ``text``
        is what is left of a dead attempt (the line TVM refused dropped, and counted; or the lines the end check
        refused); with ``finish_back`` 0 it keeps what it wrote.  On CUDA bare lines are no kernel (nothing bound: the
        judge's build leaves it to the host), and a little before a refusal there often is one: 11 of session 20's 34
        H200 sealed attempts without `post *` had such a prefix, within 19 lines.

        A prefix the end check refuses as host code (``host_blocks``) is tried again without its tiling annotations
        (`ann b tiling ..`, `unann b tiling`; no line defines a name with them): the attempt annotated a block as
        multi-level tiled and stopped before binding it, and `post *`'s RewriteUnboundBlock skips a block so annotated
        (the tiling rule binds its own), so no prefix after the annotation is a kernel.  Without it `post *` binds the
        block: all 21 of session 21's H200 sealed attempts that ended as host code (every prefix refused) passed then."""
        if refused and self.finish_back <= 0:
            return None
        if self.workload is None or not text.strip():
            return None
        t0 = time.perf_counter()
        try:
            return self._finish_search(text, refused)
        finally:
            self.stats.finish_s += time.perf_counter() - t0

    def _finish_search(self, text: str, refused: bool) -> str | None:
        lines = text.splitlines(keepends=True)
        lost = self._lost
        dropped = 1 if refused and not self.error.startswith("post:") else 0  # the line TVM refused
        for n in range(len(lines), max(len(lines) + dropped - self.finish_back, 1) - 1, -1):
            head = "".join(lines[:n])
            candidate = head + "post *\n"
            why = self._finish_check_cached(candidate)
            untiled = False
            if why.startswith("host code"):
                # repaired first: ``script``'s repair finds its tile lines by their index, which the dropped lines shift
                repaired = self._repair(head)
                bare = _TILING_ANNOTATION.sub("", repaired)
                if bare != repaired and bare.strip():
                    candidate, untiled = bare + "post *\n", True
                    why = self._finish_check_cached(candidate)
            if not why:
                if len(lines) - n + dropped or untiled:
                    self.stats.finished_earlier += 1
                    self.stats.finished_earlier_lines += len(lines) - n + dropped
                    self.stats.finished_untiled += untiled
                return candidate
            if self._lost - lost >= FINISH_LOST_LIMIT:  # [finish lost] TVM dies on these lines: no shorter prefix tried
                break
        return None

    def _finish_check_cached(self, text: str) -> str:
        """``_finish_check``, cached by workload and text (the attempts of a prompt often end on the same lines)."""
        key = ("finish", self.workload.key, text)
        hit = _STATES.get(key)
        if hit is None:
            self.stats.finish_checks += 1
            hit = self._finish_check(text)
            _STATES.put(key, hit)
        return hit

    def _finish_check(self, text: str, role: str = "lines") -> str:
        """Why ``text`` (ending in ``post *``) is not a finished kernel of the workload, "" when it is
        (``schedule_worker.finish_check``, in the ``role`` worker unless ``ISOLATE_TVM`` is off: a deferred check in
        its own, so the next steps' line requests never wait behind it)."""
        wl = self.workload
        t0 = time.perf_counter()
        try:
            if ISOLATE_TVM:
                if role == "end":  # a deferred check: the worker of its end-check thread
                    role = getattr(_END_ROLE, "name", "end")
                return tvm_worker(role).finish_check(wl.key, wl.mod, wl.target, text)
            return finish_check(wl.mod, wl.post_context, text, wl.key)
        except Exception as e:  # noqa: BLE001 - TVM crashed or hung on it (the worker names line and workload)
            if isinstance(e, (TVMCrashed, TVMTimedOut)):
                self._lost += 1
                self.stats.tvm_lost += 1
            return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        finally:
            self.stats.state_s += time.perf_counter() - t0

    def fill_mask(self, bitmask: Any, row: int) -> None:
        """Write the allowed-token bitmask of this attempt into ``bitmask[row]`` (llguidance layout)."""
        if self._hold is not None:  # a held step: any token but the end (it is taken back)
            bitmask[row] = self.engine.hold_mask(bitmask.shape[1])
            return
        if self._lazy:  # [lazy line starts] any token a line may start with (its own mask decides at the next step)
            bitmask[row] = self.engine.line_start_mask(bitmask.shape[1])
            return
        if self.eos_only():
            bitmask[row].zero_()
            e = self.engine.eos_id
            bitmask[row, e // 32] = _bit(e % 32)
            return
        t0 = time.perf_counter()
        self.grammar_mask(bitmask[row])
        restrict_whitespace([(self, row)], bitmask)
        self.stats.mask_s += time.perf_counter() - t0

    def by_kind(self) -> bool:
        """Whether the current line is checked by its kinds' grammars (``allows``) past its first token: its mask is
        then theirs, OR-ed (the line grammar's language is the union of its kinds', and the line's prefix rules out
        the others), and the line grammar need not be compiled."""
        return (self.pending is not None and bool(self._kind_matchers) and bool(self._line_tokens)
                and not self._kinds_forced())

    def _kinds_forced(self) -> bool:
        """Whether one of several kinds the line may still be forces the next bytes here (past the keyword's first
        letters: `bl` forces `ayout` in `blayout`'s grammar, not in the line grammar, where `blk` and `blockize`
        remain).  Where bytes are forced, llguidance's mask keeps only their canonical tokens (after `blay`: `out`, not
        `o` or `ou`), which depends on the whole grammar: the line grammar then decides (compiled, the line's tokens
        replayed).  With one kind left it need not: no other kind writes this prefix, so the line grammar's
        continuations here are that kind's, and so are its forced bytes and its mask (``test_constrained_allows``)."""
        alive = self._kind_matchers
        return len(alive) > 1 and any(m.compute_ff_bytes() for m in alive.values())

    def grammar_mask(self, v: Any) -> None:
        """The grammar's allowed-token bits into the contiguous int32 row ``v`` (llguidance writes it directly)."""
        size = v.numel() * v.element_size()
        if not self.by_kind():
            self.matcher.unsafe_compute_mask_ptr(v.data_ptr(), size)
            return
        first, *rest = self._kind_matchers.values()
        first.unsafe_compute_mask_ptr(v.data_ptr(), size)
        if rest:
            more = v.clone()
            for m in rest:
                m.unsafe_compute_mask_ptr(more.data_ptr(), size)
                v |= more

    def allows(self, token: int) -> bool:
        """Whether the mask ``fill_mask`` would write now allows ``token``, found without computing it: a sampler
        that draws from the model first and computes the mask only when the draw is refused samples exactly the
        masked distribution (``AttemptLogitsProcessor.allows``).  Where the line grammar is not compiled yet, the
        token is checked on the grammars of the instruction kinds its line may be (``grammar_line.LineKinds``: a
        kind's matcher builds in ~1.3 ms, the whole line grammar's in ~4.8 with the tiny model's 2,048 tokens; a line
        is one instruction, so the line grammar's language is the union of the kinds'), compiled once per kind and
        schedule state (cached by text); the same white-space and end rules as the mask (``restrict_whitespace``)."""
        eos = self.engine.eos_id
        if self.done:
            return False
        if self.dead:
            return token == eos
        if self._hold is not None:  # a held step (``fill_mask``)
            return token != eos and token < self.engine.vocab_size
        if self._lazy:  # a line start drawn ahead of its state (``fill_mask``)
            return self.engine.allowed_at(self.engine.line_start_mask((self.engine.vocab_size + 31) // 32), token)
        if token != eos and not self.engine.whitespace_ok(token, self.whitespace_state()):
            return False
        if token != eos and self.refused and self.completes_refused(self.engine.token_bytes(token)):
            return False
        if token == eos and self.pending is not None and not self.may_end():
            return False  # no end before the post-processing (a line's fresh matcher is never stopped)
        if (token == eos or self.pending is None or self.workload is None or self.state is None or self.finished
                or self.post_section):  # the line grammar (compiled, or one text for every line)
            return self._line_allows(token)
        names = self._kind_candidates(self.line + self.engine.token_bytes(token))
        if self._line_tokens and self._kinds_forced():
            return self._line_allows(token)
        return any(self._kind_matchers[n].validate_tokens([token]) == 1 for n in names)

    def _line_allows(self, token: int) -> bool:
        """``allows`` on the line grammar's matcher: the token is valid there and, where the grammar forces the next
        bytes, one the mask keeps (its canonical tokens only: ``_kinds_forced``)."""
        eos = self.engine.eos_id
        m = self.matcher
        if m.is_stopped():
            return token == eos
        if m.validate_tokens([token]) != 1 or (token == eos and not self.may_end()):
            return False
        if token != eos and m.compute_ff_bytes():
            row = allocate_bitmask(1, self.engine.vocab_size)[0]
            m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
            return self.engine.allowed_at(row, token)
        return True

    def _kind_candidates(self, prefix: bytes) -> list[str]:
        """The kinds a line starting with ``prefix`` may be and that took every token of the line so far, their
        matchers in ``_kind_matchers`` (at the line's first token those it names are compiled on demand)."""
        if self._kinds is None:
            self._kinds = line_kinds(self.state, **self._line_order)
        names = self._kinds.kinds_for(prefix)
        if self._kind_matchers is None:
            self._kind_matchers = {}
        if not self._line_tokens:
            todo = [n for n in names if n not in self._kind_matchers]
            if todo:
                grammars = {n: self._kinds.grammar(n) for n in todo}
                compiled = self.engine.matchers(list(dict.fromkeys(grammars.values())), self.stats, parallel=False)
                for n, g in grammars.items():
                    self._kind_matchers[n] = compiled[g].deep_copy()
        # one loop's `tile` kind (``k_tile@tl3``) is the `tile` kind's matcher when the line's first token did not yet
        # name the loop (that matcher took the line's tokens)
        held = (n if n in self._kind_matchers else n.partition("@")[0] for n in names)
        return list(dict.fromkeys(n for n in held if n in self._kind_matchers))

    def may_end(self) -> bool:
        """Whether EOS may come now: once the post-processing is written (`post *`, or an explicit `post`
        section, all of it where the workload is known: ``_post_line``), never before (``restrict_whitespace``)."""
        return self.finished or (self.post_section and not self.post_left)

    def eos_only(self) -> bool:
        # a line checked by kind is never stopped: its matchers stop only after its newline, which starts a new line;
        # an explicit post-processing section written whole ends the script (any line more is not the post-processors')
        if self.dead or self.done:
            return True
        if self._lazy:
            return False
        return ((self.post_section and self.post_left == 0)
                or (not self.by_kind() and self.matcher.is_stopped()))

    def whitespace_state(self) -> int:
        """Where the current line is, for ``restrict_whitespace``: at its start, after a space, else."""
        if not self.line:
            return WS_START
        return WS_SPACE if self.line[-1:] in (b" ", b"\t") or not self.line.strip() else WS_MID


def fill_masks(constraints: list[ScriptConstraint], bitmask: Any) -> None:
    """``fill_mask`` of every row at once: the live rows' masks computed in parallel by llguidance's
    executor (one call, GIL released), the others EOS only."""
    live, by_kind = [], []
    for i, c in enumerate(constraints):
        if c._hold is not None or c._lazy or c.eos_only():
            c.fill_mask(bitmask, i)
        elif c.by_kind():
            by_kind.append(i)
        else:
            live.append((c.matcher, i))
    t0 = time.perf_counter()
    for i in by_kind:
        constraints[i].grammar_mask(bitmask[i])
    if by_kind and not live:
        restrict_whitespace([(constraints[i], i) for i in by_kind], bitmask)
        constraints[0].stats.mask_s += time.perf_counter() - t0
        return
    if not live:
        return
    if len(live) < 4 or bitmask.shape[1] < 1024 or _workers() < 2:
        # a small vocabulary (the tiny model's 2k tokens: ~10 us a mask) costs less than a hand-off to threads
        for m, i in live:
            v = bitmask[i]
            m.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * v.element_size())
    else:
        _executor().unsafe_compute_mask_ptr(live, bitmask.data_ptr(), bitmask.shape[1] * bitmask.element_size(),
                                            bitmask.shape[0])
    restrict_whitespace([(constraints[i], i) for _, i in live] + [(constraints[i], i) for i in by_kind], bitmask)
    constraints[0].stats.mask_s += time.perf_counter() - t0


# White space: the codec grammar (``%ignore /[ \t]+/``, ``_NL: /(\r?\n)+/``) admits any run of blanks and blank
# lines, the encoder writes one space between fields, one newline after a line, nothing before a line.  A
# sampler free to add blanks can spend its whole budget on them (seen: an untrained SmolLM2 under constraint
# wrote single spaces after ``tile`` until the budget ran out).  So the grammar's masks are narrowed to the
# canonical separators: no white space at a line's start (no indent, no blank line), no space after a space,
# and no token holding a run of white space, a tab or a CR.  After a space the line may still end (a newline:
# whether a field follows that space is not known when it is written, and ``blk C `` may be complete), so a
# line has at most one blank in a row, a script no blank line.  Where the grammar allows nothing but white
# space the attempt is at a dead end (seen: ``tile`` before any loop exists: no ``tile`` rule has an
# alternative, and ``%ignore`` let the untrained SmolLM2 write spaces after it until the budget ran out);
# the rule then leaves no token, and the attempt is ended like a line that does not apply (counted in
# ``rejected_apply`` as "dead end", resampled).
# The end, likewise: the codec reads a script without post-processing, but MetaSchedule post-processes every
# candidate and the encoder writes every trace with it, so EOS is masked until `post *` (or an explicit `post`
# section) is written.  Allowed earlier, EOS ended half of the constrained attempts of a CPU A/B on CUDA prompts
# (16 of 32; free: none), and an EOS right after a line's last token left that line unchecked (no newline,
# so no line check): the final check then refused it.  An attempt cut off by the token budget is finished by
# `post *` where the post-processors accept its lines (``ScriptConstraint._finished``).
# The grammar and the decoder are unchanged (``test_real_harvest_records_are_never_forbidden``: the
# encoder's text of every real record is still accepted token by token).
WS_START, WS_SPACE, WS_MID = range(3)
_NON_CANONICAL_WS = (b"  ", b"\t", b"\r", b"\n\n", b" \n", b"\n ")

# [runaway] The longest line of every real record we have is 124 bytes (a rank-4 `layout` index map; 1,948 records of
# the H200, llvm and committed CUDA/llvm databases; next `blayout` 109, `blk` 57, `fuse` 36).  Some lists the grammar
# leaves unbounded (the loops of a `reorder`, the indices of an index map) let a model write one line until the
# token budget: session 23's CPU A/B had an attempt writing `l52 ` ~300 times and one an index map of ~300 tokens, so
# a batch of 32 attempts that ended within 90 tokens ran 319 steps for those two.  A line longer than this is refused
# (``ScriptConstraint._runaway``), twice the longest real one.
LINE_MAX_BYTES = 256


def restrict_whitespace(rows: list[tuple[ScriptConstraint, int]], bitmask: Any) -> None:
    """AND the canonical-white-space masks into ``bitmask``'s rows (each ``(constraint, row)``, a live
    attempt whose grammar mask is written), and clear the tokens that would end a line TVM refused at the line's
    start (``ScriptConstraint.refused``); an attempt left no token (only white space could follow: a
    dead end) is ended (EOS only)."""
    if not rows:
        return
    import torch

    masks = rows[0][0].engine.whitespace_masks(bitmask.shape[1])
    idx = torch.tensor([r for _, r in rows])
    states = torch.tensor([c.whitespace_state() for c, _ in rows])
    grammar = bitmask[idx]
    out = grammar & masks[states]
    for i, (c, _) in enumerate(rows):  # and never a line TVM refused at this line's start (line retries)
        for t in c.refused_completions():
            out[i, t // 32] &= ~_bit(t % 32)
    early = torch.tensor([not c.may_end() for c, _ in rows])
    if bool(early.any()):  # no end before the post-processing (see above)
        e = rows[0][0].engine.eos_id
        out[early, e // 32] &= ~_bit(e % 32)
    bitmask[idx] = out
    for (c, row), ok in zip(rows, (out != 0).any(-1).tolist()):
        if not ok:
            c._kill("dead end", "only white space may follow " + repr(c.line.decode("utf-8", "replace")[-60:]))
            c.fill_mask(bitmask, row)


@functools.lru_cache(maxsize=1)
def _executor() -> Any:
    import llguidance

    return llguidance.LLExecutor(num_threads=_workers())


_SHIFTS: dict[Any, Any] = {}


def prepare(constraints: list[ScriptConstraint], parallel: bool = True) -> None:
    """Compile the pending line grammars of ``constraints`` at once (distinct ones in parallel when
    ``parallel``), so that a decoding step where several attempts ended a line waits for one compile, not one
    per attempt."""
    todo = [c for c in constraints if c.pending is not None and not (c.dead or c.done or c.by_kind())]
    if len(todo) < 2:
        return
    compiled = todo[0].engine.matchers(list(dict.fromkeys(c.pending for c in todo)), todo[0].stats, parallel)
    for c in todo:
        c.take_matcher(compiled[c.pending])


def allocate_bitmask(rows: int, vocab: int) -> Any:
    """An all-allowed int32 bitmask ``[rows, ceil(vocab/32)]`` on the CPU (llguidance's layout; its own
    ``llguidance.torch`` helpers are not used: importing them compiles a torch kernel, ~40 s on a CPU)."""
    import torch

    return torch.full((rows, (vocab + 31) // 32), -1, dtype=torch.int32)


def unpack_bitmask(bitmask: Any, vocab: int, device: Any = None) -> Any:
    """llguidance's int32 bitmask ``[B, ceil(V/32)]`` as a bool tensor ``[B, vocab]`` (True: allowed)."""
    import torch

    bitmask = bitmask.to(device) if device is not None else bitmask
    shifts = _SHIFTS.get(bitmask.device)
    if shifts is None:
        shifts = _SHIFTS[bitmask.device] = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().reshape(bitmask.shape[0], -1)
    if allowed.shape[1] < vocab:
        allowed = torch.nn.functional.pad(allowed, (0, vocab - allowed.shape[1]), value=False)
    return allowed[:, :vocab]


def apply_bitmask(scores: Any, bitmask: Any) -> None:
    """Disallowed tokens get -inf (in place; columns past the tokenizer's vocabulary are disallowed)."""
    allowed = unpack_bitmask(bitmask, scores.shape[-1], scores.device)
    scores.masked_fill_(~allowed, float("-inf"))


def _bit(i: int) -> int:
    v = 1 << i
    return v - (1 << 32) if v >= 1 << 31 else v  # int32 storage


# -------------------------------------------------------------------------------------- logits processor
class CodecLogitsProcessor:
    """A transformers ``LogitsProcessor``: row ``i`` is constrained by ``constraints[i]``."""

    def __init__(self, engine: TokenEngine, constraints: list[ScriptConstraint]):
        self.engine, self.constraints = engine, constraints
        self._prompt_len: int | None = None
        self._bitmask = None
        self._advanced = False  # the last sampled tokens were consumed ahead (``ahead``)
        self._job: Any = None   # the Future of that work when it runs beside the forward pass (``BACKGROUND``)
        self._threads = bool(COMPILE_THREADS)  # compiles in worker threads (``COMPILE_THREADS``; set per device)

    def ahead(self, input_ids: Any) -> None:
        """Consume the tokens just sampled before the model's next forward pass (a forward pre-hook
        calls this: ``generate_constrained``); the grammars of the lines they ended start compiling at
        once, so that the compiles run while the model computes, and ``__call__`` collects them.

        Where the forward pass runs on an accelerator (``BACKGROUND``), all of the next step's work
        (advance, decode + apply the lines that ended, compile, masks) runs in a background thread
        during it: the next masks depend only on the tokens sampled so far, never on the logits being
        computed, and the work and its order are those of doing it in ``__call__`` (same states, masks,
        samples).  On a CPU the line work stays in this thread: there the forward pass is Python-heavy
        too, and beside it in a thread the same work was slower (GIL; results/constrained-decoding.md,
        session 6)."""
        if self._prompt_len is None or self._advanced or input_ids is None:
            return
        if input_ids.shape[0] != len(self.constraints):
            return
        tokens = input_ids[:, -1].tolist()
        self._advanced = True
        self._threads = _compile_threads(input_ids.device)
        if _background(input_ids.device) and self._bitmask is not None:
            self._job = _line_worker().submit(self._next_masks, tokens)
        else:
            self._consume(tokens)

    def _consume(self, tokens: list[int]) -> None:
        """Advance every row by its sampled token; a row that ended a line starts its grammar's compile at
        once (it runs while the next rows' lines are applied, and then during the forward pass)."""
        prefetch_states(self.constraints, tokens)
        for c, tok in zip(self.constraints, tokens):
            c.advance(tok)
            if self._threads and c.pending is not None and not (c.dead or c.done):
                self.engine.start([c.pending])

    def _next_masks(self, tokens: list[int]) -> None:
        self._consume(tokens)
        prepare(self.constraints, self._threads)
        fill_masks(self.constraints, self._bitmask)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        masked = False
        if self._prompt_len is None:
            self._prompt_len = input_ids.shape[1]
            self._threads = _compile_threads(scores.device)
        elif self._advanced:
            self._advanced = False
            job, self._job = self._job, None
            if job is not None:
                job.result()  # re-raises what the background work raised
                masked = True
        else:
            self._consume(input_ids[:, -1].tolist())
        n = len(self.constraints)
        if self._bitmask is None:
            self._bitmask = allocate_bitmask(n, scores.shape[-1])
        if not masked:
            prepare(self.constraints, self._threads)
            fill_masks(self.constraints, self._bitmask)
        apply_bitmask(scores, self._bitmask)
        done = [i for i, c in enumerate(self.constraints) if c.done]
        if done:  # finished rows get pad tokens from generate(); leave their scores finite
            scores[done] = 0.0
        return scores


class AttemptLogitsProcessor:
    """The shared-prefix engine's processor (``generation.shared_prefix``: ``ahead`` / ``__call__`` by attempt id):
    attempt ``a`` is constrained by ``constraints[a]``, whichever rows are still in the batch.  The same per-step
    work as ``CodecLogitsProcessor`` (advance by the sampled tokens, compile the lines they ended, masks; in a
    background thread beside the forward pass where ``BACKGROUND`` says so, compiles in threads where
    ``COMPILE_THREADS`` does) and the same masks: the constraint is a function of each attempt's own tokens."""

    def __init__(self, engine: TokenEngine, constraints: list[ScriptConstraint], t0: float | None = None):
        self.engine, self.constraints = engine, constraints
        self._bitmask = allocate_bitmask(len(constraints), engine.vocab_size)
        self._rows: dict[int, int] = {}   # attempt id -> its row of ``_bitmask`` (masks computed ahead)
        self._job: Any = None
        self._ahead: tuple | None = None  # (ids, tokens, their lines' facts on the way): consumed by ``_collect``
        self._asked: StatesAhead | None = None  # [lazy line starts] the facts of the lines the last step ended
        self._threads = bool(COMPILE_THREADS)
        self._t0 = time.perf_counter() if t0 is None else t0  # the call's start: its first masks time the cold start

    def ahead(self, attempts: Any, tokens: Any, final: bool = False) -> None:
        """The tokens ``attempts`` just sampled (EOS included), before the next forward pass: consumed (and the
        next masks computed, in the background thread when ``BACKGROUND``, unless the engine checks its draws
        first: ``sample_first``) while the model computes.  Otherwise the lines they end go to the TVM worker now
        (``request_states``: it applies them on another core during the forward pass) and the tokens are consumed
        after the forward pass (``_collect``), in this thread."""
        self._collect()
        ids, toks = attempts.tolist(), tokens.tolist()
        self._threads = _compile_threads(tokens.device)
        if _background(tokens.device) and not final:
            lazy = _sample_first(tokens.device)
            self._job = _line_worker().submit(self._consume if lazy else self._next_masks, ids, toks)
            return
        if final:
            self._consume(ids, toks, final=True)
            return
        self._ahead = (ids, toks, request_states([self.constraints[a] for a in ids], toks))

    @property
    def takes_back(self) -> bool:
        """Whether attempts may take a refused line back (``line_marks``; their constraints have line retries)."""
        return any(c.line_retries > 0 for c in self.constraints)

    def line_marks(self, attempts: Any) -> tuple[list[int], list[bool]]:
        """For each of ``attempts`` (ids, not ended), after its last token is consumed: how many of its last tokens the
        engine drops (a line TVM refused, drawn again: ``ScriptConstraint.line_retries``) and whether its next token
        starts a line (the engine keeps the logits it is drawn from, to draw a retried line again from them)."""
        self._collect()
        return self.line_marks_ids(attempts.tolist())

    def sample_first(self, device: Any) -> bool:
        """Whether the engine should draw each attempt's token unmasked, ask ``allows``, and mask (``__call__``)
        only the attempts whose draw was refused (``SAMPLE_FIRST``).  Exact: a draw from p kept when allowed, else
        a draw from the masked p / Z, is a draw from p / Z (allowed t: p(t) + (1 - Z) p(t) / Z = p(t) / Z)."""
        return _sample_first(device)

    def allows(self, attempts: Any, tokens: Any, redraw: bool = False) -> list[bool]:
        """For each of ``attempts`` (ids, not ended), whether its constraint allows the token drawn for it
        (``ScriptConstraint.allows``: the bit its mask would have).  ``redraw``: tokens drawn again after a refusal
        (``shared_prefix._checked_sample``), counted apart."""
        self._collect()
        out = self.allows_ids(attempts.tolist(), tokens.tolist(), redraw)
        if self._t0 is not None and self.constraints:
            self.constraints[0].stats.first_mask_s += time.perf_counter() - self._t0
            self._t0 = None
        return out

    def allows_ids(self, ids: list[int], toks: list[int], redraw: bool = False) -> list[bool]:
        """``allows`` of attempt ids and tokens as lists, the background work already collected."""
        t = time.perf_counter()
        out = [self.constraints[a].allows(tok) for a, tok in zip(ids, toks)]
        if self.constraints:
            stats, now = self.constraints[0].stats, time.perf_counter()
            if redraw:
                stats.redraws += len(out)
                stats.redraw_refused += out.count(False)
            else:
                stats.checked += len(out)
                stats.check_refused += out.count(False)
            stats.check_s += now - t
        return out

    def line_marks_ids(self, ids: list[int]) -> tuple[list[int], list[bool]]:
        """``line_marks`` of attempt ids as a list, the background work already collected."""
        cs = [self.constraints[a] for a in ids]
        return [c.taken_back() for c in cs], [c.at_line_start() for c in cs]

    def _consume(self, ids: list[int], toks: list[int], states: StatesAhead | None = None, final: bool = False) -> None:
        """Advance attempts ``ids`` by ``toks``; the facts of the lines they end asked of the worker first (or already
        asked: ``states``) and waited for, or, where line starts are lazy (``LAZY_LINE_STARTS``; not for the ``final``
        tokens), not waited for: those lines' attempts draw their next tokens meanwhile and take them up here at the next
        step, the facts stored first and their grammars compiled side by side."""
        cs = [self.constraints[a] for a in ids]
        asked, self._asked = self._asked, None
        if asked is not None:
            asked.store()
        if final:
            for c in self.constraints:
                c.lazy = False
        lazy = any(c.lazy for c in cs)
        if lazy:
            ahead = states if states is not None else request_states(cs, toks)
        elif states is None:
            prefetch_states(cs, toks)
        else:
            states.store()
        resolved = [c for c in cs if c._lazy]
        for c in resolved:
            c._resolve_lazy()
        resolved = [c for c in resolved if c.pending is not None and not c.dead]
        if self._threads:
            self.engine.start(list(dict.fromkeys(c.pending for c in resolved)))
        elif len(resolved) > 1:
            prepare(resolved, parallel=False)
        for c, tok in zip(cs, toks):
            c.advance(tok)
            if self._threads and c.pending is not None and not (c.dead or c.done):
                self.engine.start([c.pending])
        if lazy:
            self._asked = ahead

    def _fill(self, ids: list[int]) -> None:
        live = [self.constraints[a] for a in ids]
        prepare(live, self._threads)
        fill_masks(live, self._bitmask[:len(live)])
        self._rows = {a: i for i, a in enumerate(ids)}

    def _next_masks(self, ids: list[int], toks: list[int]) -> None:
        self._consume(ids, toks)
        self._fill([a for a in ids if not self.constraints[a].done])

    def _collect(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            job.result()  # re-raises what the background work raised
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # the tokens ``ahead`` left for after the forward pass
            self._consume(*ahead)

    def __call__(self, attempts: Any, input_ids: Any, scores: Any) -> Any:
        """``scores`` ``[m, V]`` of ``attempts`` (ids; not ended), the tokens not allowed set to ``-inf``."""
        ids = attempts.tolist()
        t = time.perf_counter()
        had_job = self._job is not None
        self._collect()
        if not (had_job and all(a in self._rows for a in ids)):
            self._fill(ids)
        if self.constraints:
            stats, now = self.constraints[0].stats, time.perf_counter()
            stats.wait_s += now - t
            if self._t0 is not None:
                stats.first_mask_s += now - self._t0
                self._t0 = None
        rows = [self._rows[a] for a in ids]
        bits = self._bitmask[:len(ids)] if rows == list(range(len(ids))) else self._bitmask[rows]
        self._rows = {}
        apply_bitmask(scores, bits)
        return scores

    def close(self) -> None:
        """After the engine call (also when it failed): the background work collected, every end check settled."""
        try:
            self._collect()
            asked, self._asked = self._asked, None
            if asked is not None:
                asked.store()
        finally:
            for c in self.constraints:
                c.settle()

    def results(self, texts: list[list[str]], n: int) -> list[list[tuple[str, bool]]]:
        """Per prompt, per attempt of its ``texts`` (the engine's decoded attempts), the script its constraint keeps
        and whether it passed the line checks (``n`` attempts a prompt were constrained; 1 when greedy: the prompt's
        one constraint serves every attempt)."""
        return [[(c.script(t), not c.dead) for c, t in
                 zip((self.constraints[p * n + (a if n == len(ts) else 0)] for a in range(len(ts))), ts)]
                for p, ts in enumerate(texts)]


def _last_message(e: BaseException | str) -> str:
    """The last line of an error's message (TVM's own is its last)."""
    msg = str(e).strip().splitlines()
    return msg[-1] if msg else ""


class ConstrainedDecoding:
    """The ``generation.sample`` hook: ``factory(batch_prompts, k)`` gives the processor of one batch whose
    row ``i`` belongs to ``batch_prompts[i // k]``.  ``stats`` accumulates over all batches;
    ``last_constraints`` are the last batch's (for their ``dead``/``error``)."""

    def __init__(self, tokenizer: Any, semantic: bool = True, line_retries: int = 0, finish_back: int = 0,
                 processes: int | None = None, tensor_intrinsics: bool | None = None):
        self.tokenizer, self.semantic = tokenizer, semantic
        processes = PROCESSES if processes is None else processes  # ``generation.constrained_processes``
        # [intrinsics at start] resolved here (the parent), handed to the constraint processes as a value
        intrinsics = tensor_intrinsics_at_start() if tensor_intrinsics is None else tensor_intrinsics
        self.line_retries = line_retries  # per attempt, on an engine that takes tokens back (``attempt_processor``)
        self.finish_back = finish_back    # ``ScriptConstraint.finish_back`` of every attempt
        self.stats = ConstraintStats()
        self.last_constraints: list[ScriptConstraint] = []
        self.processor: CodecLogitsProcessor | None = None
        self._engine: TokenEngine | None = None
        self._processes: list = []
        if processes > 0:  # the shared-prefix engine's constraints live in processes of their own, started now
            from little_dragon.generation.constraint_process import ConstraintProcess, process_cores

            self._processes = [ConstraintProcess(tokenizer, semantic, line_retries, finish_back,
                                                 cores=process_cores(processes), tensor_intrinsics=intrinsics)
                               for _ in range(processes)]
        elif semantic and ISOLATE_TVM:
            for role in worker_roles():  # the workers' processes and imports while the caller loads its model
                tvm_worker(role).start(intrinsics and semantic)

    def engine(self, vocab_size: int | None = None) -> TokenEngine:
        if self._engine is None:
            self._engine = engine_for(self.tokenizer, vocab_size)
        return self._engine

    def constraints_for(self, prompts: list[str], k: int) -> list[ScriptConstraint]:
        eng = self.engine()
        out = []
        for p in prompts:
            wl = workload_of_prompt(p) if self.semantic else None
            for _ in range(k):
                c = ScriptConstraint(eng, wl, self.stats)
                c.finish_back = self.finish_back
                out.append(c)
        self.stats.attempts += len(out)
        return out

    def __call__(self, batch_prompts: list[str], k: int) -> CodecLogitsProcessor:
        self.last_constraints = self.constraints_for(batch_prompts, k)
        self.processor = CodecLogitsProcessor(self.engine(), self.last_constraints)
        return self.processor

    def attempt_processor(self, prompts: list[str], n: int, defer_end: bool = False,
                          retries: bool = True, end_wait: int = 0, lazy: bool = False) -> Any:
        """The shared-prefix engine's processor of one call over ``prompts``, ``n`` attempts each (attempt
        ``p * n + j`` is ``constraints[p * n + j]``; ``last_constraints`` are these).  ``defer_end``: the end checks
        run beside decoding (the caller ``settle``s every constraint after the call), those with retries left read
        after ``end_wait`` steps (``END_WAIT_STEPS``; 0: at once).  ``retries``: a refused line
        is drawn again (``line_retries`` times an attempt; not when greedy, which would draw it again).  Under ``PROCESSES``
        the constraints live in the constraint processes (``constraint_process.ProcessAttempts``; ``last_constraints``
        stays empty) and this call's counts join ``stats`` at its ``results``.  ``lazy``: line starts drawn ahead of
        their state (``LAZY_LINE_STARTS``), where attempts have line retries (their engine takes tokens back)."""
        if self._processes:
            from little_dragon.generation.constraint_process import ProcessAttempts

            self.last_constraints = []
            return ProcessAttempts(self._processes, prompts, n, defer_end, retries, self.stats, end_wait, lazy)
        t0 = time.perf_counter()
        self.last_constraints = self.constraints_for(prompts, n)
        for c in self.last_constraints:
            c.defer_end = defer_end
            c.end_wait = end_wait if defer_end else 0
            c.line_retries = self.line_retries if self.semantic and retries else 0
            c.lazy = lazy and c.line_retries > 0
        self.stats.setup_s += time.perf_counter() - t0
        self.processor = None  # the model's forward pre-hook is the HF path's; the engine calls ``ahead`` itself
        return AttemptLogitsProcessor(self.engine(), self.last_constraints, t0)

    def wait_ready(self) -> None:
        """Wait until the constraint processes (``PROCESSES``) have started (benchmarks: not in the first call's time)."""
        for proc in self._processes:
            proc.wait_ready()

    def close(self) -> None:
        """End the constraint processes now (they end with the hook or the program otherwise)."""
        for proc in self._processes:
            proc.close()

    def forward_pre_hook(self, module: Any, args: Any, kwargs: Any) -> None:
        """For ``model.register_forward_pre_hook(..., with_kwargs=True)``: hands the tokens just sampled
        to the current batch's processor before the forward pass (``CodecLogitsProcessor.ahead``)."""
        proc = getattr(self, "processor", None)
        if proc is not None:
            proc.ahead(kwargs.get("input_ids", args[0] if args else None))


def logits_processor_factory(tokenizer: Any, semantic: bool = True, line_retries: int = 0,
                             finish_back: int = 0, processes: int | None = None) -> ConstrainedDecoding:
    """What ``generation.sample.LocalGenerator`` calls when ``generation.constrained`` is true (``line_retries``:
    ``generation.constrained_line_retries``, used on the shared-prefix engine; ``finish_back``:
    ``generation.constrained_finish_back``; ``processes``: ``generation.constrained_processes``)."""
    return ConstrainedDecoding(tokenizer, semantic, line_retries, finish_back, processes)


# ---------------------------------------------------------------------------- attempts with resampling
@dataclasses.dataclass
class ConstrainedResult:
    scripts: list[list[str]]       # per prompt, its k attempts (after resampling)
    first_scripts: list[list[str]]  # per prompt, the k attempts of the first pass (equal-attempt A/B)
    first_ok: list[list[bool]]     # did the first pass's attempt pass the line checks
    stats: ConstraintStats
    seconds: float                 # all passes
    new_tokens: int                # tokens of the final scripts
    first_seconds: float = 0.0     # the first pass alone (equal-attempt tokens/s)
    first_generated: int = 0       # tokens the first pass sampled (incl. those of lines cut off at the budget)


def generate_constrained(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                         temperature: float, batch_size: int = 16, max_resamples: int = 2,
                         semantic: bool = True, hook: ConstrainedDecoding | None = None,
                         cache_implementation: str = "dynamic") -> ConstrainedResult:
    """``k`` constrained attempts per prompt; an attempt that a line check rejected is generated again,
    at most ``max_resamples`` more times (each one counted in ``stats.resampled``).

    ``cache_implementation``: ``shared_prefix`` decodes on ``generation.shared_prefix``'s engine (one cache row
    per prompt, its k attempts interleaved; ``AttemptLogitsProcessor``), anything else through transformers'
    ``generate`` with a dynamic cache (``CodecLogitsProcessor`` and the model's forward pre-hook).  The same
    constraint and masks either way; ``continuous`` takes no logits processor and is refused."""
    hook = hook or ConstrainedDecoding(tokenizer, semantic)
    if cache_implementation == "continuous":
        raise ValueError("constrained decoding runs on cache_implementation shared_prefix, dynamic or static "
                         "(continuous batching takes no logits processor)")
    if cache_implementation == "shared_prefix":
        return _generate_constrained_shared(model, tokenizer, prompts, k, max_new_tokens, temperature, batch_size,
                                            max_resamples, hook)
    handle = model.register_forward_pre_hook(hook.forward_pre_hook, with_kwargs=True)
    try:
        return _generate_constrained(model, tokenizer, prompts, k, max_new_tokens, temperature, batch_size,
                                     max_resamples, hook)
    finally:
        handle.remove()
        hook.processor = None


def _generate_constrained(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                          temperature: float, batch_size: int, max_resamples: int,
                          hook: ConstrainedDecoding) -> ConstrainedResult:
    from little_dragon.training.callbacks import sample_scripts

    t0 = time.perf_counter()
    scripts: list[list[str]] = []
    ok: list[list[bool]] = []
    raw: list[str] = []
    for i in range(0, len(prompts), max(1, batch_size // k)):
        chunk = prompts[i:i + max(1, batch_size // k)]
        texts = sample_scripts(model, tokenizer, chunk, max_new_tokens, temperature, batch_size=batch_size,
                               num_return_sequences=k, logits_processor_factory=hook)
        raw += texts
        texts = _scripts_of(hook.last_constraints, texts)
        dead = [c.dead for c in hook.last_constraints]
        for j in range(len(chunk)):
            scripts.append(texts[j * k:(j + 1) * k])
            ok.append([not d for d in dead[j * k:(j + 1) * k]] if len(dead) == len(texts) else [True] * k)
    first_seconds = time.perf_counter() - t0
    generated = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in raw)

    def resample(pending: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, bool]]:
        out = {}
        for i in range(0, len(pending), batch_size):
            part = pending[i:i + batch_size]
            # sampled first: ``hook.last_constraints`` are this batch's only once sample_scripts made them (read
            # before the call, they were the previous batch's: the lengths differed and the raw texts, failing
            # lines and cut-off lines included, were kept as the resampled scripts)
            raw = sample_scripts(model, tokenizer, [prompts[p] for p, _ in part], max_new_tokens, temperature,
                                 batch_size=batch_size, num_return_sequences=1, logits_processor_factory=hook)
            texts = _scripts_of(hook.last_constraints, raw)
            out.update(zip(part, zip(texts, [not c.dead for c in hook.last_constraints])))
        return out

    return _with_resamples(tokenizer, scripts, ok, max_resamples, hook, resample, t0, first_seconds, generated)


def _generate_constrained_shared(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                                 temperature: float, batch_size: int, max_resamples: int,
                                 hook: ConstrainedDecoding) -> ConstrainedResult:
    """``generate_constrained`` on the shared-prefix engine: one processor per engine call, attempt ``p * n + a``
    of the call constrained by its own ``ScriptConstraint`` (``n`` = k; 1 when greedy: one attempt repeated);
    resamples are one attempt per pending (prompt, attempt), each its own constraint."""
    from little_dragon.generation.shared_prefix import sample_token_ids

    per_chunk = max(1, batch_size // max(k, 1))

    def run(ps: list[str], kk: int, chunk: int) -> tuple[list[list[str]], list[list[tuple[str, bool]]]]:
        n = kk if temperature > 0 else 1
        # the end checks beside decoding: an attempt at `post *` may only end, so its verdict is needed only after
        # the call (the worker checks it while the model computes the next steps)
        proc = hook.attempt_processor(ps, n, defer_end=True, retries=temperature > 0,
                                      end_wait=_end_wait(next(model.parameters()).device), lazy=LAZY_LINE_STARTS)
        try:
            out = sample_token_ids(model, tokenizer, ps, kk, max_new_tokens, temperature, prompts_per_chunk=chunk,
                                   logits_processor=proc)
        finally:
            proc.close()
        texts = [[tokenizer.decode(ids, skip_special_tokens=True) for ids in a] for a in out.token_ids]
        return texts, proc.results(texts, n)

    t0 = time.perf_counter()
    raw, kept = run(prompts, k, per_chunk)
    first_seconds = time.perf_counter() - t0
    generated = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for ts in raw for t in ts)
    scripts = [[s for s, _ in pairs] for pairs in kept]
    ok = [[good for _, good in pairs] for pairs in kept]

    def resample(pending: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, bool]]:
        _, kept = run([prompts[p] for p, _ in pending], 1, max(1, batch_size))
        return {pa: pair for pa, (pair,) in zip(pending, kept)}

    return _with_resamples(tokenizer, scripts, ok, max_resamples, hook, resample, t0, first_seconds, generated)


def _with_resamples(tokenizer: Any, scripts: list[list[str]], ok: list[list[bool]], max_resamples: int,
                    hook: ConstrainedDecoding, resample: Any, t0: float, first_seconds: float,
                    generated: int) -> ConstrainedResult:
    """The first pass's ``scripts`` and ``ok`` (per prompt, per attempt), then at most ``max_resamples`` passes
    of ``resample(pending)`` (``{(prompt, attempt): (script, ok)}``) over the attempts a line check killed."""
    first, first_ok = [list(x) for x in scripts], [list(o) for o in ok]
    final = [list(x) for x in scripts]
    pending = [(p, a) for p in range(len(scripts)) for a in range(len(scripts[p])) if not ok[p][a]]
    for _ in range(max_resamples):
        if not pending:
            break
        hook.stats.resampled += len(pending)
        for (p, a), (text, good) in resample(pending).items():
            final[p][a] = text
            ok[p][a] = good
        pending = [(p, a) for p, a in pending if not ok[p][a]]
    n_tok = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for x in final for t in x)
    st = hook.stats  # this hook's totals so far (a stage may call it several times)
    log.info("constrained generation: %d prompts, first pass %.1f s, %.1f s in all; totals: %d attempts (%d resampled), "
             "%d lines checked, %d drawn again in their attempt (%d tokens taken back), rejected %d at a line and %d at "
             "the end of the script (of %d checked), %d cut at the budget, %d ended at an earlier line (%d lines "
             "dropped, %d without a tiling annotation); setup %.1f s, first masks %.1f s after each "
             "call's start, %d grammars compiled in %.1f s, state %.1f s, masks %.1f s, waited for masks %.1f s; "
             "finishing cut and refused attempts %.1f s (%d checks; %d TVM workers lost at end checks)",
             len(scripts), first_seconds, time.perf_counter() - t0, st.attempts, st.resampled, st.lines,
             st.line_retries, st.retried_tokens, st.rejected_apply + st.rejected_decode, st.rejected_end,
             st.end_checked, st.truncated, st.finished_earlier, st.finished_earlier_lines, st.finished_untiled,
             st.setup_s, st.first_mask_s, st.compiled, st.compile_s, st.state_s, st.mask_s, st.wait_s, st.finish_s,
             st.finish_checks, st.tvm_lost)
    for name, counts in (("lines drawn again", st.retry_reasons), ("attempts ended", st.reasons)):
        if counts:  # what to rule next: the refusals the constraint could not mask
            log.info("constrained generation, %s by reason (top 8): %s", name, "; ".join(
                f"{n}x {why[:160]}" for why, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8]))
    return ConstrainedResult(final, first, first_ok, hook.stats, time.perf_counter() - t0, n_tok, first_seconds,
                             generated)


def _scripts_of(constraints: list[ScriptConstraint], texts: list[str]) -> list[str]:
    if len(constraints) != len(texts):  # sample_scripts batches by its own rule; keep its texts then
        return texts
    return [c.script(t) for c, t in zip(constraints, texts)]


# ------------------------------------------------------------------------------------------------- RL
def replay_masks(engine: TokenEngine, prompt: str, completion_ids: list[int], semantic: bool = True) -> Any:
    """The allowed-token masks the constraint applied at each step of ``completion_ids`` (a bool tensor
    ``[len(completion_ids), vocab]``): the constraint is a function of the text so far, so replaying the
    completion reproduces the sampler's masks exactly."""
    wl = workload_of_prompt(prompt) if semantic else None
    c = ScriptConstraint(engine, wl)
    bits = allocate_bitmask(len(completion_ids), engine.vocab_size)
    for i, tok in enumerate(completion_ids):
        c.fill_mask(bits, i)
        c.advance(tok)
    return unpack_bitmask(bits, engine.vocab_size)


def masked_log_probs(logits: Any, masks: Any, token_ids: Any) -> Any:
    """``log p_m(token)`` under the masked, renormalised distribution the constrained sampler drew from:
    ``logits`` ``[T, V]`` (the trainer's, with gradients), ``masks`` ``[T, V']`` from ``replay_masks``,
    ``token_ids`` ``[T]``.  Temperature, if any, must be applied to ``logits`` first, as in sampling."""
    import torch

    v = min(logits.shape[-1], masks.shape[-1])
    masked = torch.full_like(logits, float("-inf"))
    masked[:, :v] = torch.where(masks[:, :v].to(logits.device), logits[:, :v], masked[:, :v])
    return torch.log_softmax(masked, dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def describe(stats: ConstraintStats) -> str:
    return json.dumps(stats.as_dict(), sort_keys=True)
