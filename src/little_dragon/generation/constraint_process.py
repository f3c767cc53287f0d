"""The shared-prefix engine's constraint work in processes of its own (``constrained.PROCESSES``).

Why: in a thread beside the model (``constrained.BACKGROUND``) the constraint's Python shares the model's GIL, and on
the H200 the forward pass took 35 -> 62 ms a step (results/constrained-decoding.md, session 22).  Here the constraints
(``ScriptConstraint``), their line grammars, masks and TVM workers live in child processes, the call's attempts dealt
out among them (a prompt's in groups: ``ProcessAttempts``); the model's process only sends each step's tokens and applies the masks.  The
constraint is a function of each attempt's own tokens, so the masks and scripts are the thread's
(tests/generation/test_constrained_shared_prefix.py runs both).

Protocol: one duplex ``multiprocessing`` pipe per child (spawn context), requests answered in order, one at a time;
each child holds its share of the call's attempts (each group of a prompt's attempts a prompt of its own there), and
the ids below are its own:

- child -> parent once, at start: ``("ready", vocab_size)`` or ``("error", traceback)``.
- ``("start", prompts, n, defer_end, retries, end_wait, lazy, knobs)`` -> ``(takes_back, bitmask)``: one engine call's constraints
  (``ConstrainedDecoding.attempt_processor`` in the child; its counts start from zero).  ``bitmask`` is the call's
  ``[attempts, ceil(V/32)]`` int32 tensor in shared memory (torch's sharing): the child writes masks into it, the parent
  reads the rows a ``masks`` answer names.  ``knobs``: the parent's ``constrained`` settings, applied first.
- ``("ahead", ids, tokens, final, checked, threads)``, no answer: the tokens just sampled.  The child consumes them at
  once (while the parent's model computes) and, unless ``final`` or ``checked`` (draw-then-check sampling), computes the next
  masks.  What it raises is answered to the next request.
- ``("marks", ids, masks)`` -> ``(taken_back, at_line_start, rows)`` (``AttemptLogitsProcessor.line_marks``; destructive,
  so asked, never pushed); ``masks``: ``rows`` are also the answer to ``("masks", ids)`` (the engine masks the same
  attempts right after their marks: one request a step instead of two), else None.
- ``("allows", ids, tokens, redraw)`` -> ``[bool]`` (``AttemptLogitsProcessor.allows``).
- ``("masks", ids)`` -> ``[row]``: the rows of ``bitmask`` holding the masks of ``ids`` (computed ahead, or now).
- ``("close",)`` -> ``None``: every end check settled.
- ``("threads",)`` -> ``{"compile", "torch", "tvm", "nice", "cores", "tensor_intrinsics"[, "worker_cores"]}``: the child's
  thread pools (``limit_threads``: its share of the host's cores, ``process_cores``), niceness
  (``constrained.PROCESS_NICE``), the cores it may run on (``constrained.PROCESS_KEEP_CORES``) and its TVM worker's.
- ``("results", texts, n)`` -> ``(pairs, counts)``: ``AttemptLogitsProcessor.results`` and the call's
  ``ConstraintStats`` as a dict (the parent adds it to its hook's).
- Answers are ``("ok", value)`` or ``("error", traceback)``; the parent raises the latter as ``ConstraintProcessError``.

The child ignores SIGINT (the parent owns the run) and ends when the pipe closes: the parent's exit, its
``close()``, or its death.  A child that dies mid-call fails that call with its exit code; the next call starts a
new child.
"""
from __future__ import annotations

import logging
import math
import multiprocessing
import multiprocessing.util
import time
import traceback
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a waiting parent checks that the child still lives
# a masked step's masks come in the answers to its marks (one request a step to each process); False: asked apart after
# them (before session 35, and the bench's +masksapart)
MASKS_WITH_MARKS = True


class ConstraintProcessError(RuntimeError):
    """The constraint process failed a request (its traceback in the message) or died."""


