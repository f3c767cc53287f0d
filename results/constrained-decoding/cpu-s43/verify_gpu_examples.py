"""Session 43: what the H100 A/B's VerifyGPUCode refusals at `post *` are (19-27 line retries of every constrained arm,
with [shared memory] on or off: the rule caught only 2 a run).  The examples are every arm's stored ones
(`h100-s43/ab_call3.json`, `ab_call4.json`), traced as session 42's were (`cpu-s42/verify_gpu_examples.py`); a script
without a software pipeline skips the pipeline's lines.  From the repository root after `h200_prepare.sh` built the
CUDA split:
    .venv/bin/python results/constrained-decoding/cpu-s43/verify_gpu_examples.py
Output: verify_gpu_examples.txt."""
import sys

sys.path.insert(0, "results/constrained-decoding/cpu-s42")
from verify_gpu_examples import main  # noqa: E402  session 42's tracer, on this session's files

if __name__ == "__main__":
    main(tuple(f"results/constrained-decoding/h100-s43/{f}.json" for f in ("ab_call3", "ab_call4")))
