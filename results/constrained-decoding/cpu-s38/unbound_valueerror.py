"""Session 38: what RewriteUnboundBlock's "ValueError: Check failed" at `post *` is (34 of 111 line retries and all 8 end
refusals of the H100 A/B's default arm).  On the CUDA split's dense_bias_act workload (the bench's prompt 1), run from the
repository root after `h200_prepare.sh` built the CUDA split:
    .venv/bin/python results/constrained-decoding/cpu-s38/unbound_valueerror.py
A block whose outermost loop is bound to threadIdx with no blockIdx loop: BindBlockThreadIdx fuses the loops outside the
thread loop to bind blockIdx, finds none, and Fuse refuses an empty list."""
import json
import random
import sys

sys.path.insert(0, "src")
from little_dragon.generation import constrained as C  # noqa: E402
from little_dragon.generation.schedule_worker import finish_check  # noqa: E402


def main() -> None:
    rows = [json.loads(line) for line in open(".devcarry/cudads/datasets/validation.jsonl") if line.strip()]
    kind = (lambda t: (json.loads(t) if isinstance(t, str) else t).get("kind"))
    rows = [r for r in rows if kind(r["target"]) == "cuda"]
    random.Random(0).shuffle(rows)
    wl = C.workload_of_prompt(rows[1]["prompt"])
    head = "blk matmul\nblk out\nblk root\n"
    for name, lines in {"out: outer loop tx": "loops b1 2\nsplit l1 _ 32\nbind l0 tx\n",
                        "out: inner loop tx only": "loops b1 2\nsplit l1 _ 32\nbind l3 tx\n",
                        "matmul: outer loop tx": "loops b0 3\nsplit l1 _ 32\nbind l0 tx\n"}.items():
        print(f"{name}: {finish_check(wl.mod, wl.post_context, head + lines + 'post *' + chr(10), None)[:240]!r}")


if __name__ == "__main__":
    main()
