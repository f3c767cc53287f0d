"""Session 39: what the H100 A/B's VerifyGPUCode refusals at `post *` are (16 of call 6's 110 line retries, 46 of call
9's 100).  The two stored retry examples of call 9 (`h100-s39/ab_call9.json`; their prefix starts with `blk matmul`,
which the example's four context lines leave out) on the bench's matmul prompt 8, from the repository root after
`h200_prepare.sh` built the CUDA split:
    .venv/bin/python results/constrained-decoding/cpu-s39/verify_gpu_shared.py
For each: the verdict of `post *` on the H100's target, on the target with 1 GiB of shared memory a thread block (it
passes: the shared memory is the reason), and the kernel's shared memory as VerifyGPUCode lowers it (its pass list, then
``verify_gpu_code`` with only ``max_shared_memory_per_block``, bisected), without and with the pipeline's `ann .. stage`
lines.  Output: verify_gpu_shared.txt."""
import json
import random
import sys

sys.path.insert(0, "src")
import tvm  # noqa: E402

from little_dragon import codec  # noqa: E402
from little_dragon.codec.postproc import PostprocContext  # noqa: E402
from little_dragon.generation import constrained as C  # noqa: E402
from little_dragon.generation.constrain_state import replay  # noqa: E402
from little_dragon.generation.schedule_worker import finish_check  # noqa: E402


def lowered(func, target):
    """VerifyGPUCode's pass list (``src/s_tir/meta_schedule/postproc/verify_gpu_code.cc``) on one function: the
    constraint's own since ea3ffbf (``tvmx.verify_gpu.lowered`` since session 43)."""
    from little_dragon.tvmx.verify_gpu import lowered as _lowered

    return _lowered(func, target)


def shared_bytes(func) -> int:
    """The least ``max_shared_memory_per_block`` ``verify_gpu_code`` accepts ``func`` under."""
    from tvm.s_tir.analysis import verify_gpu_code

    lo, hi = 0, 1 << 24
    while lo < hi:
        mid = (lo + hi) // 2
        if verify_gpu_code(func, {"max_shared_memory_per_block": mid}):
            hi = mid
        else:
            lo = mid + 1
    return lo


def main() -> None:
    stats = json.load(open("results/constrained-decoding/h100-s39/ab_call9.json"))["ab"]["arms"][
        "constrained+shared_prefix+retries4+back24+process4"]["stats"]
    scripts = ["blk matmul\n" + e.replace("~~~ taken back:\n", "") + "\n"
               for k, v in stats["retry_examples"].items() if "VerifyGPUCode" in k for e in v]
    rows = [json.loads(line) for line in open(".devcarry/cudads/datasets/validation.jsonl") if line.strip()]
    kind = (lambda t: (json.loads(t) if isinstance(t, str) else t).get("kind"))
    rows = [r for r in rows if kind(r["target"]) == "cuda"]
    random.Random(0).shuffle(rows)
    row = rows[8]
    wl = C.workload_of_prompt(row["prompt"])
    t = json.loads(row["target"]) if isinstance(row["target"], str) else dict(row["target"])
    big = PostprocContext(wl.mod, tvm.target.Target({**t, "max_shared_memory_per_block": 1 << 30}))
    for j, s in enumerate(scripts):
        print(f"script {j}: {s.splitlines()[4:7]}")
        print("  post * (H100 target):", finish_check(wl.mod, wl.post_context, s + "post *\n", None)[:110])
        print("  post * (1 GiB shared):", repr(finish_check(wl.mod, big, s + "post *\n", None)[:110]))
        for label, text in (("without the stage lines", "".join(x + "\n" for x in s.splitlines()
                                                                 if not x.startswith(("ann l33 stage", "ann l32 stage",
                                                                                      "ann l33 order", "ann l32 order",
                                                                                      "ann l33 async", "ann l32 async")))),
                            ("as written", s)):
            sch = replay(wl.mod, codec.decode(text, codec.SyntaxOnlyContext()))
            func = next(iter(sch.sch.mod.functions.values()))
            print(f"  shared memory {label}: {shared_bytes(lowered(func, tvm.target.Target(t)))} bytes "
                  f"(the target's limit {t['max_shared_memory_per_block']})")


if __name__ == "__main__":
    main()
