"""SFT throughput on this machine: batching (padding / bucketing / packing) and plain vs DeepSpeed on CPU.

Each variant trains the tiny model for the same number of steps on the same real rows (dataset-template
prompts, codec scripts of traces sampled from MetaSchedule design spaces) in its own process, and reports completion+prompt tokens per second (non-
padding tokens, from the trainer's counter) and seconds per step.  Also measures tokens per script for the
SmolLM2 tokenizer before and after extending it with codec words (``--tokenizer``).

    .venv/bin/python benchmarks/sft_bench.py --steps 12 [--tokenizer] [--out results/sft_bench_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import os
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


def make_data(folder: Path, per_workload: int) -> None:
    from little_dragon.training.standin import make_rows

    rows = make_rows(per_workload, seed=0)
    for name in ("train", "validation"):
        with open(folder / f"{name}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def run_variant(folder: Path, name: str, steps: int) -> dict:
    overrides = {**VARIANTS[name], "max_steps": steps, "eval_steps": 10_000, "logging_steps": 1,
                 "validity_samples": 0, "final_validity_samples": 0, "register": False, "max_eval_rows": 4,
                 "construction_fraction": None}
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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"variant": name, "error": proc.stderr[-2000:], "process_wall_s": wall}
    res = json.loads(line[7:])
    res.update(variant=name, process_wall_s=wall, s_per_step=res["train_runtime_s"] / max(res["steps"], 1))
    return res


def tokenizer_measure() -> dict:
    from little_dragon.training.models import default_gguf_path
    from little_dragon.training.standin import make_rows
    from little_dragon.training.tokenizer import codec_words, extend_tokenizer, tokens_per_text
    from transformers import AutoTokenizer

    rows = make_rows(6, seed=1)
    scripts = [r["completion"] for r in rows]
    half = len(scripts) // 2  # words from one half, measured on the other: no credit for memorising
    p = default_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    before = tokens_per_text(tok, scripts[half:])
    words = codec_words(tok, scripts[:half])
    added = extend_tokenizer(tok, words)
    after = tokens_per_text(tok, scripts[half:])
    roundtrip = all(tok.decode(tok(s, add_special_tokens=False)["input_ids"]) == s for s in scripts[half:])
    return {"script_format": "codec",
            "tokens_per_script_before": before, "tokens_per_script_after": after, "added_tokens": added,
            "saving": 1 - after / before, "roundtrip_after": roundtrip, "scripts_measured": len(scripts) - half}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--per-workload", type=int, default=6)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--tokenizer", action="store_true", help="also measure SmolLM2 tokenizer extension")
    ap.add_argument("--out", help="write the results JSON here")
    a = ap.parse_args()
    results: dict = {"machine": f"{os.cpu_count()} CPU cores", "steps": a.steps, "variants": []}
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        make_data(folder, a.per_workload)
        for name in a.variants:
            res = run_variant(folder, name, a.steps)
            print(json.dumps(res), flush=True)
            results["variants"].append(res)
    if a.tokenizer:
        results["smollm2_tokenizer"] = tokenizer_measure()
        print(json.dumps(results["smollm2_tokenizer"]), flush=True)
    if a.out:
        from little_dragon.atomic import write_json

        write_json(a.out, results)


if __name__ == "__main__":
    main()
