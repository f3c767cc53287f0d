"""Renamed copies of training rows stay real examples: the renamed script applies to the renamed kernel."""
from __future__ import annotations

import random

from little_dragon.training.augment import block_names, rename, renamed_row, with_renamed_copies
from little_dragon.datasets.validity import check_script


def test_renamed_rows_apply_to_their_renamed_kernels(standin_rows):
    rng = random.Random(0)
    for row in standin_rows:
        new = renamed_row(row, rng)
        assert new is not None, row["workload_id"]
        old_names = block_names(row["tvmscript"])
        new_names = block_names(new["tvmscript"])
        assert len(new_names) == len(old_names) and not set(new_names) & set(old_names)
        for name in old_names:  # gone from kernel, prompt and script (derived names such as X_update too)
            for key in ("tvmscript", "prompt", "completion"):
                assert f'"{name}"' not in new[key] and f"blk {name}\n" not in new[key], (name, key)
        assert new["tvmscript"] in new["prompt"]
        verdict = check_script(new["completion"], new)  # decodes and applies with TVM on the renamed kernel
        assert verdict.valid, (row["workload_id"], verdict.error)
        assert new["structural_hash"] is None and new["renamed_from"] == row["workload_id"]
        # the original row is untouched
        assert check_script(row["completion"], row).valid


def test_rename_takes_whole_identifiers_and_derived_stems_longest_first():
    text = 'T.sblock("C") C[i] = C_1[i] + T.C\nblk C_update\nblk C_1\nblk CC\n'
    out = rename(text, {"C": "acc_x1", "C_1": "tmp_y2"})
    assert out == 'T.sblock("acc_x1") acc_x1[i] = tmp_y2[i] + T.C\nblk acc_x1_update\nblk tmp_y2\nblk CC\n'


def test_copies_are_deterministic_and_counted(standin_rows):
    rows = standin_rows[:5]
    a = with_renamed_copies(rows, 2, seed=3)
    b = with_renamed_copies(rows, 2, seed=3)
    assert len(a) == 15 and a == b
    assert sum("renamed_from" in r for r in a) == 10
    assert with_renamed_copies(rows, 0, seed=3) == rows
