"""Training loaders refuse the sealed folder, however it is reached."""
from __future__ import annotations

import pandas as pd
import pytest

from little_dragon.datasets.guard import SEALED_MARKER, SealedDataError, assert_not_sealed, sealed_root_of
from little_dragon.datasets.store import read_examples, write_examples, EXAMPLE_COLUMNS


def _rows(n: int = 2) -> pd.DataFrame:
    return pd.DataFrame([{c: (f"x{i}" if c not in ("prompt_tokens",) else i) for c in EXAMPLE_COLUMNS}
                         for i in range(n)])


def test_guard_refuses_marked_folder_nested_paths_and_symlinks(tmp_path):
    sealed = tmp_path / "sealed"
    (sealed / "sub").mkdir(parents=True)
    (sealed / SEALED_MARKER).write_text("sealed")
    train = tmp_path / "datasets"
    train.mkdir()
    write_examples(sealed / "test", _rows())
    write_examples(train / "train", _rows())
    for p in (sealed / "test.jsonl", sealed / "test.parquet", sealed / "sub" / "x.jsonl", sealed):
        with pytest.raises(SealedDataError, match="sealed evaluation set"):
            assert_not_sealed(p)
    link = tmp_path / "innocent.jsonl"
    link.symlink_to(sealed / "test.jsonl")
    with pytest.raises(SealedDataError):
        read_examples(link)
    assert sealed_root_of(train / "train.jsonl") is None
    assert len(read_examples(train / "train.jsonl")) == 2 and len(read_examples(train / "train.parquet")) == 2


def test_guard_refuses_the_configured_sealed_dir_even_without_marker(tmp_path, monkeypatch):
    params = tmp_path / "params.yaml"
    params.write_text(f"datasets:\n  sealed_dir: {tmp_path / 'frozen'}\n")
    monkeypatch.setenv("DRAGON_PARAMS", str(params))
    (tmp_path / "frozen").mkdir()
    with pytest.raises(SealedDataError):
        assert_not_sealed(tmp_path / "frozen" / "test.jsonl")
    assert_not_sealed(tmp_path / "elsewhere.jsonl")
