"""`ann` under the constraint (issue 16, session 33): MetaSchedule's annotation keys only, each at the place (the root
block, another block, a loop) and for the targets MetaSchedule writes it (``grammar_line.ANNOTATION_PLACES``), `ann ..
cat` with the keys it samples only, and no block annotated again with a key it carries.  TVM annotates anything with any key; session 32's H100 A/B had an attempt write `ann l5 successivlycyclec []`,
`ann l8 minthreads 32` and `ann b1 maxthreads 1024` five times until the step cap cut it, its row the batch's last
for 764 of 2,150 steps; with the keys alone narrowed, session 33's sealed run had attempts walk the table on a block
of a CUDA kernel (`ann b3 unroll cat ..`, `preproc cat`, `producer cat`, `minthreads cat`, `parallel cat`).  Every `ann` of the H200, t64 and llvm
harvests is one of the table's keys at its place and target, and none on a block that carries the key (the real-records tests accept every record token by token).

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


def test_the_places_cover_the_codecs_table():
    from little_dragon.codec.kinds import KEY_ABBREV
    from little_dragon.generation.grammar_line import ANNOTATION_PLACES, CATEGORICAL_KEYS, keys_at

    assert set(ANNOTATION_PLACES) == set(KEY_ABBREV) and set(CATEGORICAL_KEYS) <= set(KEY_ABBREV)
    assert keys_at("root", cpu=False) == ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")
    assert "meta_schedule.unroll_explicit" in keys_at("block", cpu=False)
    assert "meta_schedule.parallel" not in keys_at("block", cpu=True)
    assert "meta_schedule.parallel" in keys_at("root", cpu=True)
    assert "meta_schedule.cooperative_fetch" in keys_at("block", cpu=False)
    assert "meta_schedule.cooperative_fetch" not in keys_at("block", cpu=True)
    assert "software_pipeline_stage" in keys_at("loop", cpu=False)


def test_an_unknown_key_and_a_block_key_on_a_loop_are_refused_though_tvm_applies_them(engine, smollm2):
    """After the real tiling annotation: `ann l<k> successivlycyclec []` (no key MetaSchedule writes) and
    `ann l<k> minthreads 32` (a block's key on a loop) are refused, TVM applies both; the loop's own keys
    (`ann l<k> max_step 16`; the pipeline's `stage` on a loop whose body is a sequence: [pipeline body]) and the
    block's keys it does not carry (`ann b<k> minthreads 32`) stay allowed."""
    checked = 0
    for mod, wl, head, k in _after_real_ann(2):
        head += f"loops b{k} {prefix_state(mod, head).n_loops_above[k]}\n"  # the block's loops, as the records do
        st = prefix_state(mod, head)
        loop = min(st.loops)
        for bad in (f"ann l{loop} successivlycyclec []\n", f"ann l{loop} minthreads 32\n",
                    f"ann b{k} onaversec 2\n"):
            assert not allowed_by_mask(engine, wl, smollm2, head + bad), bad
            assert tvm_accepts(mod, head + bad), f"TVM applies {bad!r}: the rule is the constraint's"
        sequences = sorted(set(st.loops) - st.loop_unsequenced)
        piped = (f"ann l{sequences[0]} stage [0 0 2]\n",) if sequences else ()
        for good in (f"ann l{loop} max_step 16\n", f"ann b{k} minthreads 32\n", f"ann b{k} fetch cat lanes = 1\n",
                     *piped):
            assert allowed_by_mask(engine, wl, smollm2, head + good), good
        checked += 1
    assert checked == 2


def test_the_root_takes_one_unroll_key_and_no_table_walk(engine, smollm2):
    """On a CUDA kernel: `ann <root> unroll cat unroll_gpu = 1` is allowed (and on another block: TVM post-processes it
    there, and correct attempts do it), a key of another place or target on the root (`preproc`, `parallel`,
    `minthreads`) is refused, as is a block's key sampled (`ann b<k> minthreads cat ..`, the sealed run's walk); once the
    root carries `unroll`, `unroll_implicit` (MetaSchedule writes one of the two) is refused too.  TVM applies them
    all."""
    mod, wl, head, k = next(_after_real_ann(1))
    (root,) = prefix_state(mod, head).root_blocks
    unroll = head + f"ann b{root} unroll cat unroll_gpu = 1\n"
    assert allowed_by_mask(engine, wl, smollm2, unroll)
    assert allowed_by_mask(engine, wl, smollm2, head + f"ann b{k} unroll cat unroll_gpu = 1\n")
    for bad in (f"ann b{root} preproc cat unroll_gpu = 1\n", f"ann b{root} parallel 1\n",
                f"ann b{root} minthreads 32\n", f"ann b{k} minthreads cat unroll_gpu = 1\n",
                f"ann b{k} preproc cat unroll_gpu = 1\n"):
        assert not allowed_by_mask(engine, wl, smollm2, head + bad), bad
        assert tvm_accepts(mod, head + bad), bad
    again = unroll + f"ann b{root} unroll_implicit cat unroll_gpu = 2\n"
    assert not allowed_by_mask(engine, wl, smollm2, again) and tvm_accepts(mod, again)


def test_a_block_is_not_annotated_again_with_a_key_it_carries(engine, smollm2):
    """Right after the real `ann b<k> tiling ..`: the state has the key on the block, and `ann b<k> tiling ..` again
    (TVM overwrites it) is refused, in every form the decoder reads the key in (`tiling`, `.tiling_structure`, quoted:
    the line grammar has the encoder's word only), and so is its fold with `cat`; a key the block does not carry yet
    stays allowed."""
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
        assert not allowed_by_mask(engine, wl, smollm2, head + f'ann b{k} "meta_schedule.thread_extent_high_inclusive" 1024\n')
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


def test_on_a_cpu_the_codecs_rules_stay(engine, smollm2):
    """On an llvm workload the annotation-key and move-once rules do not hold (``grammar_line._gpu_once_rules``: the tiny
    model's correct CPU attempts rely on what they forbid): after the committed llvm record's tiling annotation, the same
    key again, a key of no place (`onaversec`) and `parallel` on that block (not the root) are allowed."""
    for _, mod, wl, head, line in real_prefixes(DATA / "real_llvm_db", ("ann ",), 10):
        m = re.match(r"ann b(\d+) tiling ", line)
        if m:
            break
    else:
        raise AssertionError("the committed llvm database has a tiling annotation")
    k, head = int(m.group(1)), head + line + "\n"
    assert "llvm" in str(wl.target), wl.target
    for text in (f'ann b{k} tiling "SSRSRS"\n', f"ann b{k} onaversec 2\n", f"ann b{k} parallel 64\n"):
        assert allowed_by_mask(engine, wl, smollm2, head + text), text


def test_a_loop_is_not_annotated_again_with_a_key_it_carries(engine, smollm2):
    """After the committed SIMT record's real `ann l<k> stage ..` and `ann l<k> order ..`: the state has both keys on
    the loop, and `ann l<k> order ..` again (TVM overwrites it; session 40's sealed attempt wrote it four times) is
    refused in every form the decoder reads the key in; the key the loop does not carry yet (`async`, the record's next
    line) and another loop's `order` stay allowed (one whose body is a sequence: [pipeline body]).  Before the first
    loop key, every such loop takes every loop key."""
    from little_dragon.generation.grammar_line import key_forms

    prefixes = list(real_prefixes(DATA / "real_cuda_simt_db", ("ann l",), 3))
    _, mod, wl, head, line = prefixes[2]
    assert line.startswith("ann l") and " async " in line, line
    k = int(line.split()[1][1:])
    st = prefix_state(mod, head)
    assert {"software_pipeline_stage", "software_pipeline_order"} <= st.annotations[f"l{k}"]
    other = max(set(st.loops) - {k} - st.loop_unsequenced)
    for form in key_forms("software_pipeline_order"):
        again = head + f"ann l{k} {form} [0 1 2]\n"
        assert not allowed_by_mask(engine, wl, smollm2, again), again
        assert tvm_accepts(mod, again), again
    assert allowed_by_mask(engine, wl, smollm2, head + line + "\n")
    assert allowed_by_mask(engine, wl, smollm2, head + f"ann l{other} order [0 1 2]\n")
    _, _, _, first, stage = prefixes[0]
    assert allowed_by_mask(engine, wl, smollm2, first + f"ann l{other} stage [0 0 2]\n")
    assert allowed_by_mask(engine, wl, smollm2, first + stage + "\n")