def _knobs() -> dict[str, Any]:
    """The parent's ``constrained`` settings the child must share (module-level upper-case flags and sizes), and the
    TVM worker's rule switches (``schedule_worker._rules``) under ``schedule_worker.<NAME>``."""
    from little_dragon.generation import constrained, schedule_worker

    # not WORKERS: a child's compile threads are its share of the cores (``limit_threads``), not the parent's
    return {**{k: v for k, v in vars(constrained).items() if k.isupper() and not k.startswith("_") and k != "WORKERS"
               and (v is None or isinstance(v, (bool, int, float, str)))},
            **{f"schedule_worker.{k}": v for k, v in schedule_worker._rules().items()}}


def _apply_knobs(knobs: dict[str, Any]) -> None:
    """``_knobs()`` of the parent set here (the child)."""
    from little_dragon.generation import constrained, schedule_worker

    for k, v in knobs.items():
        owner, _, name = k.rpartition(".")
        setattr(schedule_worker if owner == "schedule_worker" else constrained, name, v)


# ``generation.constrained_processes: -1``: this many beside a model on an accelerator, on a host with at least
# AUTO_MIN_CPUS cores.  Session 30's H100 (16 cores), the same 128 attempts: 68.4 ms a step with four processes, 96.8
# with the thread (free: 48.2); one process was no faster than the thread (session 28), and on a CPU the model needs
# the cores itself.
AUTO_PROCESSES = 4
AUTO_MIN_CPUS = 16


def auto_processes(device: Any, cpus: int | None = None) -> int:
    """Constraint processes for a model on ``device`` (a torch device) on a host of ``cpus`` cores (this one's)."""
    import os

    cpus = cpus or os.cpu_count() or 1
    return AUTO_PROCESSES if getattr(device, "type", "cpu") != "cpu" and cpus >= AUTO_MIN_CPUS else 0


