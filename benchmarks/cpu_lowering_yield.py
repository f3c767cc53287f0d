"""Does the end check's lowering refuse anything on a CPU target?

The constraint's end-of-script check lowers a finished kernel for the target (``tvmx.build.lower_for_target``); until
session 24 only on an accelerator, where the lowering refuses kernels the post-processors accept (session 12, H200: 20
of 22 build errors), since then on a CPU too (session 24's CPU sealed runs: 4 build errors it refuses).  This counts,
on CPU-target scripts that pass the rest of the end check, how many the lowering would refuse:

- every record of a harvest's MetaSchedule databases (``post *`` form), and
- free samples of a model on validation rows (``--model``/``--rows``: the shared-prefix engine, ``--k`` attempts per
  prompt; free, so nothing of the constraint shaped them).

    python benchmarks/cpu_lowering_yield.py --harvest artifacts/harvest/llvm-2c-XXXX \
        --model artifacts/sft/model --rows validation_llvm.jsonl --k 8 --out results/x.json

Real parts only: MetaSchedule databases, a trained model's samples, TVM's post-processors and lowering.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _lowering(mod: Any, context: Any, text: str) -> tuple[str, str]:
    """(the end check's verdict without lowering, the lowering's refusal or "")."""
    from tvm import s_tir

    from little_dragon.codec import apply
    from little_dragon.generation.schedule_worker import finish_check
    from little_dragon.tvmx.build import lower_for_target
    from little_dragon.tvmx.postprocs import as_target

    why = finish_check(mod, context, text)
    if why:
        return why, ""
    sch = s_tir.Schedule(mod)
    apply(text, sch, context)
    try:
        lower_for_target(sch.mod, as_target(context.target))
    except Exception as e:  # noqa: BLE001 - TVM's lowering passes raise several error types
        lines = str(e).strip().splitlines()
        return "", f"{type(e).__name__}: {lines[-1][:200] if lines else ''}"
    return "", ""


def _harvest(folder: str, counts: collections.Counter, reasons: collections.Counter) -> None:
    from little_dragon.codec import PostprocContext, encode
    from little_dragon.codec.roundtrip import read_database

    for db in sorted(p for p in (Path(folder) / "db").iterdir() if p.is_dir()):
        for _, mod, recs in read_database(db):
            if not recs:
                continue
            context = PostprocContext(mod, recs[0][2])
            for _, trace_json, _ in recs:
                lines = encode(trace_json).splitlines()
                if "post" not in lines:
                    continue
                text = "\n".join(lines[:lines.index("post")] + ["post *"]) + "\n"
                _count("harvest", mod, context, text, counts, reasons)


def _samples(args: argparse.Namespace, counts: collections.Counter, reasons: collections.Counter) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from little_dragon.codec import PostprocContext
    from little_dragon.generation.constrained import workload_of_prompt
    from little_dragon.generation.shared_prefix import sample_shared_prefix

    rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    torch.manual_seed(args.seed)
    prompts = [r["prompt"] for r in rows]
    scripts = sample_shared_prefix(model, tok, prompts, args.k, args.max_new_tokens, args.temperature)
    for prompt, attempts in zip(prompts, scripts):
        wl = workload_of_prompt(prompt)
        if wl is None:
            continue
        context = PostprocContext(wl.mod, wl.target)
        for text in attempts:
            if not text.rstrip().endswith("post *"):
                counts[("samples", "no `post *` end")] += 1
                continue
            _count("samples", wl.mod, context, text.rstrip() + "\n", counts, reasons)


def _count(source: str, mod: Any, context: Any, text: str, counts: collections.Counter,
           reasons: collections.Counter) -> None:
    from tvm_ffi import DLDeviceType

    from little_dragon.tvmx.postprocs import as_target

    if as_target(context.target).get_target_device_type() != DLDeviceType.kDLCPU:
        counts[(source, "not a CPU target")] += 1
        return
    why, lowering = _lowering(mod, context, text)
    if why:
        counts[(source, "refused before lowering")] += 1
    elif lowering:
        counts[(source, "refused by the lowering")] += 1
        reasons[(source, lowering)] += 1
    else:
        counts[(source, "passes, lowers")] += 1


def main(args: argparse.Namespace) -> dict[str, Any]:
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for folder in args.harvest:
        _harvest(folder, counts, reasons)
    if args.model:
        _samples(args, counts, reasons)
    verdicts = ("passes, lowers", "refused by the lowering", "refused before lowering", "no `post *` end",
                "not a CPU target")
    print(f"\n{sum(counts.values())} scripts, {time.perf_counter() - t0:.0f} s\n")
    print("| scripts | " + " | ".join(verdicts) + " |\n|---|" + "---:|" * len(verdicts))
    for source in ("harvest", "samples"):
        print(f"| {source} | " + " | ".join(str(counts[(source, v)]) for v in verdicts) + " |")
    for (source, why), n in reasons.most_common():
        print(f"- {n} x ({source}) {why}")
    out = {"counts": {f"{s}: {v}": n for (s, v), n in counts.items()},
           "lowering_refusals": {f"{s}: {w}": n for (s, w), n in reasons.items()},
           "harvest": args.harvest, "model": args.model, "rows": args.rows, "k": args.k,
           "temperature": args.temperature, "seed": args.seed}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harvest", nargs="*", default=[], help="Harvest folders (their db/ hold MetaSchedule databases).")
    p.add_argument("--model", default="", help="A trained model folder to sample free scripts from.")
    p.add_argument("--rows", default="", help="Validation rows (jsonl) whose prompts the model answers.")
    p.add_argument("--k", type=int, default=8, help="Attempts per prompt.")
    p.add_argument("--max-new-tokens", type=int, default=320, help="Token budget of an attempt.")
    p.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature.")
    p.add_argument("--seed", type=int, default=0, help="torch seed of the samples.")
    p.add_argument("--out", default="", help="JSON results file.")
    return p


if __name__ == "__main__":
    main(parser().parse_args())
