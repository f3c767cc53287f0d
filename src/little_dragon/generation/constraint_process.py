"""The shared-prefix engine's constraint work in a process of its own (``constrained.PROCESS``).

Why: in a thread beside the model (``constrained.BACKGROUND``) the constraint's Python shares the model's GIL, and on
the H200 the forward pass took 35 -> 62 ms a step (results/constrained-decoding.md, session 22).  Here the constraints
(``ScriptConstraint``), their line grammars, masks and TVM workers live in a child process; the model's process only
sends each step's tokens and applies the masks.  The constraint is a function of each attempt's own tokens, so the
masks and scripts are the thread's (tests/generation/test_constraint_process.py runs both).

Protocol (one duplex ``multiprocessing`` pipe, spawn context; requests answered in order, one at a time):

- child -> parent once, at start: ``("ready", vocab_size)`` or ``("error", traceback)``.
- ``("start", prompts, n, defer_end, retries, knobs)`` -> ``(takes_back, bitmask)``: one engine call's constraints
  (``ConstrainedDecoding.attempt_processor`` in the child; its counts start from zero).  ``bitmask`` is the call's
  ``[attempts, ceil(V/32)]`` int32 tensor in shared memory (torch's sharing): the child writes masks into it, the parent
  reads the rows a ``masks`` answer names.  ``knobs``: the parent's ``constrained`` settings, applied first.
- ``("ahead", ids, tokens, final, lazy, threads)``, no answer: the tokens just sampled.  The child consumes them at once
  (while the parent's model computes) and, unless ``final`` or ``lazy`` (draw-then-check sampling), computes the next
  masks.  What it raises is answered to the next request.
- ``("marks", ids)`` -> ``(taken_back, at_line_start)`` (``AttemptLogitsProcessor.line_marks``; destructive, so asked,
  never pushed).
- ``("allows", ids, tokens, redraw)`` -> ``[bool]`` (``AttemptLogitsProcessor.allows``).
- ``("masks", ids)`` -> ``[row]``: the rows of ``bitmask`` holding the masks of ``ids`` (computed ahead, or now).
- ``("close",)`` -> ``None``: every end check settled.
- ``("results", texts, n)`` -> ``(pairs, counts)``: ``AttemptLogitsProcessor.results`` and the call's
  ``ConstraintStats`` as a dict (the parent adds it to its hook's).
- Answers are ``("ok", value)`` or ``("error", traceback)``; the parent raises the latter as ``ConstraintProcessError``.

The child ignores SIGINT (the parent owns the run) and ends when the pipe closes: the parent's exit, its
``close()``, or its death.  A child that dies mid-call fails that call with its exit code; the next call starts a
new child.
"""
from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.util
import time
import traceback
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a waiting parent checks that the child still lives


class ConstraintProcessError(RuntimeError):
    """The constraint process failed a request (its traceback in the message) or died."""


def _knobs() -> dict[str, Any]:
    """The parent's ``constrained`` settings the child must share (module-level upper-case flags and sizes)."""
    from little_dragon.generation import constrained

    return {k: v for k, v in vars(constrained).items()
            if k.isupper() and not k.startswith("_") and (v is None or isinstance(v, (bool, int, float, str)))}


