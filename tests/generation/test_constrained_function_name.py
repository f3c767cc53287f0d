"""`fn=` of a `blk` line (the function GetSBlock looks in) is a string.  The codec reads any value there, and TVM's
GetSBlock ends the process (SIGSEGV) on a list: session 24's CPU sealed runs lost 6-12 attempts a run to
`blk T_rms_norm fn=[23_truenan93_trueinf_trueinffalse_truenan14 11]` and the like, each a crash of the constraint's
worker (found by logging the worker's requests in process).

Real parts: TVM's real segfault in the constraint's worker process, the codec, llguidance over SmolLM2's tokenizer.
"""
from __future__ import annotations

import json

from dragon_testkit import allowed_by_mask, prim_module, tvm_accepts

CRASHER = "blk B fn=[23_truenan93 11]\n"


def _module():
    from tvm import te

    a = te.placeholder((64,), name="A")
    return prim_module([a, te.compute((64,), lambda i: a[i] * 2.0, name="B")])


def test_a_list_as_the_function_name_crashes_tvm_and_is_masked(engine, smollm2):
    import pytest

    from little_dragon.generation.constrained import Workload, _decode
    from little_dragon.generation.schedule_worker import ScheduleWorker, TVMCrashed

    mod = _module()
    wl = Workload(mod, json.dumps({"kind": "llvm", "num-cores": 2}))
    w = ScheduleWorker()
    try:
        with pytest.raises(TVMCrashed):
            w.state(wl.key, mod, CRASHER, _decode(CRASHER))
    finally:
        w.close()
    assert not allowed_by_mask(engine, wl, smollm2, CRASHER)
    for value in ("false", "3", "main"):  # not a string: the codec or TVM refuses them
        assert not allowed_by_mask(engine, wl, smollm2, f"blk B fn={value}\n"), value
    assert allowed_by_mask(engine, wl, smollm2, 'blk B fn="main"\n') and tvm_accepts(mod, 'blk B fn="main"\n')
