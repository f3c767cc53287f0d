"""Fast checks of the SFT building blocks on real data: mixing, reading, tokenizer, validity, config."""
from __future__ import annotations

import json

import pytest

from little_dragon.config import ConfigError, load_section
from little_dragon.training import data as sft_data
from little_dragon.datasets.validity import check_script


def test_mix_tasks_hits_the_ratio_without_repeating_rows(standin_rows):
    for frac in (0.25, 0.5, 0.75, 1.0):
        mixed = sft_data.mix_tasks(standin_rows, frac, seed=3)
        counts = sft_data.task_counts(mixed)
        assert len({id(r) for r in mixed}) == len(mixed)
        assert abs(counts["construction"] / len(mixed) - frac) < 0.1, (frac, counts)
    assert len(sft_data.mix_tasks(standin_rows, None, 0)) == len(standin_rows)
    with pytest.raises(ValueError):
        sft_data.mix_tasks(standin_rows, 1.5, 0)


def test_read_rows_names_file_and_line(tmp_path, standin_rows, jsonl):
    p = jsonl(tmp_path / "train.jsonl", standin_rows[:2])
    with open(p, "a") as f:
        f.write(json.dumps({"prompt": "x", "task": "construction", "workload_id": "w1"}) + "\n")
    with pytest.raises(ValueError, match=r"train.jsonl:3: .*w1.*completion"):
        sft_data.read_rows(p)


def test_real_scripts_are_valid_and_broken_ones_are_not(standin_rows):
    from little_dragon import codec

    row = next(r for r in standin_rows if r["name"] == "matmul_64")
    assert check_script(row["completion"], row).valid
    codec.decode(row["completion"])  # the rows hold codec text, not Python
    assert row["prompt"].startswith("### Task: ") and row["prompt"].endswith("### Script:\n")
    other = next(r for r in standin_rows if r["name"].startswith("softmax"))
    # a script of another workload looks up blocks that do not exist here: decodes, does not apply
    v = check_script(other["completion"], row)
    assert v.decoded and not v.applied and v.error.startswith("apply:"), v
    assert not check_script("not a script at all ((", row).decoded
    for nothing in ("", "\n\n"):  # what an untrained model often writes: decodes, schedules nothing
        assert not check_script(nothing, row).valid
    lines = row["completion"].splitlines()
    cut = "\n".join(lines[: len(lines) // 2]) + "\nsplit l0 v0 v1 v2 v3 v4 v5 v6\n"  # cut, then a wrong split
    assert not check_script(cut, row).valid


def test_generated_text_is_never_run_as_python(standin_rows, tmp_path):
    row = standin_rows[0]
    marker = tmp_path / "pwned"
    for text in (f"sch.get_sblock(open({str(marker)!r}, 'w'))\n",
                 f"__import__('pathlib').Path({str(marker)!r}).touch()\n"):
        v = check_script(text, row)
        assert not v.decoded and v.error.startswith("decode:"), v
    assert not marker.exists()
    import inspect

    import little_dragon.codec.validity as validity_module

    src = inspect.getsource(validity_module)
    assert "exec(" not in src and "eval(" not in src and "import ast" not in src


def test_validity_falls_back_to_the_workload_store(standin_rows, tmp_path, monkeypatch):
    import pandas as pd

    from little_dragon.datasets import validity
    from little_dragon.workloads.store import describe_module, module_from_script

    row = next(r for r in standin_rows if r["name"] == "row_sum_128x512")
    mod = module_from_script(row["tvmscript"])
    store = tmp_path / "workloads.parquet"
    pd.DataFrame([describe_module(mod, family=row["family"], name=row["name"], source="test")]).to_parquet(store)
    monkeypatch.setenv("DRAGON_WORKLOADS", str(store))
    validity._module_from_store.cache_clear()
    bare = {k: v for k, v in row.items() if k not in ("tvmscript", "structural_hash")}
    assert check_script(row["completion"], bare).valid
    missing = {**bare, "workload_id": "w" + "0" * 16}
    v = check_script(row["completion"], missing)
    assert not v.valid and v.error.startswith("workload w0000000000000000"), v
    # a row whose TVMScript was edited is caught against its structural hash
    edited = {**row, "tvmscript": row["tvmscript"].replace("512", "256")}
    v = check_script(row["completion"], edited)
    assert not v.valid and "hashes to" in v.error, v


@pytest.mark.parametrize("split", ["phrases", "words"])
def test_bpe_tokenizer_round_trips_scripts_and_tvmscript(standin_rows, tmp_path, split):
    from transformers import PreTrainedTokenizerFast

    from little_dragon.tokenizer import corpus_of, train_bpe_tokenizer

    tok = train_bpe_tokenizer(corpus_of(standin_rows), vocab_size=512, out_dir=tmp_path / "tok", split=split)
    reloaded = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))
    for text in [standin_rows[0]["prompt"], standin_rows[1]["prompt"], standin_rows[0]["completion"],
                 "  odd\tspacing\n\n  é"]:
        ids = reloaded(text, add_special_tokens=False)["input_ids"]
        assert reloaded.decode(ids) == text
    # trained on our corpus: a script costs far fewer tokens than bytes
    s = standin_rows[0]["completion"]
    assert len(tok(s)["input_ids"]) < len(s.encode()) / 2.5
    if split == "words":  # no token spans two words: each tile factor and reference is its own piece
        import re

        for line in s.splitlines():
            pieces = [tok.decode([i]) for i in tok(line, add_special_tokens=False)["input_ids"]]
            bounds = {sum(map(len, pieces[:k])) for k in range(len(pieces) + 1)}
            starts = {m.start() for m in re.finditer(r" ?\S+", line)}  # each word with its leading space
            assert starts <= bounds, (line, pieces)
    # prompt tokens are a prefix of prompt+completion tokens (what TRL trains on is what generation sees)
    for r in standin_rows:
        p_ids = tok(r["prompt"], add_special_tokens=False)["input_ids"]
        assert tok(r["prompt"] + r["completion"], add_special_tokens=False)["input_ids"][: len(p_ids)] == p_ids


def test_sft_section_parses_and_rejects_typos(tmp_path):
    cfg = load_section("sft")
    assert cfg.model.kind in ("tiny", "gguf", "local")
    p = tmp_path / "params.yaml"
    p.write_text("sft:\n  model: {kind: tiny, pth: x}\n")
    with pytest.raises(ConfigError, match="pth"):
        load_section("sft", path=p)
    p.write_text("sft:\n  model: {kind: huge}\n")
    with pytest.raises(ConfigError, match="huge"):
        load_section("sft", path=p)


def test_training_refuses_the_sealed_set(tmp_path, standin_rows, jsonl):
    from little_dragon.datasets.guard import SEALED_MARKER, SealedDataError
    from little_dragon.training.sft import train_sft

    sealed = tmp_path / "renamed_copy"  # the marker fences it, whatever the folder or file is called
    sealed.mkdir()
    (sealed / SEALED_MARKER).write_text("")
    hidden = jsonl(sealed / "train.jsonl", standin_rows[:2])
    ok = jsonl(tmp_path / "validation.jsonl", standin_rows[:2])
    with pytest.raises(SealedDataError, match="sealed"):
        sft_data.read_rows(hidden)
    for train, val in ((hidden, ok), (ok, hidden)):
        with pytest.raises(SealedDataError):
            train_sft(load_section("sft"), train, val, tmp_path / "o")
    assert not (tmp_path / "o").exists()
