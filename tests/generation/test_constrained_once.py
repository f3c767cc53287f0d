"""`tile` and `blayout` under the constraint (issue 16): a loop a `tile` line made is not tiled again, a block `blayout`
transformed is not transformed again.  TVM tiles a tile's loops again
and again (its unit loops as `tile lK = 1 1 1`), and session 29's H100 A/B had an attempt write 81 `tile` lines until the
token budget cut it; its row, and so the engine call, ran to the step cap; another wrote the same `blayout b0` 17 times.
MetaSchedule tiles each loop once and transforms a block's layout once (the real-records tests accept every record
token by token; the H200 and CPU harvests' 3,838 perfect-tile splits never split a loop an earlier one made, and their
1,792 TransformBlockLayout never take a block twice).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM's verdicts on a fresh
schedule, llguidance.
"""
from __future__ import annotations

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, model_script_lines, prefix_state, real_records, tvm_accepts


def _real_lines(kind: str, limit: int):
    """(module, ``Workload``, the record's script lines before it, the line, the next line) for the first ``limit``
    lines of the committed CUDA database that start with ``kind`` and have a line after them."""
    from little_dragon.generation.constrained import Workload

    n = 0
    for _, mod, target, tj in real_records(DATA / "real_cuda_db"):
        lines = model_script_lines(tj)
        for i, line in enumerate(lines[:-1]):
            if line.startswith(kind) and n < limit:
                n += 1
                yield mod, Workload(mod, target), "".join(x + "\n" for x in lines[:i]), line, lines[i + 1]


def test_a_loop_a_tile_made_is_not_tiled_again(engine, smollm2):
    """Right after each real `tile` line: every loop it made is out of the `tile` kind (`tile l = extent 1`,
    which TVM accepts), while the record's next line -- the next loop's `tile` inside a tiling -- is still allowed; the
    state names exactly the tiles' loops."""
    tiled_refused = accepted_by_tvm = next_allowed = 0
    for mod, wl, head, line, following in _real_lines("tile", 6):
        before = prefix_state(mod, head)
        head += line + "\n"
        st = prefix_state(mod, head)
        made = sorted(set(st.loops) - set(before.loops))
        assert made and set(made) <= st.loop_tiled and before.loop_tiled <= st.loop_tiled, (line, made)
        assert st.loop_tiled == before.loop_tiled | set(made)
        for m in made[:2]:
            attempt = head + f"tile l{m} = {st.loops[m]} 1\n"
            assert not allowed_by_mask(engine, wl, smollm2, attempt), (line, m)
            tiled_refused += 1
            accepted_by_tvm += tvm_accepts(mod, attempt)
        if following.startswith("tile"):
            assert allowed_by_mask(engine, wl, smollm2, head + following + "\n"), (line, following)
            next_allowed += 1
    assert tiled_refused and next_allowed, (tiled_refused, next_allowed)
    assert accepted_by_tvm, "TVM tiles a tile's loop again: the rule is the constraint's, not a TVM refusal"


def test_a_block_blayout_transformed_is_not_transformed_again(engine, smollm2):
    """Right after each real `blayout` line: the same line again (which TVM applies) is refused, the block is in the
    state's ``block_relaid``, and the record's next line is still allowed."""
    import re

    again = accepted_by_tvm = next_allowed = 0
    for mod, wl, head, line, following in _real_lines("blayout", 6):
        head += line + "\n"
        st = prefix_state(mod, head)
        k = int(re.match(r"blayout b(\d+) ", line).group(1))
        assert k in st.block_relaid, (line, st.block_relaid)
        assert not allowed_by_mask(engine, wl, smollm2, head + line + "\n"), line
        again += 1
        accepted_by_tvm += tvm_accepts(mod, head + line + "\n")
        assert allowed_by_mask(engine, wl, smollm2, head + following + "\n"), (line, following)
        next_allowed += 1
    assert again and next_allowed, (again, next_allowed)
    assert accepted_by_tvm, "TVM transforms a block's layout again: the rule is the constraint's, not a TVM refusal"


def test_a_block_an_at_line_moved_is_not_moved_again(engine, smollm2):
    """Right after each real `at b l` / `rat b l` line: the block is in the state's ``block_moved``; moving it again,
    to another loop its compute-at checks take (which TVM applies) or by `at b = k`, is refused; the record's next line
    is still allowed.  MetaSchedule moves a block once (1,911 harvest traces); session 32's H100 A/B had an attempt move
    one cache block five times."""
    import re

    again = accepted_by_tvm = next_allowed = 0
    for kind in ("at", "rat"):
        for mod, wl, head, line, following in _real_lines(kind + " ", 3):
            m = re.match(r"r?at b(\d+) l(\d+)$", line)
            if not m:
                continue
            k, used = int(m.group(1)), int(m.group(2))
            before = prefix_state(mod, head)
            table = before.compute_at if kind == "at" else before.reverse_compute_at
            head += line + "\n"
            st = prefix_state(mod, head)
            assert k in st.block_moved and k not in before.block_moved, (line, st.block_moved)
            others = [lp for lp in (table or {}).get(k, ()) if lp != used and lp in st.loops]
            for lp in others[:2]:
                attempt = head + f"{kind} b{k} l{lp}\n"
                assert not allowed_by_mask(engine, wl, smollm2, attempt), attempt
                again += 1
                accepted_by_tvm += tvm_accepts(mod, attempt)
            assert not allowed_by_mask(engine, wl, smollm2, head + f"at b{k} = 0\n"), line
            assert allowed_by_mask(engine, wl, smollm2, head + following + "\n"), (line, following)
            next_allowed += 1
    assert again and next_allowed, (again, next_allowed)
    assert accepted_by_tvm, "TVM moves a moved block again: the rule is the constraint's, not a TVM refusal"
