"""Session 42: what the H100 A/B's VerifyGPUCode refusals at `post *` are (45 of the 91 line retries of every
constrained arm of calls 3, 4 and 7: the same draws).  The arms store two examples of the reason, whole scripts since
63a8288 (`h100-s42/ab_call4.json`).  From the repository root after `h200_prepare.sh` built the CUDA split:
    .venv/bin/python results/constrained-decoding/cpu-s42/verify_gpu_examples.py
For each example: the validation prompt whose kernel it replays on, the verdict of `post *` on the H100's target, on
that target with 1 GiB of shared memory a thread block, and the kernel's shared memory as VerifyGPUCode lowers it
(cpu-s39's bisection), without and with the software pipeline's `ann lK stage/order/async` lines, VerifyGPUCode's
other limits alone, what [shared memory] (off by default) says at the pipeline's `order` line, and `post *` without
the pipeline's lines or with its `stage` line alone.  Output:
verify_gpu_examples.txt."""
import json
import re
import sys

sys.path.insert(0, "src")
sys.path.insert(0, "results/constrained-decoding/cpu-s39")
import tvm  # noqa: E402
from tvm.s_tir.analysis import verify_gpu_code  # noqa: E402
from verify_gpu_shared import lowered, shared_bytes  # noqa: E402

from little_dragon import codec  # noqa: E402
from little_dragon.codec.postproc import PostprocContext  # noqa: E402
from little_dragon.generation import constrained as C  # noqa: E402
from little_dragon.generation.constrain_state import replay  # noqa: E402
from little_dragon.generation.schedule_worker import finish_check  # noqa: E402
from little_dragon.generation.shared_memory import gives_pipeline, shared_memory_over  # noqa: E402

PIPELINE = re.compile(r"ann l\d+ (stage|order|async) ")


def main(files: tuple[str, ...] = ("results/constrained-decoding/h100-s42/ab_call4.json",)) -> None:
    """Trace the stored VerifyGPUCode examples of every arm of the A/B outputs ``files`` (session 43 passes its own;
    a script without a software pipeline skips the pipeline's lines, a lowering that raises is printed)."""
    arms = [a for f in files for a in json.load(open(f))["ab"]["arms"].values()]
    scripts = []
    for arm in arms:
        for k, v in (arm.get("stats") or {}).get("retry_examples", {}).items():
            if k.startswith("post:") and "VerifyGPUCode" in k:  # not [shared memory]'s own ("shared:")
                scripts += [e.replace("~~~ taken back:\n", "") + "\n" for e in v if e not in scripts]
    scripts = list(dict.fromkeys(scripts))
    rows = [json.loads(line) for line in open(".devcarry/cudads/datasets/validation.jsonl") if line.strip()]
    kind = (lambda t: (json.loads(t) if isinstance(t, str) else t).get("kind"))
    rows = [r for r in rows if kind(r["target"]) == "cuda"]
    print(f"{len(scripts)} distinct stored examples of the reason")
    workloads = {}
    for r in rows:
        wl = C.workload_of_prompt(r["prompt"])
        if wl is not None:
            workloads.setdefault(wl.key, (wl, r))
    for j, s in enumerate(scripts):
        # the prompt: a kernel the script replays on whose `post *` VerifyGPUCode refuses (a tile line's factors need not
        # divide another kernel's loops: TVM's split then adds a predicate, so several kernels may replay it)
        found = []
        for wl, r in workloads.values():
            try:
                replay(wl.mod, codec.decode(s, codec.SyntaxOnlyContext()))
            except Exception:  # noqa: BLE001 - not this prompt's kernel
                continue
            found.append((wl, r, finish_check(wl.mod, wl.post_context, s + "post *\n", None)))
        print(f"script {j}: replays on {len(found)} validation kernels; `post *` there: "
              f"{[(f'{w.key[0]:#x}', why[:60]) for w, _, why in found]}")
        found = [f for f in found if "VerifyGPUCode" in f[2]]
        if not found:
            continue
        wl, r, _ = found[0]
        t = json.loads(r["target"]) if isinstance(r["target"], str) else dict(r["target"])
        big = PostprocContext(wl.mod, tvm.target.Target({**t, "max_shared_memory_per_block": 1 << 30}))
        print(f"script {j} ({len(s.splitlines())} lines, kernel {wl.key[0]:#x}): "
              f"{[x for x in s.splitlines() if x.startswith('tile ')]}")
        print("  post * (H100 target):", finish_check(wl.mod, wl.post_context, s + "post *\n", None)[:160])
        print("  post * (1 GiB shared):", repr(finish_check(wl.mod, big, s + "post *\n", None)[:160]))
        # [shared memory] (``shared_memory.shared_memory_over``, off by default since session 40) at the pipeline's
        # `order` line: the lines up to it, replayed, lowered and measured as the rule measures them
        lines = s.splitlines(keepends=True)
        at = next((i for i, x in enumerate(lines) if gives_pipeline(x) and " order " in x), len(lines) - 1)
        sch = replay(wl.mod, codec.decode("".join(lines[:at + 1]), codec.SyntaxOnlyContext()))
        print(f"  [shared memory] at line {at + 1} `{lines[at].strip()}`: "
              f"{shared_memory_over(sch.sch.mod, tvm.target.Target(t))}")
        # what a retry that kept the tiling would need to take back: `post *` without the pipeline's lines, and with its
        # `stage` line kept
        for label, drop in (("without its stage, order and async lines", PIPELINE),
                            ("with its stage line only (order and async dropped)", re.compile(r"ann l\d+ (order|async) "))):
            kept = "".join(x for x in s.splitlines(keepends=True) if not drop.match(x)) + "post *\n"
            print(f"  post * {label}: {finish_check(wl.mod, wl.post_context, kept, None)[:110]!r}")
        for label, text in (("without the pipeline lines", "".join(x + "\n" for x in s.splitlines()
                                                                    if not PIPELINE.match(x + " "))),
                            ("as written", s)):
            sch = replay(wl.mod, codec.decode(text, codec.SyntaxOnlyContext()))
            func = next(iter(sch.sch.mod.functions.values()))
            try:
                low = lowered(func, tvm.target.Target(t))
            except Exception as e:  # noqa: BLE001 - VerifyGPUCode's lowering raised: it refuses for that
                print(f"  lowering {label}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
                continue
            print(f"  shared memory {label}: {shared_bytes(low)} bytes "
                  f"(the target's limit {t['max_shared_memory_per_block']})")
            # VerifyGPUCode's other limits (src/s_tir/meta_schedule/postproc/verify_gpu_code.cc), each alone
            for name, limit in (("max_threads_per_block", t["max_threads_per_block"]), ("max_vthread", 8),
                                ("max_vector_bytes", 16)):
                print(f"    {name} {limit}: {'passes' if verify_gpu_code(low, {name: limit}) else 'REFUSED'}")


if __name__ == "__main__":
    main()
