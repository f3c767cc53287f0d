"""What the replays share (run from the repository root, after `h200_prepare.sh` built the CUDA split):
the bench's 16 CUDA validation prompts in its order (seed 0), and prompt 15's attempt 4 (`p15a4.txt`)."""
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, "src")
ROWS = ".devcarry/cudads/datasets/validation.jsonl"
P15A4 = Path(__file__).with_name("p15a4.txt")
TOKENIZER = sys.argv[2] if len(sys.argv) > 2 else "artifacts/sft/model"  # any SmolLM2 tokenizer folder


def cuda_rows() -> list[dict]:
    rows = [json.loads(line) for line in open(ROWS) if line.strip()]
    kind = (lambda t: (json.loads(t) if isinstance(t, str) else t).get("kind"))
    rows = [r for r in rows if kind(r["target"]) == "cuda"]
    random.Random(0).shuffle(rows)
    return rows
