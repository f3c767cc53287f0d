"""SFT throughput on this machine: batching (padding / bucketing / packing) and plain vs DeepSpeed on CPU.

Each variant trains the tiny model for the same number of steps on the same real rows (dataset-template
prompts, codec scripts of traces sampled from MetaSchedule design spaces) in its own process, and reports completion+prompt tokens per second (non-
padding tokens, from the trainer's counter) and seconds per step.  Also measures tokens per script for the
SmolLM2 tokenizer before and after extending it with codec words (``--tokenizer``).

    .venv/bin/python benchmarks/sft_bench.py --steps 12 [--tokenizer] [--train artifacts/datasets/train.jsonl]
        [--out results/sft_bench_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "plain-padding": {"batching": "padding", "deepspeed": "off"},
    "plain-bucketing": {"batching": "bucketing", "deepspeed": "off"},
    "plain-packing": {"batching": "packing", "deepspeed": "off"},
    "deepspeed-zero2-bucketing": {"batching": "bucketing", "deepspeed": "on"},
}


def make_data(folder: Path, per_workload: int, train: str | None = None, val: str | None = None) -> str:
    """train.jsonl / validation.jsonl in ``folder``: the given sets (the dataset stage's real rows), else
    stand-in rows; returns which."""
    if train:
        shutil.copyfile(train, folder / "train.jsonl")
        shutil.copyfile(val or train, folder / "validation.jsonl")
        return f"{train} (+ {val or train})"
    from little_dragon.training.standin import make_rows

    rows = make_rows(per_workload, seed=0)
    for name in ("train", "validation"):
        with open(folder / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return f"stand-in design-space rows ({per_workload} per workload)"


def run_variant(folder: Path, name: str, steps: int, extra: dict | None = None) -> dict:
    overrides = {**VARIANTS[name], "max_steps": steps, "eval_steps": 10_000, "logging_steps": 1,
                 "validity_samples": 0, "final_validity_samples": 0, "register": False, "max_eval_rows": 4,
                 "construction_fraction": None, "rename_copies": 0, **(extra or {})}
    code = (
        "import json,sys\n"
        "from little_dragon.config import from_dict\n"
        "from little_dragon.training.config import SFTConfig\n"
        "from little_dragon.training.sft import train_sft\n"
        f"cfg = from_dict(SFTConfig, {overrides!r}, 'bench')\n"
        f"m = train_sft(cfg, '{folder}/train.jsonl', '{folder}/validation.jsonl', '{folder}/{name}', 'bench')\n"
        "print('RESULT ' + json.dumps({k: m[k] for k in ('tokens_per_s', 'train_runtime_s', 'steps', 'tokens_seen')}))\n"
    )
    env = {**os.environ, "DRAGON_NO_MLFLOW": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"variant": name, "error": proc.stderr[-2000:], "process_wall_s": wall}
    res = json.loads(line[7:])
    res.update(variant=name, process_wall_s=wall, s_per_step=res["train_runtime_s"] / max(res["steps"], 1))
    return res


def tokenizer_measure(train: str | None = None) -> dict:
    """SmolLM2's tokens per script (and per prompt) before and after adding frequent codec words.

    Words are chosen on one half of the distinct scripts and measured on the other (no credit for
    memorising); ``new_token_share`` is the share of a script's tokens that would be freshly initialised
    embeddings the model has never seen, which the saving has to pay for."""
    import random

    from transformers import AutoTokenizer

    from little_dragon.training.models import default_gguf_path
    from little_dragon.tokenizer import (
        codec_words,
        extend_tokenizer,
        tokens_per_text,
    )

    if train:
        from little_dragon.training.data import read_rows

        rows = read_rows(train)
    else:
        from little_dragon.training.standin import make_rows

        rows = make_rows(6, seed=1)
    scripts = sorted({r["completion"] for r in rows})
    prompts = sorted({r["prompt"] for r in rows})
    random.Random(0).shuffle(scripts)
    half = len(scripts) // 2
    p = default_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    base_vocab = len(tok)
    before = tokens_per_text(tok, scripts[half:])
    prompt_before = tokens_per_text(tok, prompts)
    words = codec_words(tok, scripts[:half])
    added = extend_tokenizer(tok, words)
    after = tokens_per_text(tok, scripts[half:])
    prompt_after = tokens_per_text(tok, prompts)
    ids = [i for s in scripts[half:] for i in tok(s, add_special_tokens=False)["input_ids"]]
    roundtrip = all(tok.decode(tok(s, add_special_tokens=False)["input_ids"]) == s for s in scripts[half:])
    return {"rows": train or "stand-in", "script_format": "codec", "scripts_distinct": len(scripts),
            "chars_per_script": sum(map(len, scripts[half:])) / max(1, len(scripts) - half),
            "tokens_per_script_before": before, "tokens_per_script_after": after, "added_tokens": added,
            "saving": 1 - after / before, "prompt_tokens_before": prompt_before, "prompt_tokens_after": prompt_after,
            "new_token_share": sum(i >= base_vocab for i in ids) / max(1, len(ids)),
            "added_words_sample": words[:12], "roundtrip_after": roundtrip, "scripts_measured": len(scripts) - half}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--per-workload", type=int, default=6)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--tokenizer", action="store_true", help="also measure SmolLM2 tokenizer extension")
    ap.add_argument("--train", help="SFT rows to train on (e.g. artifacts/datasets/train.jsonl; default: stand-in "
                                    "design-space rows)")
    ap.add_argument("--val", help="validation rows (default: --train)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="extra sft override for every variant, e.g. --set batch_size=4")
    ap.add_argument("--out", help="write the results JSON here")
    a = ap.parse_args()
    results: dict = {"machine": f"{os.cpu_count()} CPU cores", "steps": a.steps, "variants": []}
    extra = {}
    for item in a.set:
        key, _, value = item.partition("=")
        extra[key] = json.loads(value)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        results["rows"] = make_data(folder, a.per_workload, a.train, a.val)
        results["overrides"] = extra
        for name in a.variants:
            res = run_variant(folder, name, a.steps, extra)
            print(json.dumps(res), flush=True)
            results["variants"].append(res)
    if a.tokenizer:
        results["smollm2_tokenizer"] = tokenizer_measure(a.train)
        print(json.dumps(results["smollm2_tokenizer"]), flush=True)
    if a.out:
        from little_dragon.atomic import write_json

        write_json(a.out, results)


if __name__ == "__main__":
    main()
