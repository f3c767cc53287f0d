"""Fast checks of the SFT building blocks on real data: mixing, reading, tokenizer, validity, config."""
from __future__ import annotations

import json

import pytest

from little_dragon.config import ConfigError, load_section
from little_dragon.training import data as sft_data
from little_dragon.training.validity import check_script


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
    row = standin_rows[0]
    assert check_script(row["completion"], row).valid
    assert row["name"].startswith("matmul")
    other = next(r for r in standin_rows if r["name"].startswith("softmax"))
    # a script of another workload looks up blocks that do not exist here: decodes, does not apply
    v = check_script(other["completion"], row)
    assert not v.valid
    assert not check_script("not a script at all ((", row).decoded
    truncated = row["completion"][: len(row["completion"]) // 2]
    assert not check_script(truncated, row).valid or truncated.strip() == ""


def test_bpe_tokenizer_round_trips_scripts_and_tvmscript(standin_rows, tmp_path):
    from transformers import PreTrainedTokenizerFast

    from little_dragon.training.tokenizer import corpus_of, train_bpe_tokenizer

    tok = train_bpe_tokenizer(corpus_of(standin_rows), vocab_size=512, out_dir=tmp_path / "tok")
    reloaded = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))
    for text in [standin_rows[0]["prompt"], standin_rows[0]["completion"], "  odd\tspacing\n\n  é"]:
        ids = reloaded(text, add_special_tokens=False)["input_ids"]
        assert reloaded.decode(ids) == text
    # trained on our corpus: a script costs far fewer tokens than bytes
    s = standin_rows[0]["completion"]
    assert len(tok(s)["input_ids"]) < len(s.encode()) / 2.5


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


def test_training_refuses_the_sealed_set(tmp_path):
    from little_dragon.training.sft import train_sft

    with pytest.raises(ValueError, match="sealed"):
        train_sft(load_section("sft"), tmp_path / "sealed.jsonl", tmp_path / "validation.jsonl", tmp_path / "o")