def process_cores(processes: int, cpus: int | None = None) -> int:
    """Cores a constraint process may keep busy: the host's, shared by the ``processes`` children and the model's
    process (its decoding loop), at least one."""
    import os

    return max(1, (cpus or os.cpu_count() or 1) // (processes + 1))


def child_cores(keep: int, allowed: set[int] | None = None) -> set[int] | None:
    """[keep cores] The cores a constraint process may run on: ``allowed`` (this process's, ``os.sched_getaffinity``)
    but the first ``keep`` (the model's loop's); None where that leaves none, or ``keep`` is 0 (every core)."""
    from little_dragon.generation.schedule_worker import own_cores

    cores = sorted(allowed) if allowed is not None else own_cores() if keep > 0 else None
    return set(cores[keep:]) if cores is not None and 0 < keep < len(cores) else None


def limit_threads(cores: int) -> None:
    """This process's thread pools sized to ``cores``: the line-grammar compiles (``constrained.WORKERS``) and torch's
    intra-op pool one thread (a child's torch work is small tensor ops on masks, whose OpenMP threads would otherwise
    spin on every core beside the other children's); the TVM workers it starts inherit one thread each."""
    import os

    import torch

    from little_dragon.generation import constrained

    constrained.WORKERS = cores
    torch.set_num_threads(1)
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = "1"


class _StepProfile:
    """[process profile] The child's steps under cProfile (``constrained.PROFILE_PROCESSES``; the bench's +procprofile):
    a step is the child's work from its first request after a step's ``marks`` (the ``ahead`` of the tokens sampled:
    lines consumed, states asked, grammars compiled, masks) up to the answer of the next ``marks``, without its waits
    for the parent's requests.  Steps of ``slow_ms`` (``constrained.PROFILE_SLOW_MS``) or more are summed apart from the
    rest, so the listing says what the few long waits of the decoding loop (session 36: 12 steps of >= 100 ms, 7.3 s
    of its 12.5 s of waiting) are made of.  Only the child's main thread is profiled: work in its compile threads and
    TVM workers shows as the waits for them (``Future.result``, the pipe's poll).  Its times are inflated: not an arm to
    compare."""

    LINES = 40
    SLOWEST = 12

    def __init__(self, slow_ms: float) -> None:
        import collections
        import pstats  # noqa: F401 - imported here, not inside a profiled step

        from little_dragon.generation import schedule_worker

        self._applied = collections.Counter(schedule_worker.APPLIED)  # the TVM worker's line work from here
        self.slow_ms = slow_ms
        self._prof: Any = None
        self._t: float | None = None  # when the current request's work began (None: between requests)
        self._busy = 0.0
        self._ops: list[str] = []
        self.stats: dict[str, Any] = {"slow": None, "fast": None}  # pstats.Stats of each kind of step
        self.steps = {"slow": 0, "fast": 0}
        self.seconds = {"slow": 0.0, "fast": 0.0}
        self.slowest: list[tuple[float, str]] = []

    def begin(self, op: str) -> None:
        """A request of the step arrived: its work is profiled until ``pause``."""
        import cProfile

        if self._prof is None:
            self._prof, self._busy, self._ops = cProfile.Profile(), 0.0, []
        self._ops.append(op)
        self._t = time.perf_counter()
        self._prof.enable()

    def pause(self) -> None:
        """The request is answered: the child waits for the next one (not the step's work)."""
        if self._prof is not None and self._t is not None:
            self._prof.disable()
            self._busy += time.perf_counter() - self._t
            self._t = None

    def end(self, what: str) -> None:
        """The step's ``marks`` are computed (``what``: its attempts and line starts)."""
        if self._prof is None:
            return
        import pstats

        self.pause()
        ms = 1e3 * self._busy
        kind = "slow" if ms >= self.slow_ms else "fast"
        if self.stats[kind] is None:
            self.stats[kind] = pstats.Stats(self._prof)
        else:
            self.stats[kind].add(self._prof)
        self.steps[kind] += 1
        self.seconds[kind] += self._busy
        if kind == "slow":
            self.slowest = sorted(self.slowest + [(ms, f"{'+'.join(self._ops)} {what}")], reverse=True)[:self.SLOWEST]
        self._prof = None

    def text(self) -> str:
        import collections
        import io

        from little_dragon.generation import schedule_worker

        buf = io.StringIO()
        work = collections.Counter(schedule_worker.APPLIED) - self._applied
        buf.write(f"=== the TVM worker's lines: {work['extended']} extended, {work['replayed']} replayed; by keyword "
                  "(ms, lines):\n")
        for key, ms in sorted(((k[3:], v) for k, v in work.items() if k.startswith("ms ")), key=lambda kv: -kv[1]):
            buf.write(f"  {ms:10.1f} ms  {work['n ' + key]:6d}  {key}\n")
        for kind in ("slow", "fast"):
            buf.write(f"=== {kind} steps (>= {self.slow_ms:g} ms: slow): {self.steps[kind]}, "
                      f"{self.seconds[kind]:.2f} s\n")
            if kind == "slow":
                for ms, what in self.slowest:
                    buf.write(f"  {ms:8.1f} ms  {what}\n")
            stats = self.stats[kind]
            if stats is not None:
                stats.stream = buf
                stats.sort_stats("cumulative").print_stats(self.LINES)
        return buf.getvalue()


def _serve(conn: Any, tokenizer: Any, semantic: bool, line_retries: int, finish_back: int,
           knobs: dict[str, Any], cores: int | None = None, tensor_intrinsics: bool = False) -> None:
    """The child: one ``ConstrainedDecoding`` (thread mode, its own TVM workers) serving the parent's requests."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from little_dragon.generation import constrained

        _apply_knobs(knobs)
        constrained.PROCESSES = 0
        import os

        if constrained.PROCESS_NICE:
            os.nice(constrained.PROCESS_NICE)
        keep = child_cores(constrained.PROCESS_KEEP_CORES)
        if keep is not None:  # before its TVM workers start: they inherit it
            os.sched_setaffinity(0, keep)
        if cores is not None:
            limit_threads(cores)
        hook = constrained.ConstrainedDecoding(tokenizer, semantic, line_retries, finish_back, processes=0,
                                               tensor_intrinsics=tensor_intrinsics)
        vocab = hook.engine().vocab_size
        if semantic:  # TVM's import (~3 s on a CPU) before the first call, which parses the prompts' kernels
            import tvm.script  # noqa: F401
        if semantic and tensor_intrinsics:  # [intrinsics at start]: ready means the workers hold them
            from little_dragon.generation.schedule_worker import worker

            for role in constrained.worker_roles():
                worker(role).warm(tensor_intrinsics=True)
    except BaseException:  # noqa: BLE001 - told to the parent
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", vocab))
    proc: Any = None
    failed: str | None = None  # what an ``ahead`` raised, answered to the next request
    profile: _StepProfile | None = None
    while True:
        if profile is not None:
            profile.pause()
        try:
            op, *args = conn.recv()
        except (EOFError, OSError):
            _exit_child()
        if profile is not None and op in ("ahead", "marks", "masks", "allows"):
            profile.begin(op)
        if op == "ahead":
            if failed is None and proc is not None:
                try:
                    ids, toks, final, checked, threads = args
                    proc._threads = threads
                    if final or checked:
                        proc._consume(ids, toks, final=final)
                    else:
                        proc._next_masks(ids, toks)
                except BaseException:  # noqa: BLE001
                    failed = traceback.format_exc()
            continue
        if failed is not None:
            conn.send(("error", failed))
            failed = None
            continue
        try:
            if op == "start":
                prompts, n, defer_end, retries, end_wait, lazy, knobs = args
                _apply_knobs(knobs)
                constrained.PROCESSES = 0
                hook.stats = constrained.ConstraintStats()
                proc = hook.attempt_processor(prompts, n, defer_end, retries, end_wait, lazy)
                profile = _StepProfile(constrained.PROFILE_SLOW_MS) if constrained.PROFILE_PROCESSES else None
                proc._t0 = None  # the parent times the cold start
                proc._bitmask.share_memory_()
                out: Any = (proc.takes_back, proc._bitmask)
            elif op == "marks":
                ids, masks = args
                drops, starts = proc.line_marks_ids(ids)
                out = (drops, starts, _mask_rows(proc, ids) if masks else None)
                if profile is not None:
                    profile.end(f"{len(ids)} attempts, {sum(starts)} line starts")
            elif op == "allows":
                out = proc.allows_ids(*args)
            elif op == "masks":
                out = _mask_rows(proc, args[0])
            elif op == "threads":
                import os

                import torch

                from little_dragon.generation.schedule_worker import own_cores, worker

                out = {"compile": constrained._workers(), "torch": torch.get_num_threads(),
                       "tvm": os.environ.get("TVM_NUM_THREADS"), "nice": os.nice(0),
                       "cores": own_cores(),
                       "tensor_intrinsics": worker("lines").warm() if semantic else False}
                if semantic:  # its TVM worker's cores (inherited)
                    out["worker_cores"] = worker("lines").cores()
            elif op == "close":
                out = proc.close() if proc is not None else None
            elif op == "results":
                import dataclasses

                if profile is not None:
                    hook.stats.process_profiles.append(profile.text())
                out = (proc.results(*args), dataclasses.asdict(hook.stats))
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException:  # noqa: BLE001 - answered; the child serves on
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("ok", out))


def _mask_rows(proc: Any, ids: list[int]) -> list[int]:
    """The rows of the shared bitmask holding the masks of attempts ``ids`` (computed ahead, or now)."""
    if not all(a in proc._rows for a in ids):
        proc._fill(ids)
    out, proc._rows = [proc._rows[a] for a in ids], {}
    return out


def _exit_child() -> None:
    """The child's end once its pipe closed: its TVM workers stopped, then the process ends at once.  Returning
    instead left it waiting in the interpreter's exit until ``_stop`` killed it 30 s later (session 30's H100 A/B: four
    children, 2 minutes after the last engine call; found by ``test_the_constraint_processes_sample_what_the_thread_
    samples``, which checks the exit code); nothing of its state outlives the call that used it."""
    import os

    from little_dragon.generation import schedule_worker

    for w in list(schedule_worker._WORKERS.values()):
        try:
            w.close()
        except Exception:  # noqa: BLE001 - a worker already gone
            pass
    os._exit(0)


def _stop(child: Any, conn: Any) -> None:
    """Close the pipe (the child's cue to exit) and wait for the child; kill it if it does not go."""
    try:
        conn.close()
    except OSError:
        pass
    child.join(30)
    if child.is_alive():
        child.kill()
        child.join(5)


class ConstraintProcess:
    """One child process of a ``ConstrainedDecoding`` (``PROCESSES``), started at once (its imports, tokenizer
    engine and TVM workers overlap the caller's model load) and replaced when it dies."""

    def __init__(self, tokenizer: Any, semantic: bool = True, line_retries: int = 0, finish_back: int = 0,
                 cores: int | None = None, tensor_intrinsics: bool = False):
        self._args = (tokenizer, semantic, line_retries, finish_back)
        self._cores = cores  # its share of the host's cores (``process_cores``); None: its pools as a lone process's
        self._intrinsics = tensor_intrinsics  # its TVM workers register the tensor-core intrinsics before it is ready
        self.vocab_size: int | None = None
        self.started = 0
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe(duplex=True)
        # not a daemon: it starts TVM's worker processes; it ends when the pipe closes
        self.child = ctx.Process(target=_serve, args=(child_conn, *self._args, _knobs(), self._cores, self._intrinsics),
                                 name="constraint-process")
        self.child.start()
        child_conn.close()
        self.vocab_size = None
        self.started += 1
        self._finalizer = multiprocessing.util.Finalize(self, _stop, args=(self.child, self.conn), exitpriority=10)

    def wait_ready(self) -> int:
        """The child's tokenizer vocabulary size, once it has started (its first message)."""
        if self.vocab_size is None:
            kind, value = self._receive("starting")
            if kind != "ready":
                raise ConstraintProcessError(f"the constraint process failed to start:\n{value}")
            self.vocab_size = value
        return self.vocab_size

    def _receive(self, what: str) -> tuple[str, Any]:
        while not self.conn.poll(POLL_S):
            if not self.child.is_alive():
                break
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.child.join(5)
            raise ConstraintProcessError(
                f"the constraint process (pid {self.child.pid}) ended with exit code {self.child.exitcode} while "
                f"{what}; this call's attempts are lost, the next call starts a new process") from None

    def send(self, message: tuple) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            pass  # a dead child: the next answer says so, with its exit code

    def answer(self, what: str) -> Any:
        """The answer to the request ``what`` sent last; a failure raises ``ConstraintProcessError`` with the child's
        traceback."""
        kind, value = self._receive(f"answering {what!r}")
        if kind != "ok":
            raise ConstraintProcessError(f"the constraint process failed {what!r}:\n{value}")
        return value

    def request(self, message: tuple) -> Any:
        self.send(message)
        return self.answer(message[0])

    def ensure(self) -> None:
        """A dead child replaced (at an engine call's start)."""
        if not self.child.is_alive():
            log.warning("constraint process (pid %s) had ended with exit code %s; starting a new one",
                        self.child.pid, self.child.exitcode)
            self._finalizer()
            self._start()

    def close(self) -> None:
        self._finalizer()


def _answers(processes: list[ConstraintProcess], what: str) -> list:
    """Every process's answer to the request ``what`` each was sent, in order.  All are read before the first failure
    is raised: an answer left unread would be taken for the answer to that process's next request."""
    out, failed = [], None
    for proc in processes:
        try:
            out.append(proc.answer(what))
        except ConstraintProcessError as e:
            out.append(None)
            failed = failed or e
    if failed is not None:
        raise failed
    return out


class ProcessAttempts:
    """``AttemptLogitsProcessor``'s interface to the shared-prefix engine, its work done in the constraint processes.

    With several processes (``constrained.PROCESSES``) the call's attempts are dealt out in groups: a prompt's ``n``
    attempts form ``g = gcd(n, N)`` groups of ``n // g`` (``constrained.SPREAD_ATTEMPTS``; else ``g = 1``: the prompt's
    attempts together), and group ``q = p * g + i`` (prompt ``p``'s i-th) goes to process ``q % N`` as a prompt of
    its own with ``n // g`` attempts (the attempts of a group share schedule states and line grammars there).  Each
    step's requests go to every process holding an attempt of the step, all sent before any answer is read, so the
    processes work side by side.  Attempt ``p * n + j`` is attempt ``(q // N) * (n // g) + j % (n // g)`` of its
    process, ``q = p * g + j // (n // g)``."""

    def __init__(self, processes: list[ConstraintProcess], prompts: list[str], n: int, defer_end: bool,
                 retries: bool, stats: Any, end_wait: int = 0, lazy: bool = False):
        from little_dragon.generation import constrained

        t0 = time.perf_counter()
        self.processes, self.n, self.stats = processes, n, stats
        self._t0: float | None = t0  # the call's start: its first masks time the cold start
        self._counted = False
        self._rows: dict[int, tuple[int, int]] = {}  # attempt id -> (process, bitmask row), come with the last marks
        k = len(processes)
        self.groups = math.gcd(n, k) if constrained.SPREAD_ATTEMPTS else 1  # a prompt's groups of attempts
        self.per = n // self.groups                                          # attempts a group
        groups = [p for p in prompts for _ in range(self.groups)]            # group q is prompt q // groups's
        for proc in processes:
            proc.ensure()
        self._live = [i for i in range(k) if groups[i::k]]
        for i in self._live:
            processes[i].wait_ready()
            processes[i].send(("start", groups[i::k], self.per, defer_end, retries, end_wait, lazy, _knobs()))
        answers = _answers([processes[i] for i in self._live], "start")
        self.takes_back = any(takes for takes, _ in answers)
        self._bitmask = {i: bits for i, (_, bits) in zip(self._live, answers)}
        stats.rpc_s += time.perf_counter() - t0

    def _split(self, ids: list[int], *columns: list) -> dict[int, tuple[list[int], list[int], list[list]]]:
        """Process -> (positions in ``ids``, its local ids, those positions' entries of each of ``columns``)."""
        k, n, per = len(self.processes), self.n, self.per
        out: dict[int, tuple[list[int], list[int], list[list]]] = {}
        for pos, a in enumerate(ids):
            p, j = divmod(a, n)
            q = p * self.groups + j // per          # the attempt's group
            where, local, cols = out.setdefault(q % k, ([], [], [[] for _ in columns]))
            where.append(pos)
            local.append((q // k) * per + j % per)
            for c, col in zip(cols, columns):
                c.append(col[pos])
        return out

    def _ask(self, op: str, ids: list[int], *columns: list, extra: tuple = ()) -> list:
        """``op``'s answer for each of ``ids`` (with its entries of ``columns``), in their order, from the processes
        holding them, asked side by side (``masks``: (process, row) pairs)."""
        t = time.perf_counter()
        parts = self._split(ids, *columns)
        try:
            for i, (_, local, cols) in parts.items():
                self.processes[i].send((op, local, *cols, *extra))
            out: list = [None] * len(ids)
            for (i, (where, _, _)), got in zip(parts.items(), _answers([self.processes[i] for i in parts], op)):
                if op == "marks":  # (drops, starts, rows or None) -> per attempt (drop, start, (process, row) or None)
                    drops, starts, rows = got
                    got = list(zip(drops, starts, [(i, r) for r in rows] if rows is not None else [None] * len(drops)))
                for pos, value in zip(where, got):
                    out[pos] = (i, value) if op == "masks" else value
            return out
        finally:
            self.stats.rpc_s += time.perf_counter() - t

    def _first(self) -> None:
        if self._t0 is not None:
            self.stats.first_mask_s += time.perf_counter() - self._t0
            self._t0 = None

    def ahead(self, attempts: Any, tokens: Any, final: bool = False) -> None:
        from little_dragon.generation.constrained import _compile_threads, _sample_first

        t = time.perf_counter()
        dev = tokens.device
        flags = (final, _sample_first(dev), _compile_threads(dev))
        for i, (_, local, (toks,)) in self._split(attempts.tolist(), tokens.tolist()).items():
            self.processes[i].send(("ahead", local, toks, *flags))
        self.stats.send_s += time.perf_counter() - t

    def line_marks(self, attempts: Any) -> tuple[list[int], list[bool]]:
        """The marks of ``attempts``; unless draws are checked first, their masks come in the same answers (the engine
        masks these attempts next: ``__call__``), so a step waits on its processes once."""
        from little_dragon.generation.constrained import _sample_first

        t = time.perf_counter()
        ids = attempts.tolist()
        masks = MASKS_WITH_MARKS and not _sample_first(attempts.device)
        marks = self._ask("marks", ids, extra=(masks,))
        self._rows = {a: m[2] for a, m in zip(ids, marks)} if masks else {}
        waited = time.perf_counter() - t
        self.stats.marks_s += waited
        starts = [m[1] for m in marks]
        self.stats.add_marks_wait(waited, sum(starts))
        return [m[0] for m in marks], starts

    def sample_first(self, device: Any) -> bool:
        from little_dragon.generation.constrained import _sample_first

        return _sample_first(device)

    def allows(self, attempts: Any, tokens: Any, redraw: bool = False) -> list[bool]:
        out = self._ask("allows", attempts.tolist(), tokens.tolist(), extra=(redraw,))
        self._first()
        return out

    def __call__(self, attempts: Any, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        from little_dragon.generation.constrained import apply_bitmask

        t = time.perf_counter()
        ids = attempts.tolist()
        came, self._rows = self._rows, {}
        if came and all(a in came for a in ids):  # with the step's marks
            rows = [came[a] for a in ids]
        else:
            rows = self._ask("masks", ids)
            self.stats.mask_requests += 1
        t1 = time.perf_counter()
        self.stats.wait_s += t1 - t
        self._first()
        # the rows gathered with numpy, one gather per process: torch's CPU ops here would wake its intra-op threads,
        # which spin on the cores the processes work on
        if len(self._bitmask) == 1:
            (only,) = self._bitmask.values()
            bits = only.numpy()[[r for _, r in rows]]
        else:
            by: dict[int, tuple[list[int], list[int]]] = {}
            for pos, (i, r) in enumerate(rows):
                where, local = by.setdefault(i, ([], []))
                where.append(pos)
                local.append(r)
            got = np.concatenate([self._bitmask[i].numpy()[local] for i, (_, local) in by.items()])
            bits = np.empty_like(got)
            bits[[pos for where, _ in by.values() for pos in where]] = got
        apply_bitmask(scores, torch.from_numpy(bits))
        self.stats.apply_s += time.perf_counter() - t1
        return scores

    def close(self) -> None:
        t = time.perf_counter()
        try:
            for i in self._live:
                self.processes[i].send(("close",))
            _answers([self.processes[i] for i in self._live], "close")
        finally:
            self.stats.rpc_s += time.perf_counter() - t

    def results(self, texts: list[list[str]], n: int) -> list[list[tuple[str, bool]]]:
        k, g = len(self.processes), self.groups
        per = n // g
        # a prompt's texts by group (one group: as they are, k texts of one constraint when greedy, ``n`` 1)
        by_group = [attempts[i * per:(i + 1) * per] for attempts in texts for i in range(g)] if g > 1 else list(texts)
        for i in self._live:
            self.processes[i].send(("results", by_group[i::k], per))
        got: list = [None] * len(by_group)
        for i, (pairs, counts) in zip(self._live, _answers([self.processes[i] for i in self._live], "results")):
            got[i::k] = pairs
            if not self._counted:
                self.stats.add(counts)
        self._counted = True
        return [[pair for q in range(p * g, (p + 1) * g) for pair in got[q]] for p in range(len(texts))]
