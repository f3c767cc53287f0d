"""Constrained decoding, measured (results/constrained-decoding.md).

Two measurements, each prints a table and writes JSON:

``--harvest DB_DIRS...``: every record of real MetaSchedule databases (``dragon harvest`` output or a
``db/`` folder) is fed token by token through the constraint (workload semantics on) in the form the model
writes (``post *``).  Acceptance must be 100%: the constraint may never forbid a real trace.  Also reports
the cost per token (mask) and per line (prefix apply + line grammar compile).

``--ab --model DIR --rows validation.jsonl``: A/B at equal attempts, free vs constrained sampling from the
same model on the same prompts and seed: decode rate, apply (valid) rate, correctness and speedup through
the Evaluator (``--evaluate``; llvm rows on a CPU, CUDA rows on a GPU), generated tokens per second and the
slowdown.  The constrained arm's first pass is the equal-attempt comparison; its rejected attempts are then
resampled (counted) and reported apart.

    python benchmarks/constrained_bench.py --harvest data/harvest/cuda-sm_90-6e5dd8 --tokenizer gguf
    python benchmarks/constrained_bench.py --ab --model artifacts/sft/model \\
        --rows artifacts/datasets/validation.jsonl --prompts 16 --k 4 --evaluate --out results/x.json
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

log = logging.getLogger("constrained_bench")


def load_tokenizer(spec: str) -> Any:
    """``gguf``: SmolLM2-135M's (the cached conversion the datasets stage uses); else a HF folder."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if spec == "gguf":
        from little_dragon.datasets.config import TokenizerSpec
        from little_dragon.datasets.tokens import load_counter

        return PreTrainedTokenizerFast(tokenizer_object=load_counter(TokenizerSpec()).tokenizer,
                                       eos_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    return AutoTokenizer.from_pretrained(spec)


def _db_dirs(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if (p / "database_workload.json").is_file():
            out.append(p)
        else:
            out += sorted(d.parent for d in p.glob("**/database_workload.json"))
    return out


def first_forbidden(c: Any, ids: list[int], bits: Any, tok: Any) -> str:
    """Feed ``ids`` to the constraint ``c`` token by token, each checked against the mask the sampler would
    apply (``bits``: a one-row bitmask); where the first forbidden token is, or "" when all were allowed."""
    for i, t in enumerate(ids):
        c.fill_mask(bits, 0)
        if not (int(bits[0, t // 32]) >> (t % 32)) & 1:
            return f"token {i} {tok.decode([t])!r} after {tok.decode(ids[:i])[-100:]!r} {c.error}"
        c.advance(t)
    return ""


def bench_harvest(args: argparse.Namespace) -> dict[str, Any]:
    from little_dragon.codec import encode
    from little_dragon.codec.roundtrip import read_database
    from little_dragon.generation.constrained import (ConstraintStats, ScriptConstraint, TokenEngine, Workload,
                                                      allocate_bitmask)

    tok = load_tokenizer(args.tokenizer)
    engine = TokenEngine(tok)
    stats = ConstraintStats()
    bits = allocate_bitmask(1, engine.vocab_size)
    n = accepted = tokens = 0
    failures = []
    t0 = time.perf_counter()
    done = set()
    for path in args.skip_done or []:  # records another run already checked (its --progress file)
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["db"], r["record"]))
    work = []  # (position within its workload, db, name, workload, record index, trace JSON)
    for db in _db_dirs(args.harvest):
        for name, mod, recs in read_database(db):
            wls: dict[str, Any] = {}
            for pos, (idx, trace_json, target) in enumerate(recs[:args.per_workload]):
                if (str(db), idx) not in done:
                    wl = wls.setdefault(target, Workload(mod, target))
                    work.append((pos, str(db), name, wl, idx, trace_json))
    if args.round_robin:  # every workload's first record, then every second one, ...: a partial run is spread
        work.sort(key=lambda w: w[0])
    shard, shards = (int(x) for x in args.shard.split("/"))
    work = work[shard::shards]
    print(f"{len(work)} records to check ({len(done)} done before)", flush=True)
    for _, db, name, wl, idx, trace_json in work:
        lines = encode(trace_json).splitlines()
        text = "\n".join(lines[:lines.index("post")] + ["post *"] if "post" in lines else lines) + "\n"
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        why = ""
        t_rec = time.perf_counter()
        try:
            c = ScriptConstraint(engine, wl, stats)
            why = first_forbidden(c, ids, bits, tok)
        except Exception as e:  # noqa: BLE001 - a crash is a failure of this record, counted; go on
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"[:300]
        n += 1
        tokens += len(ids)
        bad = bool(why) or c.dead
        if bad:
            failures.append({"db": str(db), "workload": name, "record": idx, "why": why or c.error})
        else:
            accepted += 1
        if args.progress:
            with open(args.progress, "a") as f:
                f.write(json.dumps({"db": str(db), "workload": name, "record": idx, "ok": not bad,
                                    "why": (why or c.error) if bad else "", "tokens": len(ids),
                                    "s": round(time.perf_counter() - t_rec, 3)}) + "\n")
        print(f"record {n}: {name}#{idx} {'ok' if not bad else 'FORBIDDEN ' + (why or c.error)} "
              f"({len(ids)} tokens, {time.perf_counter() - t0:.0f} s)", flush=True)
        if n % 50 == 0:
            log.info("%d records, %d accepted (%.0f s)", n, accepted, time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    out = {"records": n, "accepted": accepted, "tokens": tokens, "lines": stats.lines, "wall_s": wall,
           "mask_us_per_token": 1e6 * stats.mask_s / max(tokens, 1),
           "line_ms": 1e3 * stats.state_s / max(stats.lines, 1), "failures": failures[:50],
           "tokenizer": args.tokenizer}
    print(f"| records | accepted | tokens | mask us/token | line check ms | wall s |\n|---|---|---|---|---|---|\n"
          f"| {n} | {accepted} ({100 * accepted / max(n, 1):.1f}%) | {tokens} | {out['mask_us_per_token']:.1f} | "
          f"{out['line_ms']:.1f} | {wall:.0f} |")
    for f in failures[:10]:
        print("FORBIDDEN", f)
    return out


def bench_libraries(args: argparse.Namespace) -> dict[str, Any]:
    """Per-step cost of an allowed-token mask over the tokenizer's vocabulary, at each token of a real
    script: llguidance with the codec grammar (as written, and a workload line grammar) against the
    pure-Python fallback (Lark's interactive LALR parser: the terminals it accepts next, each vocabulary
    token matched against them: a lower bound, since a token spanning two terminals needs more)."""
    import re

    import llguidance

    from little_dragon.codec.grammar import grammar_text, parser
    from little_dragon.generation.constrained import allocate_bitmask

    from little_dragon.generation.llg_tokenizer import llg_tokenizer

    tok = load_tokenizer(args.tokenizer)
    lltok = llg_tokenizer(tok)  # the constraint's own checked view (a misread decoder is repaired or refused)
    script = ("blk C\nblk root\nann b0 tiling \"SSRSRS\"\nloops b0 3\ntile l0 = 4 16 1 1\ntile l1 = 1 1 2 32\n"
              "tile l2 = 64 1\nreorder *\nann b1 parallel 32\nann b1 vectorize 64\nann b1 unroll cat unroll = 0\n"
              "post *\n")
    ids = tok(script, add_special_tokens=False)["input_ids"]
    out: dict[str, Any] = {"tokenizer": args.tokenizer, "vocab": lltok.vocab_size, "steps": len(ids)}
    g = grammar_text().replace("FLOAT.2:", "FLOAT:")
    t0 = time.perf_counter()
    m = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_lark(g), log_level=0,
                             limits=llguidance.LLParserLimits(precompute_large_lexemes=False))
    out["llguidance_compile_ms"] = 1e3 * (time.perf_counter() - t0)
    bits = allocate_bitmask(1, lltok.vocab_size)
    t0 = time.perf_counter()
    for t in ids:
        m.unsafe_compute_mask_ptr(bits.data_ptr(), bits.numel() * 4)
        assert m.consume_token(t), tok.decode([t])
    out["llguidance_mask_us"] = 1e6 * (time.perf_counter() - t0) / len(ids)
    # the pure-Python fallback
    vocab = [tok.decode([i]) for i in range(len(tok))]
    p = parser()
    terms = {t.name: re.compile(t.pattern.to_regexp()) for t in p.terminals}
    steps = ids[:: max(1, len(ids) // 12)]
    t0 = time.perf_counter()
    for j, _ in enumerate(steps):
        prefix = tok.decode(ids[:ids.index(steps[j])])
        ip = p.parse_interactive(prefix)
        try:
            ip.exhaust_lexer()
        except Exception:  # noqa: BLE001 - a prefix ending mid-terminal: the lower bound goes on
            pass
        acc = [terms[n] for n in ip.accepts() if n in terms]
        sum(1 for v in vocab if any(r.match(v.lstrip(" ")) for r in acc))
    out["lark_fallback_mask_ms"] = 1e3 * (time.perf_counter() - t0) / len(steps)
    print("| engine | compile ms | mask per step | vs llguidance |\n|---|---|---|---|")
    print(f"| llguidance {llguidance.__version__} (codec grammar as is) | {out['llguidance_compile_ms']:.1f} | "
          f"{out['llguidance_mask_us']:.0f} us | 1x |")
    print(f"| Lark interactive LALR + vocabulary scan (lower bound) | - | {out['lark_fallback_mask_ms']:.0f} ms | "
          f"{1e3 * out['lark_fallback_mask_ms'] / max(out['llguidance_mask_us'], 1e-9):.0f}x |")
    return out


def _rows(path: str, n: int, seed: int) -> list[dict[str, Any]]:
    import random

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    return rows[:n]


_GENERATION_MODULES = ("constrained", "constrain_state", "grammar_line")


def constrained_module(rev: str | None) -> Any:
    """``little_dragon.generation.constrained`` as it is, or as it was at git revision ``rev`` (its three
    modules loaded side by side under another package name: the before/after arms of one run)."""
    import importlib
    import subprocess
    import tempfile
    import types

    if not rev:
        return importlib.import_module("little_dragon.generation.constrained")
    pkg = "ld_at_" + "".join(ch if ch.isalnum() else "_" for ch in rev)
    if pkg in sys.modules:
        return sys.modules[pkg + ".constrained"]
    folder = Path(tempfile.mkdtemp(prefix="constrained_at_")) / pkg
    folder.mkdir()
    for name in _GENERATION_MODULES:
        text = subprocess.run(["git", "show", f"{rev}:src/little_dragon/generation/{name}.py"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout
        for other in _GENERATION_MODULES:
            text = text.replace(f"little_dragon.generation.{other}", f"{pkg}.{other}")
        (folder / f"{name}.py").write_text(text)
    sys.modules[pkg] = types.ModuleType(pkg)
    sys.modules[pkg].__path__ = [str(folder)]
    return importlib.import_module(pkg + ".constrained")


def _clear_caches(mod: Any, tok: Any) -> None:
    """Per-process caches of a constrained module (prefix facts, compiled grammars): each timed arm
    starts cold, as a new batch of prompts would (llguidance's view of the tokenizer is kept: once per
    process)."""
    if hasattr(mod, "clear_caches"):  # here and in its TVM worker process
        mod.clear_caches()
    for name in ("_DECODED", "_STATES", "_LIVE"):  # _LIVE: the prefixes' live schedules (kept before: warm)
        cache = getattr(mod, name, None)
        if cache is not None:
            cache.data.clear()
    mod.engine_for(tok)._cache.clear()
    gl = sys.modules.get(mod.__name__.rsplit(".", 1)[0] + ".grammar_line")
    for memo in ("_MEMO", "_USES"):  # line grammar texts; the rules' uses (kind grammars)
        if gl is not None and hasattr(gl, memo):
            getattr(gl, memo).clear()


def _warm(rows: list[dict[str, Any]], tok: Any) -> None:
    """One-off costs no arm should be charged for: the codec's Lark parser, TVM's schedule machinery, the
    prompts' workloads parsed to TVM modules, llguidance's view of the tokenizer."""
    from little_dragon import codec
    from little_dragon.codec.grammar import parser
    from little_dragon.generation.constrained import TokenEngine, workload_of_prompt

    parser()
    codec.decode("blk root\n", codec.SyntaxOnlyContext())
    for r in rows:
        workload_of_prompt(r["prompt"])
    TokenEngine(tok)
    from little_dragon.generation.schedule_worker import worker

    for role in ("lines", "end"):
        worker(role).warm()  # the constraint's TVM worker processes: started, their imports done
    if any('"cuda"' in r["prompt"].split("\n", 3)[1] for r in rows if r["prompt"].count("\n") > 2):
        from little_dragon.tvmx.build import import_tensor_intrinsics

        import_tensor_intrinsics()  # TVMScript-parsed once per process (tensorize lines need it)


class StepTimer:
    """Counts the model's forward passes of one arm and times its prefills (the first forward of each
    generate call: the whole prompt, no constraint work runs before it), so that an arm's time splits into
    prefill and decoding steps.  Per decoding step is the fair overhead unit: the arms sample scripts of
    different lengths, and a short script pays its batch's prompt prefill over few tokens (tokens/s then
    charges the prefill to the constraint)."""

    def __init__(self, model: Any):
        self.calls: list[list[float]] = []  # per generate call: [prefill seconds, decoding steps, forward seconds]
        self.rows: list[list[int]] = []     # per generate call: the batch's rows at each decoding step (its shape)
        self.engine_steps = 0
        self._t0: float | None = None
        self._step_t0: float | None = None  # a decoding step's forward call began (its launch: no sync on a GPU)
        self._handles = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                         model.register_forward_hook(self._post)]

    def _pre(self, module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        # a prefill feeds a whole prompt; a shared-prefix decoding step feeds k tokens per row with a 4-D mask
        prefill = ids is not None and ids.shape[-1] > 1 and not (mask is not None and mask.dim() == 4)
        self.engine_steps += int(mask is not None and mask.dim() == 4)  # the shared-prefix engine's decoding steps
        if prefill or not self.calls:
            self.calls.append([0.0, 0, 0.0])
            self.rows.append([])
            self._t0 = time.perf_counter()
        else:
            self.calls[-1][1] += 1
            self.rows[-1].append(int(ids.shape[0]) if ids is not None else 0)
            self._step_t0 = time.perf_counter()

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._step_t0 is not None:  # the model's own call: on a GPU its kernels' launch, the rest of a step the loop's
            self.calls[-1][2] += time.perf_counter() - self._step_t0
            self._step_t0 = None
        if self._t0 is not None:
            logits = getattr(output, "logits", None)
            if logits is not None and logits.is_cuda:  # the prefill's kernels, not only their launch
                import torch

                torch.cuda.synchronize(logits.device)
            self.calls[-1][0] += time.perf_counter() - self._t0
            self._t0 = None

    def first(self, n_calls: int) -> dict[str, Any]:
        """The first ``n_calls`` generate calls (an arm's first pass; resamples come after)."""
        calls = self.calls[:n_calls]
        return {"prefills": len(calls), "prefill_s": sum(c[0] for c in calls), "steps": int(sum(c[1] for c in calls)),
                "forward_s": sum(c[2] for c in calls), "rows_per_step": self.rows[:n_calls]}

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def _arm(name: str, model: Any, tok: Any, rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    import os

    load = os.getloadavg()[0]
    timer = StepTimer(model)
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    try:
        out = _arm_run(name, model, tok, rows, args, timer)
    finally:
        timer.remove()
    cpu1 = _cpu_seconds()
    out["arm_s"] = time.perf_counter() - t0  # the whole arm: set-up, first pass and resamples
    # CPU seconds of this process (every thread) and of its child processes (the constraint's TVM workers) over the
    # arm: what the work costs in all, wherever it ran (a worker's time hides beside the model's only on a spare core)
    out["cpu_main_s"] = cpu1[0] - cpu0[0]
    out["cpu_workers_s"] = sum(t - cpu0[1].get(pid, 0.0) for pid, t in cpu1[1].items())
    # an arm must run on the engine it names (sessions 8-12's +shared_prefix constrained arms ran on generate unseen)
    if ("+shared_prefix" in name) != (timer.engine_steps > 0):
        raise SystemExit(f"arm {name} ran on the wrong engine ({timer.engine_steps} shared-prefix decoding steps)")
    return {**out, "load_1min": [load, os.getloadavg()[0]]}


def _cpu_seconds() -> tuple[float, dict[int, float]]:
    """(user + system CPU seconds of this process, {child pid: its user + system seconds}) now."""
    import psutil

    me = psutil.Process()
    kids = {}
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:  # ended meanwhile (a replaced worker): its time is gone with it
            continue
        kids[child.pid] = t.user + t.system
    t = me.cpu_times()
    return t.user + t.system, kids


def _arm_run(name: str, model: Any, tok: Any, rows: list[dict[str, Any]], args: argparse.Namespace,
             timer: StepTimer) -> dict[str, Any]:
    import torch

    from little_dragon.training.callbacks import sample_scripts

    prompts = [r["prompt"] for r in rows]
    kind, _, rev = name.partition("@")
    # constrained+bg / +fg: the step's work beside the forward pass or not; +shared_prefix: the shared-prefix
    # engine (generation.shared_prefix) instead of generate with a dynamic cache
    kind, *modes = kind.split("+")
    rev, *rev_modes = rev.split("+") if rev else [""]
    modes += rev_modes
    engine = "shared_prefix" if "shared_prefix" in modes else "dynamic"
    profile = _Profile("profile" in modes)   # +profile: the arm's generation under cProfile (its timing inflated)
    modes = [m for m in modes if m != "profile"]
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if kind == "free":
        if engine == "shared_prefix":
            from little_dragon.generation import shared_prefix

            refill, row = shared_prefix.REFILL, shared_prefix.ROW_ATTEMPTS
            shared_prefix.REFILL = "norefill" not in modes   # +norefill: chunks of rows; +rowN: N attempts a row
            rows_of = [int(m[len("row"):]) for m in modes if re.fullmatch(r"row\d+", m)]
            shared_prefix.ROW_ATTEMPTS = rows_of[0] if rows_of else row
            try:
                with profile:
                    first = shared_prefix.sample_shared_prefix(model, tok, prompts, args.k, args.max_new_tokens,
                                                               args.temperature,
                                                               prompts_per_chunk=max(1, args.batch_size // args.k))
            finally:
                shared_prefix.REFILL, shared_prefix.ROW_ATTEMPTS = refill, row
            flat = [t for ts in first for t in ts]
        else:
            flat = sample_scripts(model, tok, prompts, args.max_new_tokens, args.temperature,
                                  batch_size=args.batch_size, num_return_sequences=args.k)
            first = [flat[i * args.k:(i + 1) * args.k] for i in range(len(prompts))]
        final, gen_s = first, time.perf_counter() - t0
        extra = {"generated": sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in flat),
                 **timer.first(len(timer.calls))}
    else:
        mod = constrained_module(rev or None)
        _clear_caches(mod, tok)
        # (named apart from ``engine``, the cache implementation: one name for both sent every +shared_prefix arm of
        # sessions 8-12 through generate, since cache_implementation was then the TokenEngine, not "shared_prefix")
        tokens = mod.engine_for(tok)
        work0 = getattr(tokens, "compile_work_s", None)
        torch.manual_seed(args.seed)
        timer.calls.clear()
        timer.rows.clear()
        retries = [int(m[len("retries"):]) for m in modes if re.fullmatch(r"retries\d+", m)]
        back = [int(m[len("back"):]) for m in modes if re.fullmatch(r"back\d+", m)]
        knobs = [_knob(m) for m in modes if m != "shared_prefix" and not re.fullmatch(r"(retries|back)\d+", m)]
        from little_dragon.generation import shared_prefix

        from little_dragon.generation import constraint_process, schedule_worker

        def owner(knob: str) -> Any:  # REDRAWS and REFILL are the engine's (shared_prefix), MASKS_WITH_MARKS the
            #                          processes' parent side (constraint_process), SHARED_MEMORY_RULE the TVM
            #                          worker's (schedule_worker), the rest the constraint's
            if knob == "MASKS_WITH_MARKS":
                return constraint_process
            if knob == "SHARED_MEMORY_RULE":
                return schedule_worker
            return shared_prefix if knob in ("REDRAWS", "REFILL", "ROW_ATTEMPTS") else mod

        saved = [(name, getattr(owner(name), name, None)) for name, _ in knobs]
        for name, value in knobs:
            setattr(owner(name), name, value)
        # the timer's calls at each engine call's start: the first pass is the first engine call (a call's prefills
        # are its chunks', or its first rows' and those of the rows that refill them)
        engine_calls: list[int] = []
        sample_token_ids = shared_prefix.sample_token_ids

        def counted(*a: Any, **kw: Any) -> Any:
            engine_calls.append(len(timer.calls))
            return sample_token_ids(*a, **kw)

        shared_prefix.sample_token_ids = counted
        kw = {"cache_implementation": engine} if engine != "dynamic" else {}
        if retries or back or getattr(mod, "PROCESSES", 0):
            # +retriesN: a line TVM refuses is drawn again in its attempt, N times an attempt (the engine's); +backN: an
            # attempt that stops short ends up to N lines earlier (finish_back); +process: the child started and ready
            # before the clock, as it is beside a model's load (the thread arms' TVM workers start asynchronously)
            kw["hook"] = mod.ConstrainedDecoding(tok, kind == "constrained", line_retries=(retries or [0])[0],
                                                 **({"finish_back": back[0]} if back else {}))
            if hasattr(kw["hook"], "wait_ready"):
                kw["hook"].wait_ready()
        t0 = time.perf_counter()
        try:
            with profile:
                res = mod.generate_constrained(model, tok, prompts, args.k, args.max_new_tokens, args.temperature,
                                               batch_size=args.batch_size, max_resamples=args.max_resamples,
                                               semantic=(kind == "constrained"), **kw)
        finally:
            shared_prefix.sample_token_ids = sample_token_ids
            for name, value in saved:
                setattr(owner(name), name, value)
        first, final, gen_s = res.first_scripts, res.scripts, res.first_seconds
        first_calls = (engine_calls[1] if len(engine_calls) > 1 else len(timer.calls)) if engine_calls else \
            -(-len(prompts) // max(1, args.batch_size // args.k))   # generate: its batches
        extra_s = res.seconds - res.first_seconds
        extra = {"stats": res.stats.as_dict(), "resample_s": extra_s, "generated": getattr(res, "first_generated", None),
                 "first_pass_rejected": sum(not ok for oks in res.first_ok for ok in oks),
                 "compile_work_s": None if work0 is None else tokens.compile_work_s - work0,
                 **timer.first(first_calls)}
    if profile.text is not None:
        extra["profile"] = profile.text
    return {"first": first, "final": final, "gen_s": gen_s, **extra}


class _Profile:
    """``with``: the model's process under cProfile when ``on`` (the bench's +profile), its functions by own time and by
    time within, as text (``text``): where the decoding loop's own time goes on the device (a CUDA sync shows as the
    call that waits, ``tolist``/``item``)."""

    def __init__(self, on: bool, lines: int = 45):
        self.on, self.lines, self.text = on, lines, None
        self._prof: Any = None

    def __enter__(self) -> "_Profile":
        if self.on:
            import cProfile

            self._prof = cProfile.Profile()
            self._prof.enable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._prof is None:
            return
        import io
        import pstats

        self._prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(self._prof, stream=buf)
        stats.sort_stats("tottime").print_stats(self.lines)
        stats.sort_stats("cumulative").print_stats(self.lines)
        self.text, self._prof = buf.getvalue(), None


def _knob(mode: str) -> tuple[str, Any]:
    """An arm's ``+mode``: the constrained module's setting it stands for.  +bg / +fg: the step's work beside the
    forward pass or not (BACKGROUND); +threads / +inline: line grammars compiled in worker threads or inline
    (COMPILE_THREADS; code older than it has none); +checked / +masked: the shared-prefix engine draws first and
    masks only refused draws, or masks every step (SAMPLE_FIRST); +noredraw: a refused draw is masked at once
    (shared_prefix.REDRAWS 0: the draws of code before redraws existed, so the same scripts as its arms); +norefill: the
    engine decodes chunks of rows, each until its last attempt ends (shared_prefix.REFILL False); +processN: the
    constraint work in N processes of its own (PROCESSES; +process: one; started and ready before the arm's clock).
    +retriesN (read
    in ``_arm_run``): line retries, N an attempt (``generation.constrained_line_retries``; arms without it: none).
    +backN (read there too): an attempt that stops short of a finished kernel ends at most N lines earlier
    (``generation.constrained_finish_back``; arms without it: 0).  +waitN: an end check with retries left is read N
    decoding steps after `post *` (END_WAIT_STEPS; +wait0: at once, as before session 31; arms without it: by device).
    +nothreadfactors: a GPU tiling's thread factors drawn free, its thread count checked at the bounds line only
    (THREAD_FACTORS False: the constraint before session 32).  +noannmove: `ann` of any key on any block or loop, and a
    block moved by `at`/`rat` may be moved again (ANNOTATION_AND_MOVE_RULES False: before session 33).  +eager / +lazy:
    every line's state and grammar before its first token, or its first token drawn ahead of them (LAZY_LINE_STARTS;
    arms without either: eager, the default).  +masksapart: a masked step asks its constraint processes for marks, then
    for masks (constraint_process.MASKS_WITH_MARKS False: before session 35; by default the masks come with the marks).
    +niceN: the constraint processes (and their TVM workers) at niceness N above the model's loop (PROCESS_NICE).
    +keepN: the constraint processes (and their TVM workers) kept off the first N cores, left to the model's loop
    (PROCESS_KEEP_CORES).
    +endworkersN: deferred end checks on N TVM workers side by side (END_CHECK_WORKERS; arms without it: one).
    +nobindfused: a `bind` right after a `fuse` may bind any free loop (BIND_FUSED False: before session 35).
    +byprompt: with constraint processes, a prompt's attempts all in one of them (SPREAD_ATTEMPTS False: before session
    36; by default they are dealt out among the processes in groups).  +profile (read in ``_arm_run``): the arm's generation
    under cProfile, its listing in the arm's ``profile`` (its times inflated: not an arm to compare).  +rowN (free arms
    too): the engine's cache rows hold N of a prompt's k attempts (shared_prefix.ROW_ATTEMPTS; arms without it: all k).
    +procprofile: each constraint process's steps under cProfile, the slow ones (>= 100 ms) apart, the listings in the
    arm's ``stats.process_profiles`` (PROFILE_PROCESSES; times inflated: not an arm to compare).  +nohalfbound: `post`
    allowed while a block is under a blockIdx loop and no threadIdx loop (HALF_BOUND_RULE False: before session 37).
    +noouterbx: a data-parallel loop with no loop above it may be bound to any axis (OUTERMOST_BLOCK_IDX False: before
    session 39).  +nointrinsics: the TVM workers register the tensor intrinsics at the first line that needs them, not
    when they start (TENSOR_INTRINSICS_AT_START False: before session 39).  +shared / +noshared: a software pipeline
    over the target's shared memory refused at its `order` line, or found at `post *` only
    (schedule_worker.SHARED_MEMORY_RULE True / False; True in session 39, False by default since session 40).
    +droppipe (with +shared): a pipeline over the shared memory taken back alone, the tiling kept (DROP_PIPELINE).
    +nopipebody: the software pipeline's keys on any loop, not only on one whose body is a sequence
    (PIPELINE_BODY_RULE False: before session 44)."""
    fixed = {"bg": ("BACKGROUND", True), "fg": ("BACKGROUND", False), "threads": ("COMPILE_THREADS", True),
             "inline": ("COMPILE_THREADS", False), "inprocess": ("ISOLATE_TVM", False),
             "checked": ("SAMPLE_FIRST", True), "masked": ("SAMPLE_FIRST", False),
             "noredraw": ("REDRAWS", 0), "norefill": ("REFILL", False), "nothreadfactors": ("THREAD_FACTORS", False),
             "noannmove": ("ANNOTATION_AND_MOVE_RULES", False), "eager": ("LAZY_LINE_STARTS", False),
             "lazy": ("LAZY_LINE_STARTS", True), "masksapart": ("MASKS_WITH_MARKS", False),
             "nobindfused": ("BIND_FUSED", False), "byprompt": ("SPREAD_ATTEMPTS", False),
             "procprofile": ("PROFILE_PROCESSES", True), "nohalfbound": ("HALF_BOUND_RULE", False),
             "noouterbx": ("OUTERMOST_BLOCK_IDX", False), "nointrinsics": ("TENSOR_INTRINSICS_AT_START", False),
             "shared": ("SHARED_MEMORY_RULE", True), "noshared": ("SHARED_MEMORY_RULE", False),
             "droppipe": ("DROP_PIPELINE", True), "nopipebody": ("PIPELINE_BODY_RULE", False)}
    if mode in fixed:
        return fixed[mode]
    if re.fullmatch(r"process\d*", mode):
        return "PROCESSES", int(mode[len("process"):] or 1)
    if re.fullmatch(r"wait\d+", mode):
        return "END_WAIT_STEPS", int(mode[len("wait"):])
    if re.fullmatch(r"endworkers\d+", mode):
        return "END_CHECK_WORKERS", int(mode[len("endworkers"):])
    if re.fullmatch(r"nice\d+", mode):
        return "PROCESS_NICE", int(mode[len("nice"):])
    if re.fullmatch(r"keep\d+", mode):
        return "PROCESS_KEEP_CORES", int(mode[len("keep"):])
    if re.fullmatch(r"row\d+", mode):
        return "ROW_ATTEMPTS", int(mode[len("row"):])
    raise SystemExit(f"unknown arm mode +{mode} (bg, fg, threads, inline, inprocess, checked, masked, noredraw, norefill, "
                     "nothreadfactors, noannmove, nobindfused, byprompt, procprofile, nohalfbound, noouterbx, nointrinsics, shared, noshared, droppipe, nopipebody, eager, lazy, masksapart, processN, niceN, keepN, endworkersN, rowN, waitN, "
                     "retriesN, backN, shared_prefix)")


def _score(rows: list[dict[str, Any]], attempts: list[list[str]], tok: Any, evaluate: bool) -> dict[str, Any]:
    from little_dragon.datasets.validity import check_script

    n = dec = ok = 0
    verdicts, prompt_of = [], []
    for i, (r, scripts) in enumerate(zip(rows, attempts)):
        for s in scripts:
            v = check_script(s, r)
            n += 1
            dec += v.decoded
            ok += v.valid
            verdicts.append((r, s, v))
            prompt_of.append(i)
    out = {"attempts": n, "decode_rate": dec / max(n, 1), "apply_rate": ok / max(n, 1),
           "tokens": sum(len(tok(s, add_special_tokens=False)["input_ids"]) for ss in attempts for s in ss)}
    # every attempt's script and verdict, so a surprising rate can be read attempt by attempt afterwards
    # (the device's machine is gone by then)
    out["per_attempt"] = [{"prompt": i, "script": s, "decoded": bool(v.decoded), "valid": bool(v.valid),
                           "error": v.error[:300]} for i, (_, s, v) in zip(prompt_of, verdicts)]
    if evaluate:
        out.update(_evaluate(verdicts, out["per_attempt"]))
    return out


def _evaluate(verdicts: list[tuple[dict[str, Any], str, Any]],
              per_attempt: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Correctness and speedup of every attempt through the Evaluator, grouped by target (each attempt's
    category, speedup and message also written into ``per_attempt``, in the order of ``verdicts``)."""
    import math
    from collections import Counter, defaultdict

    from little_dragon.evaluator.pool import EvalRequest, Evaluator

    by_target: dict[str, list] = defaultdict(list)
    for i, (r, s, _) in enumerate(verdicts):
        t = r.get("target")
        by_target[t if isinstance(t, str) else json.dumps(t, sort_keys=True)].append((i, r, s))
    cats: Counter = Counter()
    speedups = []
    for target, items in by_target.items():
        with Evaluator(json.loads(target)) as ev:
            reqs = [EvalRequest(r["tvmscript"], s, r.get("start_script") or None) for _, r, s in items]
            for (i, _, _), res in zip(items, ev.evaluate_batch(reqs)):
                if per_attempt is not None:
                    per_attempt[i].update(category=res.category, speedup=res.speedup,
                                          message=res.message[:300])
                cats[res.category] += 1
                if res.category == "correct" and res.speedup:
                    speedups.append(res.speedup)
    n = sum(cats.values())
    geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups)) if speedups else None
    return {"correct_rate": cats["correct"] / max(n, 1), "categories": dict(cats), "geomean_speedup_correct": geo}


def _write(args: argparse.Namespace, ab: dict[str, Any]) -> None:
    """The A/B so far to ``--out`` (atomically): written before the slow scoring and after each arm's, so a run cut
    by a time limit keeps its timing."""
    if args.out:
        import os

        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps({"ab": ab}, indent=2, default=str))
        os.replace(tmp, path)


def bench_ab(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(args.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows = _rows(args.rows, args.prompts, args.seed)
    if args.evaluate_from:
        return _score_saved(args, rows, tok)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
    out: dict[str, Any] = {"model": args.model, "rows": args.rows, "prompts": len(rows), "k": args.k,
                           "temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "device": device,
                           "max_resamples": args.max_resamples, "warmup_rounds": args.warmup, "arms": {}}
    _warm(rows, tok)
    # untimed rounds first: one-off costs of a process (the first constrained run on the H200 took 2.5x its
    # second, session 9) are charged to no arm
    for w in range(args.warmup):
        for name in args.arms:
            log.info("warm-up %s (round %d/%d, untimed)", name, w + 1, args.warmup)
            _arm(name, model, tok, rows, args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.arms}
    for rep in range(args.repeat):  # round robin: the machine's load drifts alike over every arm
        for name in args.arms:
            log.info("arm %s (run %d/%d): %d prompts x %d attempts", name, rep + 1, args.repeat, len(rows), args.k)
            runs[name].append(_arm(name, model, tok, rows, args))
            r = runs[name][-1]  # the timing now (a run cut short by a time limit still leaves it in the log)
            steps, pre = r.get("steps") or 0, r.get("prefill_s", 0.0)
            log.info("%s: %s sampled tokens in %.1f s (%d decoding steps, prefill %.2f s: %.2f ms a step); %s", name,
                     r.get("generated"), r["gen_s"], steps, pre, 1e3 * (r["gen_s"] - pre) / max(steps, 1),
                     json.dumps({k: v for k, v in r.get("stats", {}).items() if k != "reasons"}))
            # the arms measured so far, written now: a device call cut by its time limit keeps them (session 30 lost
            # an arm's steps and scripts that way)
            out["arms"] = _arm_results({n: rs for n, rs in runs.items() if rs}, tok)  # every arm, after the last
            _write(args, out)
    _print_steps(out)
    _print_step_parts(out)
    _print_costs(out)
    _write(args, out)
    if args.no_score:  # timing only (a device call's minutes): score later with --evaluate-from on any machine
        return out
    _score_arms(out, {name: runs[name][0] for name in args.arms}, rows, tok, args)
    _print_ab(out)
    return out


def _arm_results(runs: dict[str, list[dict[str, Any]]], tok: Any) -> dict[str, dict[str, Any]]:
    """Each measured arm's numbers (medians over its runs) and first-pass scripts, as ``--out`` keeps them."""
    import statistics

    arms: dict[str, dict[str, Any]] = {}
    for name in runs:  # code too old to count sampled tokens: an arm that sampled the same scripts did
        if runs[name][0].get("generated") is None:
            twin = [o for o in runs if o != name and runs[o][0]["first"] == runs[name][0]["first"]
                    and runs[o][0].get("generated") is not None]
            runs[name][0]["generated"] = runs[twin[0]][0]["generated"] if twin else 0
    for name in runs:
        arm = runs[name][0]
        times = [r["gen_s"] for r in runs[name]]
        gen_s = statistics.median(times)
        # tokens of the first pass's scripts per second of the first pass (equal attempts both arms)
        # sampled tokens per second: the decoding throughput (a constrained attempt cut off by the token
        # budget keeps only its complete lines: its tokens count here, not in the scripts' tokens/s)
        script_tokens = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for ss in arm["first"] for t in ss)
        res = {"gen_s": gen_s, "gen_s_runs": times, "tokens_per_s": script_tokens / gen_s,
               "generated_tokens": arm["generated"], "generated_tokens_per_s": arm["generated"] / gen_s,
               "first_scripts": arm["first"], "final_scripts": arm["final"]}  # per prompt: --evaluate-from
        # per decoding step (prefills apart): the arms' batches are the same, their scripts' lengths are not
        decode_s = [r["gen_s"] - r.get("prefill_s", 0.0) for r in runs[name]]
        res.update({"steps": arm.get("steps"), "prefills": arm.get("prefills"),
                    "rows_per_step": arm.get("rows_per_step"),  # per engine call: rows (prompts) alive a step
                    "prefill_s": statistics.median(r.get("prefill_s", 0.0) for r in runs[name]),
                    "decode_s": statistics.median(decode_s), "decode_s_runs": decode_s,
                    "load_1min": [r.get("load_1min") for r in runs[name]],
                    "arm_s": statistics.median(r.get("arm_s", 0.0) for r in runs[name]),
                    "cpu_main_s": statistics.median(r.get("cpu_main_s", 0.0) for r in runs[name]),
                    "cpu_workers_s": statistics.median(r.get("cpu_workers_s", 0.0) for r in runs[name]),
                    "forward_s": statistics.median(r.get("forward_s", 0.0) for r in runs[name])})
        if arm.get("steps"):
            res["ms_per_step"] = 1e3 * res["decode_s"] / arm["steps"]
            res["forward_ms_per_step"] = 1e3 * res["forward_s"] / arm["steps"]
            res["decode_tokens_per_s"] = arm["generated"] / res["decode_s"]
        same = [other for other in runs if other != name and runs[other][0]["first"] == arm["first"]]
        if same:
            res["same_scripts_as"] = same
        # every run of both arms: the same first-pass and final (resampled) scripts
        res["same_scripts_every_run_as"] = [
            other for other in runs if other != name
            and all(r["first"] == arm["first"] and r["final"] == arm["final"] for r in runs[other] + runs[name])]
        if arm.get("profile"):  # +profile: the first run's listing
            res["profile"] = arm["profile"]
        if "stats" in arm:  # a constrained arm
            res["stats"] = arm["stats"]
            res["compile_work_s"] = arm.get("compile_work_s")
            res["resample_s"] = arm["resample_s"]
            res["first_pass_rejected"] = arm["first_pass_rejected"]
        arms[name] = res
    return arms


def _score_arms(out: dict[str, Any], scripts: dict[str, dict[str, Any]], rows: list[dict[str, Any]], tok: Any,
                args: argparse.Namespace) -> None:
    """Every arm's first pass (and a constrained arm's resampled scripts) checked and, with ``--evaluate``,
    evaluated; arms that sampled the very same scripts share one scoring.  ``--out`` rewritten after each arm."""
    done: dict[str, dict[str, Any]] = {}

    def score(attempts: list[list[str]]) -> dict[str, Any]:
        key = json.dumps(attempts)
        if key not in done:
            done[key] = _score(rows, attempts, tok, args.evaluate)
        return done[key]

    for name, arm in scripts.items():
        res = out["arms"][name]
        log.info("scoring %s", name)
        res["first_pass"] = score(arm["first"])
        if "stats" in res:
            res["after_resampling"] = score(arm["final"])
        log.info("%s: %s", name, json.dumps({k: v for k, v in res["first_pass"].items()
                                             if k not in ("categories", "per_attempt")}))
        _write(args, out)


def _score_saved(args: argparse.Namespace, rows: list[dict[str, Any]], tok: Any) -> dict[str, Any]:
    """``--evaluate-from FILE``: score the scripts an earlier ``--ab`` run wrote (its generation in one device call,
    its evaluation in the next); the same ``--rows``, ``--prompts`` and ``--seed`` give the same prompts."""
    saved = json.loads(Path(args.evaluate_from).read_text())["ab"]
    if saved["prompts"] != len(rows):
        raise SystemExit(f"{args.evaluate_from}: {saved['prompts']} prompts, --rows/--prompts give {len(rows)}")
    scripts = {name: {"first": res["first_scripts"], "final": res["final_scripts"]}
               for name, res in saved["arms"].items()}
    _score_arms(saved, scripts, rows, tok, args)
    _print_ab(saved)
    return saved


def _print_steps(out: dict[str, Any]) -> None:
    """Free and constrained side by side per decoding step: the same batches, so a step's cost differs only
    by the constraint's work (and the load); the prefill of each generate call is timed apart."""
    arms = out["arms"]
    base = arms.get("free", {})

    def same_engine_free(name: str) -> dict[str, Any]:  # the free arm on the arm's own engine
        return arms.get("free+shared_prefix", {}) if "shared_prefix" in name else base

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}x" if a and b else "-"

    print("\n| arm | generate calls | prefill s | decoding steps | decoding s (median; runs) | ms per step | "
          "per-step vs free | per-step vs free on its engine | sampled tokens | tokens/s excl. prefill | "
          "tokens/s vs free | tokens/s vs free on its engine | wall s (first pass, median) | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, a in arms.items():
        ms, tps = a.get("ms_per_step"), a.get("decode_tokens_per_s")
        own = same_engine_free(name)
        loads = " ".join(f"{x[0]:.1f}-{x[1]:.1f}" for x in a.get("load_1min") or [] if x)
        print(f"| {name} | {a.get('prefills', '-')} | {a.get('prefill_s', 0.0):.2f} | {a.get('steps', '-')} | "
              f"{a['decode_s']:.2f} ({' '.join(f'{x:.2f}' for x in a['decode_s_runs'])}) | "
              f"{ms if ms is None else round(ms, 2)} | {ratio(ms, base.get('ms_per_step'))} | "
              f"{ratio(ms, own.get('ms_per_step'))} | {a.get('generated_tokens')} | "
              f"{tps if tps is None else round(tps, 1)} | {ratio(base.get('decode_tokens_per_s'), tps)} | "
              f"{ratio(own.get('decode_tokens_per_s'), tps)} | {a['gen_s']:.2f} | {loads} |")
    # CPU over the whole arm (set-up, first pass, resamples), this process and its TVM worker processes.  The
    # workers' seconds hide beside the model only on a spare core: on n cores the arm cannot take less wall time than
    # its CPU in all / n
    print("\n| arm | wall s, whole arm (median) | CPU s, this process | CPU s, TVM workers | CPU s in all | "
          "CPU in all vs the free arm's wall |")
    print("|---|---|---|---|---|---|")
    for name, a in arms.items():
        own = same_engine_free(name)
        total = a.get("cpu_main_s", 0.0) + a.get("cpu_workers_s", 0.0)
        print(f"| {name} | {a.get('arm_s', 0.0):.2f} | {a.get('cpu_main_s', 0.0):.2f} | "
              f"{a.get('cpu_workers_s', 0.0):.2f} | {total:.2f} | {ratio(total, own.get('arm_s'))} |")


def _print_step_parts(out: dict[str, Any]) -> None:
    """Where a decoding step goes: the model's call (on a GPU the launch of its kernels, the host's work) and the rest
    of the loop; of that rest, with constraint processes, the waits for their answers (marks, with the masks that come
    with them; masks asked apart), the sends of each step's tokens and the masking (ms a step)."""
    arms = {n: a for n, a in out["arms"].items() if a.get("steps")}
    print("\n| arm | ms a step | model's call | rest of the loop | marks (+ masks) | masks asked apart | sends |"
          " masking | end checks waited (processes) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, a in arms.items():
        st, steps = a.get("stats") or {}, a["steps"]

        def per(x: Any) -> str:
            return "-" if x is None else f"{1e3 * x / steps:.2f}"
        fwd = a.get("forward_ms_per_step")
        rest = None if fwd is None else a["ms_per_step"] - fwd
        print(f"| {name} | {a['ms_per_step']:.2f} | {'-' if fwd is None else f'{fwd:.2f}'} | "
              f"{'-' if rest is None else f'{rest:.2f}'} | {per(st.get('marks_s'))} | {per(st.get('wait_s'))} | "
              f"{per(st.get('send_s'))} | {per(st.get('apply_s'))} | {per(st.get('end_wait_s'))} |")


def _print_costs(out: dict[str, Any]) -> None:
    """Where a constrained arm's time goes (first run of each arm; seconds)."""
    arms = {n: a for n, a in out["arms"].items() if "stats" in a}
    if not arms:
        return
    print("\n| arm | generation s (median of runs) | runs | lines | line grammars compiled | state s | compile s"
          " (waited) | compiling s (all threads) | masks s | same scripts (every run, first pass and resampled) as |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, a in arms.items():
        st = a["stats"]
        work = a.get("compile_work_s")
        print(f"| {name} | {a['gen_s']:.2f} | {' '.join(f'{x:.2f}' for x in a['gen_s_runs'])} | {st['lines']} | "
              f"{st.get('compiled', '-')} | {st['state_s']:.2f} | {st.get('compile_s', 0.0):.2f} | "
              f"{'-' if work is None else f'{work:.2f}'} | "
              f"{st['mask_s']:.2f} | {', '.join(a.get('same_scripts_every_run_as', [])) or '-'} |")
    # the line checks' verdicts (all passes: first and resamples): a decode rejection is a line the constraint
    # allowed and the codec's decoder refused (issue 16: only the index-map scoping checks are left to the line end)
    print("\n| arm | attempts (incl. resamples) | lines checked | decode rejections | apply rejections (incl. dead ends) |"
          " decode rejections by reason |")
    print("|---|---|---|---|---|---|")
    for name, a in arms.items():
        st = a["stats"]
        why = "; ".join(f"{n}x {r}" for r, n in st.get("reasons", {}).items() if r.startswith("decode")) or "-"
        print(f"| {name} | {st['attempts']} | {st['lines']} | {st['rejected_decode']} | {st['rejected_apply']} | {why} |")


def _print_ab(out: dict[str, Any]) -> None:
    arms = out["arms"]
    free_tps = arms.get("free", {}).get("tokens_per_s")
    print(f"\nA/B at equal attempts: {out['prompts']} prompts x {out['k']} attempts, T={out['temperature']}, "
          f"{out['device']}\n")
    free_gen = arms.get("free", {}).get("generated_tokens_per_s")
    print("| arm | decode | apply | correct | geomean speedup | script tokens/s | slowdown | sampled tokens/s |"
          " slowdown | rejected (1st pass) | resampled | after resampling: apply / correct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, a in arms.items():
        f = a["first_pass"]
        tps = a.get("tokens_per_s")
        slow = (free_tps / tps) if (free_tps and tps) else None
        after = a.get("after_resampling") or {}
        cell = lambda x, p=True: "-" if x is None else (f"{100 * x:.1f}%" if p else f"{x:.2f}")
        print(f"| {name} | {cell(f['decode_rate'])} | {cell(f['apply_rate'])} | {cell(f.get('correct_rate'))} | "
              f"{cell(f.get('geomean_speedup_correct'), False)} | {cell(tps, False)} | "
              f"{cell(slow, False)}x | {cell(a.get('generated_tokens_per_s'), False)} | "
              f"{cell(free_gen / a['generated_tokens_per_s'] if free_gen and a.get('generated_tokens_per_s') else None, False)}x | "
              f"{a.get('first_pass_rejected', '-')} | "
              f"{a.get('stats', {}).get('resampled', '-')} | "
              f"{cell(after.get('apply_rate'))} / {cell(after.get('correct_rate'))} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harvest", nargs="*", help="database folders: every record through the constraint")
    ap.add_argument("--tokenizer", default="gguf", help="gguf (SmolLM2) or a HF tokenizer folder")
    ap.add_argument("--per-workload", type=int, default=None, help="records per workload (default: all)")
    ap.add_argument("--progress", help="--harvest: append one JSON line per record here (partial runs count)")
    ap.add_argument("--skip-done", nargs="*", help="--harvest: skip the records these --progress files hold")
    ap.add_argument("--round-robin", action="store_true", help="--harvest: k-th record of every workload in turn")
    ap.add_argument("--shard", default="0/1", help="--harvest: I/N, every N-th record from the I-th")
    ap.add_argument("--libraries", action="store_true", help="mask cost: llguidance vs a Lark fallback")
    ap.add_argument("--ab", action="store_true", help="free vs constrained sampling at equal attempts")
    ap.add_argument("--model", help="HF model folder (an SFT output's model/)")
    ap.add_argument("--rows", help="prompt rows (validation.jsonl)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=768)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-resamples", type=int, default=2)
    ap.add_argument("--arms", nargs="+", default=["free", "constrained"],
                    help="free, syntax (grammar only), constrained (grammar + workload semantics); "
                         "constrained@REV / syntax@REV: the constraint's code as of git revision REV (before/after); "
                         "constrained+bg / +fg: a step's constraint work beside the forward pass in a thread, or not "
                         "(default: beside it where the model is on an accelerator); constrained+threads / +inline: "
                         "line grammars compiled in worker threads or inline (default: threads on an accelerator); "
                         "free+shared_prefix / constrained+shared_prefix: on the shared-prefix engine "
                         "(generation/shared_prefix.py) instead of generate with a dynamic cache")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each arm, round robin (median reported)")
    ap.add_argument("--warmup", type=int, default=0, help="untimed rounds of every arm before the timed ones")
    ap.add_argument("--evaluate", action="store_true", help="correctness and speedup through the Evaluator")
    ap.add_argument("--evaluate-from", help="--ab: score the scripts of this earlier --out instead of sampling "
                                            "(same --model, --rows, --prompts, --seed)")
    ap.add_argument("--no-score", action="store_true",
                    help="--ab: stop after the timing (the JSON has every arm's scripts: score them later with "
                         "--evaluate-from, which takes ~2 minutes an arm of 128 CUDA scripts on a device's CPU)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result: dict[str, Any] = {}
    if args.libraries:
        result["libraries"] = bench_libraries(args)
    if args.harvest:
        result["harvest"] = bench_harvest(args)
    if args.ab:
        if not (args.model and args.rows):
            ap.error("--ab needs --model and --rows")
        result["ab"] = bench_ab(args)
    if not result:
        ap.error("nothing to do: --libraries, --harvest and/or --ab")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, default=str))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
