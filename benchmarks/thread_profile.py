"""Where every thread of a Python program spends its time: a sampling profiler that needs nothing installed.

Runs a Python script (its own arguments after ``--``) with a thread that, every ``--interval`` seconds, reads every
other thread's stack (``sys._current_frames``) and counts, per thread name, the innermost frame (``self``) and every
function on the stack (``cum``, once per sample).  Made for the H200, which has no py-spy: the constrained decoding
step runs in three kinds of threads at once (the model's forward pass, the constraint's line work, llguidance's
compile threads) and cProfile sees only the thread it runs in.  The sampling itself costs time (session 22: the
profiled arm ran at 165 sampled tokens/s against 223 unprofiled); compare shares within one run, not times across runs.

    python benchmarks/thread_profile.py --out prof.json -- benchmarks/constrained_bench.py --ab ...
    python benchmarks/thread_profile.py --report prof.json [--thread line-work] [--top 25]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path


def _thread_name(name: str) -> str:
    """A pool's threads under one name (``line-grammar_3`` -> ``line-grammar``; ``Thread-7 (task...`` kept)."""
    return name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name


class Sampler:
    """Counts stacks of every thread but its own until ``stop()``."""

    def __init__(self, interval: float):
        self.interval = interval
        self.samples: collections.Counter = collections.Counter()
        self.self_counts: collections.Counter = collections.Counter()
        self.cum_counts: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-profile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: _thread_name(t.name) for t in threading.enumerate()}
            for tid, frame in sys._current_frames().items():
                if tid == me:
                    continue
                who = names.get(tid, "?")
                self.samples[who] += 1
                seen: set[str] = set()
                f, innermost = frame, True
                while f is not None:
                    where = f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}"
                    if innermost:
                        self.self_counts[(who, f"{where}:{f.f_lineno}")] += 1
                        innermost = False
                    if where not in seen:
                        self.cum_counts[(who, where)] += 1
                        seen.add(where)
                    f = f.f_back

    def result(self) -> dict:
        return {"interval_s": self.interval, "samples": dict(self.samples),
                "self": [[t, k, n] for (t, k), n in self.self_counts.most_common(300)],
                "cum": [[t, k, n] for (t, k), n in self.cum_counts.most_common(1500)]}


def report(path: str, thread: str | None, top: int) -> None:
    """Per thread: its samples, and its functions by share of them (cumulative, then innermost frames)."""
    prof = json.loads(Path(path).read_text())
    threads = [thread] if thread else sorted(prof["samples"], key=lambda t: -prof["samples"][t])
    for t in threads:
        n = prof["samples"].get(t, 0)
        cum = [(k, c) for who, k, c in prof["cum"] if who == t]
        if not n or not cum:
            continue
        print(f"\n## {t}: {n} samples\n\n| function (on the stack) | share |\n|---|---:|")
        for k, c in cum[:top]:
            print(f"| {k} | {c / n:.1%} |")
        inner = [(k, c) for who, k, c in prof["self"] if who == t][:top // 2]
        print("\n| innermost frame | share |\n|---|---:|")
        for k, c in inner:
            print(f"| {k} | {c / n:.1%} |")


def main(args: argparse.Namespace) -> None:
    if args.report:
        report(args.report, args.thread, args.top)
        return
    if not args.script:
        raise SystemExit("thread_profile.py: give --report FILE, or a script to run after --")
    script, *script_args = [a for a in args.script if a != "--"]
    sampler = Sampler(args.interval)
    sys.argv = [script, *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    t0 = time.perf_counter()
    sampler.start()
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sampler.stop()
        from little_dragon import atomic

        out = {"script": [script, *script_args], "wall_s": time.perf_counter() - t0, **sampler.result()}
        atomic.write_json(args.out, out, indent=None, sort_keys=False)
        print(f"thread_profile: {sum(sampler.samples.values())} samples of {len(sampler.samples)} threads -> {args.out}",
              file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="thread_profile.json", help="where the counts go (JSON)")
    ap.add_argument("--interval", type=float, default=0.002, help="seconds between samples")
    ap.add_argument("--report", help="print the tables of an earlier --out instead of running anything")
    ap.add_argument("--thread", help="--report: only this thread (e.g. MainThread, line-work, line-grammar)")
    ap.add_argument("--top", type=int, default=25, help="--report: rows per table")
    ap.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]: the Python script to profile")
    return ap


if __name__ == "__main__":
    main(parser().parse_args())
