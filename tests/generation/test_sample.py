"""Batched sampling (training.callbacks.sample_scripts, the sampler of evaluation, RL screening and the SFT
validity passes): batching prompts by length must not change which prompt an attempt belongs to."""
from __future__ import annotations

import pytest

from dragon_testkit import random_llama


@pytest.fixture(scope="module")
def tiny_lm(token_counter):
    """A 2-layer Llama on SmolLM2's tokenizer (random weights: only the batching is under test)."""
    return random_llama(token_counter, hidden=32, intermediate=64, heads=2, kv_heads=1, max_positions=256)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_sorting_by_length_keeps_each_prompts_attempts(tiny_lm, cache):
    """Greedy attempts are a function of their prompt: the same with and without length-sorted batches (and
    with the preallocated cache), in the prompts' order, k per prompt."""
    from little_dragon.training.callbacks import sample_scripts

    model, tok = tiny_lm
    prompts = ["sch blk matmul", "x", "loops b0 3\nsplit l1 = 4 8\nreorder l2 l3 l4", "post *"]
    plain = sample_scripts(model, tok, prompts, 6, 0.0, batch_size=2, num_return_sequences=3)
    sorted_ = sample_scripts(model, tok, prompts, 6, 0.0, batch_size=2, num_return_sequences=3,
                             sort_by_length=True, cache_implementation=cache)
    assert len(plain) == 12
    one_by_one = [s for p in prompts for s in sample_scripts(model, tok, [p], 6, 0.0, num_return_sequences=3)]
    assert sorted_ == one_by_one
    assert plain == one_by_one


def test_continuous_batching_keeps_each_prompts_attempts(tiny_lm):
    """transformers' continuous batching (cache_implementation continuous): greedy attempts equal the padded
    sampler's, prompt by prompt in the prompts' order; sampled ones come k per prompt, forks of that prompt."""
    import torch

    from little_dragon.generation.sample import sample_continuous
    from little_dragon.training.callbacks import sample_scripts

    model, tok = tiny_lm
    prompts = ["sch blk matmul", "x", "loops b0 3\nsplit l1 = 4 8\nreorder l2 l3 l4", "post *"]
    greedy = sample_continuous(model, tok, prompts, 3, 6, 0.0)
    padded = sample_scripts(model, tok, prompts, 6, 0.0, batch_size=2, num_return_sequences=3, sort_by_length=True)
    assert [s for a in greedy for s in a] == padded
    torch.manual_seed(0)
    sampled = sample_continuous(model, tok, prompts, 4, 6, 1.0)
    assert [len(a) for a in sampled] == [4, 4, 4, 4]
    assert all(isinstance(s, str) for a in sampled for s in a)
    # sampling at temperature 1 over a random 2-layer model: the four forks of a prompt do not all agree
    assert any(len(set(a)) > 1 for a in sampled)


def test_continuous_batching_without_forks_repeats_each_prompt(tiny_lm, monkeypatch):
    """A transformers whose generate_batch has no forks (5.17, seen on the H200: it returns one completion per
    prompt): each prompt is sent k times instead, still k attempts per prompt in the prompts' order."""
    import torch

    from little_dragon.generation import sample

    import transformers

    model, tok = tiny_lm
    prompts = ["sch blk matmul", "x", "post *"]
    monkeypatch.setitem(sample._CB_FORKS, transformers.__version__, False)
    torch.manual_seed(0)
    attempts = sample.sample_continuous(model, tok, prompts, 3, 6, 1.0)
    assert [len(a) for a in attempts] == [3, 3, 3]
    # near-greedy sampling: every repeat of a prompt is that prompt's greedy attempt, so the order maps back right
    from little_dragon.training.callbacks import sample_scripts

    greedy = sample_scripts(model, tok, prompts, 6, 0.0)
    assert sample.sample_continuous(model, tok, prompts, 3, 6, 1e-6) == [[g] * 3 for g in greedy]


def test_generation_seed_decides_the_attempts_unless_the_caller_brings_one(tiny_lm):
    """``generation.seed`` seeds the sampling where the caller passes no seed (``dragon optimize``); a caller's own
    seed (the sealed evaluation's ``evaluation.seed``) wins. Before, ``generation.seed`` was read by nothing: every
    seed gave the attempts of seed 0."""
    from little_dragon.generation.config import GenerationConfig
    from little_dragon.generation.sample import LocalGenerator, generate_attempts

    model, tok = tiny_lm

    def attempts(seed: int, caller_seed: int | None = None) -> list[list[str]]:
        cfg = GenerationConfig(max_new_tokens=6, temperature=1.0, seed=seed)
        gen = LocalGenerator(None, cfg, model=model, tokenizer=tok)
        return generate_attempts(gen, ["sch blk matmul", "x"], 4, seed=caller_seed).scripts

    one = attempts(1)
    assert [len(a) for a in one] == [4, 4]
    assert attempts(1) == one
    assert attempts(2) != one            # a random 2-layer model at temperature 1: other seeds, other attempts
    assert attempts(2, caller_seed=1) == one
