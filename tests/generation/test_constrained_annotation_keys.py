"""`ann` under the constraint (issue 16, session 33): MetaSchedule's annotation keys only, each on the kind of object
MetaSchedule writes it on (``grammar_line.BLOCK_KEYS``, ``LOOP_KEYS``), and no block annotated again with a key it
carries.  TVM annotates anything with any key; session 32's H100 A/B had an attempt write `ann l5 successivlycyclec []`,
`ann l8 minthreads 32` and `ann b1 maxthreads 1024` five times until the step cap cut it, its row the batch's last
for 764 of 2,150 steps.  Every `ann` of the H200, t64 and llvm harvests is one of the table's keys on its kind of
object, and none on a block that carries the key (the real-records tests accept every record token by token).

Real parts only: the committed CUDA MetaSchedule database (tests/codec/data), the codec, TVM's verdicts on a fresh
schedule, llguidance, SmolLM2's tokenizer.
"""
from __future__ import annotations

import re

from dragon_testkit import CODEC_DATA as DATA
from dragon_testkit import allowed_by_mask, prefix_state, real_prefixes, tvm_accepts


def _after_real_ann(limit: int):
    """(module, ``Workload``, the record's script through its `ann b<k> tiling` line, k) of the committed CUDA
    database's first ``limit`` records: the block MetaSchedule's multi-level tiling annotated."""
    for _, mod, wl, head, line in real_prefixes(DATA / "real_cuda_db", ("ann ",), 40):
        m = re.match(r"ann b(\d+) tiling ", line)
        if m and limit > 0:
            limit -= 1
            yield mod, wl, head + line + "\n", int(m.group(1))


def test_mapping_of_keys_is_metaschedules_and_covers_the_codecs_table():
    from little_dragon.codec.kinds import KEY_ABBREV
    from little_dragon.generation.grammar_line import BLOCK_KEYS, LOOP_KEYS

    assert set(BLOCK_KEYS) | set(LOOP_KEYS) == set(KEY_ABBREV) and not set(BLOCK_KEYS) & set(LOOP_KEYS)
    assert "meta_schedule.tiling_structure" in BLOCK_KEYS and "software_pipeline_stage" in LOOP_KEYS


def test_an_unknown_key_and_a_block_key_on_a_loop_are_refused_though_tvm_applies_them(engine, smollm2):
    """After the real tiling annotation: `ann l<k> successivlycyclec []` (no key MetaSchedule writes) and
    `ann l<k> minthreads 32` (a block's key on a loop) are refused, TVM applies both; the loop's own keys
    (`ann l<k> stage [0 0 2]`) and the block's keys it does not carry (`ann b<k> minthreads 32`) stay allowed."""
    checked = 0
    for mod, wl, head, k in _after_real_ann(2):
        head += f"loops b{k} {prefix_state(mod, head).n_loops_above[k]}\n"  # the block's loops, as the records do
        st = prefix_state(mod, head)
        loop = min(st.loops)
        for bad in (f"ann l{loop} successivlycyclec []\n", f"ann l{loop} minthreads 32\n",
                    f"ann b{k} onaversec 2\n"):
            assert not allowed_by_mask(engine, wl, smollm2, head + bad), bad
            assert tvm_accepts(mod, head + bad), f"TVM applies {bad!r}: the rule is the constraint's"
        for good in (f"ann l{loop} stage [0 0 2]\n", f"ann b{k} minthreads 32\n", f"ann b{k} unroll cat unroll_gpu = 1\n"):
            assert allowed_by_mask(engine, wl, smollm2, head + good), good
        checked += 1
    assert checked == 2


def test_a_block_is_not_annotated_again_with_a_key_it_carries(engine, smollm2):
    """Right after the real `ann b<k> tiling ..`: the state has the key on the block, and `ann b<k> tiling ..` again
    (TVM overwrites it) is refused, in every form the decoder reads the key in (`tiling`, `.tiling_structure`, quoted),
    and so is its fold with `cat`; a key the block does not carry yet stays allowed."""
    from little_dragon.generation.grammar_line import key_forms

    checked = 0
    for mod, wl, head, k in _after_real_ann(2):
        st = prefix_state(mod, head)
        assert "meta_schedule.tiling_structure" in st.annotations[f"b{k}"]
        for form in key_forms("meta_schedule.tiling_structure"):
            again = head + f'ann b{k} {form} "SSSRRSRS"\n'
            assert not allowed_by_mask(engine, wl, smollm2, again), again
            assert tvm_accepts(mod, again), again
        assert not allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} tiling cat 1 2 = 0\n")
        assert allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} maxthreads 1024\n")
        checked += 1
    assert checked == 2


def test_the_switch_restores_the_codecs_rules(engine, smollm2, monkeypatch):
    """``constrained.ANNOTATION_AND_MOVE_RULES`` False (the bench's +noannmove arm, the constraint before session 33):
    the unknown key and the block's key again are allowed, as the codec's grammar allows them."""
    from little_dragon.generation import constrained

    mod, wl, head, k = next(_after_real_ann(1))
    monkeypatch.setattr(constrained, "ANNOTATION_AND_MOVE_RULES", False)
    assert allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} onaversec 2\n")
    assert allowed_by_mask(engine, wl, smollm2, head + f'ann b{k} tiling "SSSRRSRS"\n')
