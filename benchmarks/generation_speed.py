"""Generation speed: attempts/s of k attempts per prompt, batched with a KV cache (little_dragon.generation).

Prompts are real dataset prompts (a JSONL of the training/validation set: the sealed set is not read here),
repeated to ``--prompts``.  Each (KV cache, batch size) pair of ``--caches`` x ``--batch-sizes`` (sequences per
generate call) is timed after a short warm-up batch (8 new tokens; with the static cache the warm-up holds the
one-off compile, reported apart); the table puts attempts/s side by side, plus the time for the whole job (the
H200 target: 8 attempts for each of 100 prompts in <= 60 s).  Each row is printed and written to ``--json`` as
soon as it is measured, so a time-boxed run keeps what it measured.

    # CPU, the tiny model of a pipeline run
    .venv/bin/python benchmarks/generation_speed.py --model artifacts/sft --prompts 8 --attempts 4
    # H200, SmolLM2 SFT checkpoint (scripts/device/eval_sealed.sh runs this)
    python3 benchmarks/generation_speed.py --model /tmp/sft_gpu_1gpu/out --prompts 100 --attempts 8 \
        --batch-sizes 200 400 800 --max-new-tokens 1024 --json $OUT/generation_speed.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _release(torch: Any) -> None:
    """Give an engine's cached GPU blocks back: after shared_prefix, the static cache's 105 GB did not fit
    in the blocks the allocator kept reserved (the H200 run of session 8 ran out of memory that way)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model source (run folder, HF folder, models:/...)")
    ap.add_argument("--rows", default="artifacts/datasets/validation.jsonl", help="prompts from this JSONL")
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--attempts", type=int, default=8)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32])
    ap.add_argument("--caches", nargs="+", default=["dynamic"], choices=["dynamic", "static", "continuous", "shared_prefix"],
                    help="KV cache implementations to time (static: transformers compiles the decoding step on a GPU; "
                         "continuous: transformers' continuous batching with a paged cache, batch = what it schedules; "
                         "shared_prefix: one cache row per prompt read by its k attempts, generation/shared_prefix.py)")
    ap.add_argument("--max-new-tokens", type=int, default=768)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch default)")
    ap.add_argument("--json", help="write the measurements here")
    args = ap.parse_args(argv)

    import torch

    from little_dragon.datasets.guard import assert_not_sealed
    from little_dragon.datasets.store import read_jsonl_rows
    from little_dragon.generation.config import GenerationConfig
    from little_dragon.generation.sample import LocalGenerator, generate_attempts
    from little_dragon.generation.sources import load_weights, resolve

    rows = read_jsonl_rows(assert_not_sealed(args.rows))
    prompts = [rows[i % len(rows)]["prompt"] for i in range(args.prompts)]
    src = resolve(args.model)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                           cpu_threads=args.threads)
    model, tok = load_weights(src, cfg.device, cfg.dtype)
    device = str(next(model.parameters()).device)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    results: list[dict] = []
    print(f"model {src.label} on {device} ({gpu}); {args.prompts} prompts x {args.attempts} attempts, "
          f"max_new_tokens {args.max_new_tokens}, temperature {args.temperature}", flush=True)
    print(f"{'cache':>8} {'batch':>6} {'seconds':>9} {'attempts/s':>11} {'tokens/s':>10} {'max tok':>8} {'peak GB':>8} "
          f"{'warm-up s':>9}  vs first", flush=True)

    def dump() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps({
                "model": src.spec, "device": device, "gpu": gpu, "prompts": args.prompts, "attempts": args.attempts,
                "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "results": results}, indent=1))

    for cache in args.caches:
        for bs in args.batch_sizes:
            gen = LocalGenerator(src, dataclasses.replace(cfg, batch_size=bs, cache_implementation=cache),
                                 model=model, tokenizer=tok)
            tw = time.perf_counter()
            warm = LocalGenerator(src, dataclasses.replace(cfg, batch_size=bs, cache_implementation=cache,
                                                           max_new_tokens=8), model=model, tokenizer=tok)
            generate_attempts(warm, prompts[: max(1, bs // args.attempts)], args.attempts)
            warm_s = time.perf_counter() - tw
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            try:
                res = generate_attempts(gen, prompts, args.attempts, chunk=len(prompts))
            except torch.OutOfMemoryError as e:  # one engine out of memory is a row of the table, not the end
                results.append({"cache": cache, "batch_size": bs, "error": f"out of memory: {str(e)[:200]}"})
                print(f"{cache:>8} {bs:>6}  out of memory", flush=True)
                del gen, warm
                _release(torch)
                dump()
                continue
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            lens = [len(tok(s, add_special_tokens=False)["input_ids"]) for a in res.scripts for s in a]
            r = {"cache": cache, "batch_size": bs, "seconds": dt, "attempts": res.attempts,
                 "attempts_per_s": res.attempts / dt, "generated_tokens": sum(lens), "tokens_per_s": sum(lens) / dt,
                 "max_script_tokens": max(lens), "warmup_s": warm_s,
                 "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}
            results.append(r)
            first = next(x for x in results if "error" not in x)
            print(f"{cache:>8} {bs:>6} {dt:>9.1f} {r['attempts_per_s']:>11.2f} {r['tokens_per_s']:>10.0f} "
                  f"{r['max_script_tokens']:>8} {r['peak_gpu_gb'] or 0:>8.1f} {warm_s:>9.1f}  "
                  f"x{r['attempts_per_s'] / first['attempts_per_s']:.2f}", flush=True)
            del gen, warm, res
            _release(torch)  # the next engine starts from an empty allocator, not the last one's reserved blocks
            dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