def _serve(conn: Any, tokenizer: Any, semantic: bool, line_retries: int, finish_back: int,
           knobs: dict[str, Any]) -> None:
    """The child: one ``ConstrainedDecoding`` (thread mode, its own TVM workers) serving the parent's requests."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from little_dragon.generation import constrained

        for k, v in knobs.items():
            setattr(constrained, k, v)
        constrained.PROCESS = False
        hook = constrained.ConstrainedDecoding(tokenizer, semantic, line_retries, finish_back)
        vocab = hook.engine().vocab_size
        if semantic:  # TVM's import (~3 s on a CPU) before the first call, which parses the prompts' kernels
            import tvm.script  # noqa: F401
    except BaseException:  # noqa: BLE001 - told to the parent
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", vocab))
    proc: Any = None
    failed: str | None = None  # what an ``ahead`` raised, answered to the next request
    while True:
        try:
            op, *args = conn.recv()
        except (EOFError, OSError):
            return
        if op == "ahead":
            if failed is None and proc is not None:
                try:
                    ids, toks, final, lazy, threads = args
                    proc._threads = threads
                    if final or lazy:
                        proc._consume(ids, toks)
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
                prompts, n, defer_end, retries, knobs = args
                for k, v in knobs.items():
                    setattr(constrained, k, v)
                constrained.PROCESS = False
                hook.stats = constrained.ConstraintStats()
                proc = hook.attempt_processor(prompts, n, defer_end, retries)
                proc._t0 = None  # the parent times the cold start
                proc._bitmask.share_memory_()
                out: Any = (proc.takes_back, proc._bitmask)
            elif op == "marks":
                out = proc.line_marks_ids(args[0])
            elif op == "allows":
                out = proc.allows_ids(*args)
            elif op == "masks":
                ids = args[0]
                if not all(a in proc._rows for a in ids):
                    proc._fill(ids)
                out, proc._rows = [proc._rows[a] for a in ids], {}
            elif op == "close":
                out = proc.close() if proc is not None else None
            elif op == "results":
                import dataclasses

                out = (proc.results(*args), dataclasses.asdict(hook.stats))
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException:  # noqa: BLE001 - answered; the child serves on
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("ok", out))


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
    """The child process of one ``ConstrainedDecoding`` (``PROCESS``), started at once (its imports, tokenizer
    engine and TVM workers overlap the caller's model load) and replaced when it dies."""

    def __init__(self, tokenizer: Any, semantic: bool = True, line_retries: int = 0, finish_back: int = 0):
        self._args = (tokenizer, semantic, line_retries, finish_back)
        self.vocab_size: int | None = None
        self.started = 0
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe(duplex=True)
        # not a daemon: it starts TVM's worker processes; it ends when the pipe closes
        self.child = ctx.Process(target=_serve, args=(child_conn, *self._args, _knobs()), name="constraint-process")
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
            pass  # a dead child: the next request says so, with its exit code

    def request(self, message: tuple) -> Any:
        """``message``'s answer; a failed request raises ``ConstraintProcessError`` with the child's traceback."""
        self.send(message)
        kind, value = self._receive(f"answering {message[0]!r}")
        if kind != "ok":
            raise ConstraintProcessError(f"the constraint process failed {message[0]!r}:\n{value}")
        return value

    def attempts(self, prompts: list[str], n: int, defer_end: bool, retries: bool, stats: Any) -> "ProcessAttempts":
        """One engine call's processor (``ConstrainedDecoding.attempt_processor``); a dead child is replaced first."""
        if not self.child.is_alive():
            log.warning("constraint process (pid %s) had ended with exit code %s; starting a new one",
                        self.child.pid, self.child.exitcode)
            self._finalizer()
            self._start()
        t0 = time.perf_counter()
        self.wait_ready()
        takes_back, bitmask = self.request(("start", prompts, n, defer_end, retries, _knobs()))
        stats.rpc_s += time.perf_counter() - t0
        return ProcessAttempts(self, takes_back, bitmask, stats, t0)

    def close(self) -> None:
        self._finalizer()


class ProcessAttempts:
    """``AttemptLogitsProcessor``'s interface to the shared-prefix engine, its work done in the constraint process."""

    def __init__(self, process: ConstraintProcess, takes_back: bool, bitmask: Any, stats: Any, t0: float):
        self.process, self.takes_back, self._bitmask, self.stats = process, takes_back, bitmask, stats
        self._t0: float | None = t0  # the call's start: its first masks time the cold start
        self._counted = False

    def _request(self, message: tuple) -> Any:
        t = time.perf_counter()
        try:
            return self.process.request(message)
        finally:
            self.stats.rpc_s += time.perf_counter() - t

    def _first(self) -> None:
        if self._t0 is not None:
            self.stats.first_mask_s += time.perf_counter() - self._t0
            self._t0 = None

    def ahead(self, attempts: Any, tokens: Any, final: bool = False) -> None:
        from little_dragon.generation.constrained import _compile_threads, _sample_first

        dev = tokens.device
        self.process.send(("ahead", attempts.tolist(), tokens.tolist(), final, _sample_first(dev),
                           _compile_threads(dev)))

    def line_marks(self, attempts: Any) -> tuple[list[int], list[bool]]:
        return self._request(("marks", attempts.tolist()))

    def sample_first(self, device: Any) -> bool:
        from little_dragon.generation.constrained import _sample_first

        return _sample_first(device)

    def allows(self, attempts: Any, tokens: Any, redraw: bool = False) -> list[bool]:
        out = self._request(("allows", attempts.tolist(), tokens.tolist(), redraw))
        self._first()
        return out

    def __call__(self, attempts: Any, input_ids: Any, scores: Any) -> Any:
        from little_dragon.generation.constrained import apply_bitmask

        t = time.perf_counter()
        rows = self._request(("masks", attempts.tolist()))
        self.stats.wait_s += time.perf_counter() - t
        self._first()
        apply_bitmask(scores, self._bitmask[rows])
        return scores

    def close(self) -> None:
        self._request(("close",))

    def results(self, texts: list[list[str]], n: int) -> list[list[tuple[str, bool]]]:
        pairs, counts = self._request(("results", texts, n))
        if not self._counted:
            self._counted = True
            self.stats.add(counts)
        return pairs
