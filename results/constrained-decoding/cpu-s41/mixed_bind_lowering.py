"""Session 41: the sealed wrong result of the H100 constrained run (call 4, `pool2d` refinement b4746f1f71a1a6da attempt
7), replayed and lowered on the CPU (no GPU: TVM's passes up to code generation).  Prints the scheduled pool_sum block
(one fused loop of a channel iter and a window iter bound to threadIdx.y) and the lowered kernel's cross-thread
reduction (one sum over all 392 threads, written to pool_sum_shared[0] only).  From the repository root, with data/
pulled:
    .venv/bin/python results/constrained-decoding/cpu-s41/mixed_bind_lowering.py
"""
import io
import re
import tarfile
from pathlib import Path

import pandas as pd

from little_dragon.codec.roundtrip import read_database
from little_dragon.evaluator.replay import replay
from little_dragon.evaluator.script import decode_script_lines
from little_dragon.tvmx.build import lower_for_target
from little_dragon.tvmx.postprocs import as_target, target_postprocs

HERE = Path(__file__).resolve().parent
with tarfile.open(HERE.parent / "h100-s41" / "eval_call4.tar.gz") as tar:
    attempts = pd.read_parquet(io.BytesIO(tar.extractfile("eval/attempts.parquet").read()))
row = attempts[(attempts.prompt_id == "b4746f1f71a1a6da") & (attempts.category == "wrong_result")].iloc[0]
print("message:", row.message)
(_, mod, recs), = read_database(Path("data/harvest/cuda-sm_90-6e5dd8/db") / row.workload_id)
target = as_target(recs[0][2])
trace_json, lines = decode_script_lines(row.script)
scheduled = replay(mod, trace_json, target_postprocs(mod, target), lines=lines, text=row.script).sch.mod
text = scheduled.script()
print("\n".join(line for line in text.splitlines() if "thread_binding" in line or "T.axis" in line)[:2000])
_, device = lower_for_target(scheduled, target)
kernel = device[0].script()
print("\n".join(line for line in kernel.splitlines()
                if re.search(r"red_buf0\[threadIdx_z \* 56 \+ threadIdx_y\] = T.Cast|pool_sum_shared\[\d\] =", line)))
print("pool_sum_shared elements written:", sorted(set(re.findall(r"pool_sum_shared\[(\d)\] =", kernel))),
      "of 8 read:", sorted(set(re.findall(r"pool_sum_shared\[(\d)\] /", kernel))))

# the constraint's view at each `bind` line of the attempt (session 41's [mixed loop] rule, ``ScheduleState.loop_mixed``)
from little_dragon import codec  # noqa: E402
from little_dragon.generation.constrain_state import live_state, replay as replay_prefix  # noqa: E402

script_lines = row.script.splitlines()
for i, line in enumerate(script_lines):
    if line.startswith("bind "):
        head = "".join(x + "\n" for x in script_lines[:i])
        st = live_state(replay_prefix(mod, codec.decode(head, codec.SyntaxOnlyContext())))
        k = int(line.split()[1][1:])
        print(f"line {i + 1} `{line}`: loop l{k} kind {st.loop_iters.get(k)}, mixed {k in st.loop_mixed}")
