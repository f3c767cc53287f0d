"""`inline` under the constraint (issue 16): TVM's ComputeInline refuses the root block, a block with an init
statement (a reduction) and an output block (one writing a buffer of the function's parameters); the constraint
knows these from the live schedule (``ScheduleState.not_inlinable``). On the H200 (session 10) 4 of the 7
first-pass rejections left were such `inline` lines.

Real parts only: the committed MetaSchedule databases (tests/codec/data), the codec, TVM's verdicts, llguidance.
"""
from __future__ import annotations

import pytest
from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import feed_constraint, prefix_state
from dragon_testkit import model_script_lines as _script
from dragon_testkit import real_records as _records
from dragon_testkit import tvm_accepts


@pytest.mark.parametrize("db", ["real_llvm_db", "real_cuda_db"])
def test_inline_of_a_block_tvm_refuses_for_its_kind_is_masked(engine, smollm2, db):
    """Right before each real record's first `inline` line: for every live block, a masked `inline` is one TVM
    refuses, the blocks masked are exactly the root, reduction and output blocks, and the record's own line is
    allowed; the rule masks something there (it would pass vacuously without it)."""
    from little_dragon.generation.constrained import Workload

    masked = seen = 0
    for _, mod, target, tj in _records(DATA / db):
        lines = _script(tj)
        at = next((i for i, line in enumerate(lines) if line.startswith("inline ")), None)
        if at is None:
            continue
        seen += 1
        head = "".join(x + "\n" for x in lines[:at])
        wl = Workload(mod, target)
        st = prefix_state(mod, head)
        assert feed_constraint(engine, wl, smollm2, head + lines[at] + "\n")[0] is None, lines[at]
        for k in sorted(st.blocks):
            line = f"inline b{k}\n"
            ok = feed_constraint(engine, wl, smollm2, head + line)[0] is None
            assert ok == (k not in st.not_inlinable), (st.blocks[k], line)
            if not ok:
                masked += 1
                assert not tvm_accepts(mod, head + line), (st.blocks[k], line)
    assert seen and masked, (seen, masked)
