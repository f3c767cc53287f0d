"""Group splits: deterministic for a seed, near-duplicates never straddle, families held out whole."""
from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from little_dragon.datasets.config import DatasetsConfig
from little_dragon.datasets.split import LeakageError, assign_splits, check_no_leakage, group_key, shape_class


def _store(n_per_family: int = 40, seed: int = 0) -> pd.DataFrame:
    """A workload table with the store's split-relevant columns: many families and shapes, with twins."""
    rng = random.Random(seed)
    rows = []
    for fam in ("dense", "softmax", "conv2d_nchw", "layer_norm", "rms_norm"):
        for i in range(n_per_family):
            shapes = {"m": rng.choice([16, 32, 64, 128, 256, 512, 1024]), "n": rng.choice([64, 128, 768]),
                      "act": rng.choice(["relu", "gelu"])}
            for dtype in ("float32", "float16"):  # the same shape in two dtypes: near-duplicates
                h = str(rng.getrandbits(62))
                rows.append({"workload_id": f"w{int(h) % (1 << 64):016x}", "family": fam, "dtype": dtype,
                             "shapes": json.dumps(shapes), "structural_hash": h})
    return pd.DataFrame(rows).drop_duplicates("workload_id")


def test_shape_class_buckets_integers_and_ignores_options():
    assert shape_class('{"m": 64, "n": 65, "act": "gelu"}') == shape_class('{"m": 60, "n": 70, "act": "relu"}')
    assert shape_class('{"m": 64}') != shape_class('{"m": 256}')
    assert group_key({"family": "graph:gpt2", "shapes": "{}", "structural_hash": "7"}) == "graph:gpt2|#7"


def test_split_is_deterministic_for_a_seed_and_changes_with_it():
    wl = _store()
    cfg = DatasetsConfig(seed=3)
    a, b = assign_splits(wl, cfg), assign_splits(wl.sample(frac=1.0, random_state=1), cfg)
    pd.testing.assert_frame_equal(a, b)  # same seed: same split, whatever the store order
    c = assign_splits(wl, DatasetsConfig(seed=4))
    assert (a["split"] != c["split"]).any()


def test_groups_never_straddle_and_heldout_families_go_whole():
    wl = _store()
    cfg = DatasetsConfig(heldout_families=["rms_norm"], sealed_fraction=0.2, validation_fraction=0.1)
    s = assign_splits(wl, cfg)
    assert s.groupby("group")["split"].nunique().max() == 1
    assert set(s.loc[s["family"] == "rms_norm", "split"]) == {"heldout_family"}
    assert "heldout_family" not in set(s.loc[s["family"] != "rms_norm", "split"])
    groups = s[s["family"] != "rms_norm"].drop_duplicates("group")["split"].value_counts(normalize=True)
    assert groups["sealed"] == pytest.approx(0.2, abs=0.02) and groups["validation"] == pytest.approx(0.1, abs=0.02)
    # twins (same shapes, other dtype) share a split
    merged = s.merge(wl[["workload_id", "dtype", "shapes"]], on="workload_id")
    assert merged.groupby(["family", "shapes"])["split"].nunique().max() == 1


def test_few_groups_still_fill_every_split():
    wl = _store(n_per_family=1)
    s = assign_splits(wl, DatasetsConfig(heldout_families=[]))
    assert {"train", "validation", "sealed"} <= set(s["split"])


def test_leakage_check_catches_a_planted_sealed_workload_and_near_duplicate():
    wl = _store()
    s = assign_splits(wl, DatasetsConfig())
    sealed = s[s["split"].isin(["sealed", "heldout_family"])]
    manifest = {"workloads": sealed[["structural_hash", "workload_id", "group"]].to_dict("records")}
    train = s[s["split"] == "train"]
    check_no_leakage(train, manifest, "train")  # the real split is clean
    planted = pd.concat([train, sealed.head(1)])
    with pytest.raises(LeakageError, match=f"structural hash.*{sealed.iloc[0]['workload_id']}"):
        check_no_leakage(planted, manifest, "train")
    twin = sealed.head(1).assign(workload_id="w" + "f" * 16, structural_hash="123")  # other kernel, same group
    with pytest.raises(LeakageError, match="share a sealed group"):
        check_no_leakage(pd.concat([train, twin]), manifest, "train")
