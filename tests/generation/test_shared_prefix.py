"""Shared-prefix sampling (generation.shared_prefix) and the grouped_sdpa attention it decodes with: every
attempt must be computed exactly as if it were alone -- its prompt's real tokens, its own earlier tokens, its
own positions -- although k attempts share one cache row and rows leave the batch as they finish."""
from __future__ import annotations

import copy

import pytest

from dragon_testkit import random_llama

PROMPTS = ["sch blk matmul", "x", "loops b0 3\nsplit l1 = 4 8\nreorder l2 l3 l4", "post *",
           "sch blk conv2d_nhwc\nloops b0 7\nsplit l3 = 2 2 7"]


@pytest.fixture(scope="module")
def gqa_lm(token_counter):
    """A 2-layer Llama with 4 query heads over 2 K/V heads (so the fold's head order matters), random weights."""
    return random_llama(token_counter, hidden=64, intermediate=96, heads=4, kv_heads=2, max_positions=512,
                        attn_implementation="sdpa")


def _alone_logprobs(model, tok, prompt: str, new: list[int], temperature: float) -> list[float]:
    """Teacher-forced log p(token) of ``new`` after ``prompt``, one unpadded sequence, stock sdpa attention."""
    import torch

    p = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + new])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(p) - 1:len(p) - 1 + len(new)].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(new)[:, None]).squeeze(-1).tolist()


def test_each_attempt_is_computed_as_if_alone(gqa_lm):
    """Sampled attempts: the log-probability the sampler drew each token with equals the model's on that
    attempt alone (wrong masks, positions, head order or row dropping would change it)."""
    import torch

    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok = gqa_lm
    g = torch.Generator().manual_seed(1)
    out = sample_token_ids(model, tok, PROMPTS, 3, 12, 1.0, prompts_per_chunk=3, generator=g)
    assert [len(a) for a in out.token_ids] == [3] * len(PROMPTS)
    assert model.config._attn_implementation == "sdpa"       # switched back
    for prompt, attempts, lps in zip(PROMPTS, out.token_ids, out.logprobs):
        for new, lp in zip(attempts, lps):
            assert len(new) == len(lp) and 0 < len(new) <= 12
            assert lp == pytest.approx(_alone_logprobs(model, tok, prompt, new, 1.0), abs=2e-4)
    # three attempts of a random model at temperature 1 are not all the same
    assert any(len({tuple(a) for a in attempts}) > 1 for attempts in out.token_ids)


def test_greedy_equals_the_padded_sampler(gqa_lm):
    from little_dragon.generation.shared_prefix import sample_shared_prefix
    from little_dragon.training.callbacks import sample_scripts

    model, tok = gqa_lm
    shared = sample_shared_prefix(model, tok, PROMPTS, 2, 8, 0.0, prompts_per_chunk=2)
    padded = sample_scripts(model, tok, PROMPTS, 8, 0.0, batch_size=4, num_return_sequences=2)
    assert [s for a in shared for s in a] == padded


def test_finished_rows_leave_the_batch(gqa_lm):
    """A row whose attempts all ended leaves the batch (its cache row dropped): the rows left are still
    computed as alone (log-probs), and nothing of an ended attempt follows its end token."""
    import torch

    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok = gqa_lm
    # a sharper copy (logits x 300): sampled attempts stay near the greedy ones
    model = copy.deepcopy(model)
    model.lm_head.weight.data *= 300
    # the end token: the first token of the prompt whose first step is the most certain, so that prompt's row
    # ends at once while the other rows go on
    probs = []
    for prompt in PROMPTS:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])).logits
        probs.append(torch.softmax(logits[0, -1].float(), -1).max(-1))
    first = max(range(len(PROMPTS)), key=lambda i: float(probs[i].values))
    top = int(probs[first].indices)
    assert float(probs[first].values) > 0.999
    tok2 = copy.deepcopy(tok)
    tok2.eos_token = tok.convert_ids_to_tokens(top)
    assert tok2.eos_token_id == top != tok.eos_token_id
    g = torch.Generator().manual_seed(2)
    out = sample_token_ids(model, tok2, PROMPTS, 4, 16, 1.0, prompts_per_chunk=5, generator=g)
    lengths = [[len(a) for a in attempts] for attempts in out.token_ids]
    assert lengths[first] == [0, 0, 0, 0]                   # ended at its first token: left the batch
    assert max(max(ls) for i, ls in enumerate(lengths) if i != first) > 1   # others decoded on after it left
    for prompt, attempts, lps in zip(PROMPTS, out.token_ids, out.logprobs):
        for new, lp in zip(attempts, lps):
            assert top not in new
            if new:
                assert lp == pytest.approx(_alone_logprobs(model, tok2, prompt, new, 1.0), abs=5e-3)


def test_grouped_sdpa_equals_repeated_kv(gqa_lm):
    """The fold (query heads of a K/V head along the query axis) gives transformers' sdpa result, masked."""
    import torch

    from little_dragon.generation.grouped_attention import grouped_sdpa_forward
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model, _ = gqa_lm
    attn = model.model.layers[0].self_attn
    torch.manual_seed(3)
    q, kv = torch.randn(3, 4, 5, 16), [torch.randn(3, 2, 11, 16) for _ in range(2)]
    mask = torch.rand(3, 1, 5, 11) > 0.3
    mask[..., 0] = True
    ours, _ = grouped_sdpa_forward(attn, q, *kv, mask, scaling=0.25)
    ref, _ = sdpa_attention_forward(attn, q, *kv, mask, scaling=0.25)
    assert ours.shape == ref.shape == (3, 5, 4, 16)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_the_cache_is_written_in_place(gqa_lm):
    """After the prefill every layer writes its new columns into one preallocated buffer (no concatenation
    copying the cache at every step): the keys are views of the same storage, growing, and the prefill's kept; past
    its capacity the buffer grows by half, the columns kept."""
    import torch

    from little_dragon.generation.shared_prefix import _preallocate

    model, tok = gqa_lm
    ids = torch.tensor([tok(PROMPTS[2], add_special_tokens=False)["input_ids"]] * 2)
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
        before = cache.layers[0].keys.clone()
        _preallocate(cache, ids.shape[1] + 6)
        ptr = cache.layers[0].keys.data_ptr()
        for step in range(3):
            model(input_ids=ids[:, :2], position_ids=torch.tensor([[ids.shape[1] + step] * 2] * 2),
                  past_key_values=cache, use_cache=True)
    layer = cache.layers[0]
    assert layer.keys.data_ptr() == ptr and layer.keys.shape[-2] == ids.shape[1] + 6
    assert cache.get_seq_length() == ids.shape[1] + 6
    assert torch.equal(layer.keys[:, :, :ids.shape[1]], before)
    full = layer.keys.clone()
    with torch.no_grad():  # past the columns foreseen (refilled rows): a larger buffer, the columns so far kept
        model(input_ids=ids[:, :1], position_ids=torch.tensor([[ids.shape[1] + 6]] * 2), past_key_values=cache,
              use_cache=True)
    assert layer.keys.shape[-2] == ids.shape[1] + 7 and layer._k.shape[2] >= (ids.shape[1] + 6) * 3 // 2
    assert torch.equal(layer.keys[:, :, :ids.shape[1] + 6], full)


class _OwnResidue:
    """A per-attempt logits processor with a rule of its own id: attempt ``a`` may emit only tokens ``t`` with
    ``t % 5 == a % 5`` (and EOS, pushed up by ``1 + a % 3`` so that attempts, and rows, end at different steps).
    It checks what the engine hands it: the tokens ``ahead`` reported for an attempt are the ``input_ids`` it then
    sees for that attempt, an attempt that ended is never asked again, and every attempt's tokens end with the
    engine's output."""

    def __init__(self, eos: int):
        self.eos, self.seen, self.ended, self.errors, self.calls = eos, {}, set(), [], []

    def mask(self, a: int, scores):
        import torch

        allowed = torch.arange(scores.shape[-1]) % 5 == a % 5
        allowed[self.eos] = True
        scores = scores.masked_fill(~allowed, float("-inf"))
        scores[self.eos] += 7.0 + a % 3
        return scores

    def ahead(self, attempts, tokens, final=False):
        for a, t in zip(attempts.tolist(), tokens.tolist()):
            if a in self.ended:
                self.errors.append(f"ahead: attempt {a} after its end")
            self.seen.setdefault(a, []).append(t)
            if t == self.eos:
                self.ended.add(a)

    def __call__(self, attempts, input_ids, scores):
        self.calls.append(attempts.tolist())
        for i, a in enumerate(attempts.tolist()):
            if a in self.ended:
                self.errors.append(f"attempt {a} asked after its end")
            if input_ids[i].tolist() != self.seen.get(a, []):
                self.errors.append(f"attempt {a}: input_ids {input_ids[i].tolist()} != {self.seen.get(a, [])}")
            scores[i] = self.mask(a, scores[i])
        return scores


def test_a_logits_processor_sees_each_attempt_by_its_own_id(gqa_lm):
    """The engine's per-step processor hook: each attempt is processed under its own id (``p * k + j``) at every step,
    also after rows have left the batch, with its own tokens so far; its samples obey its own rule; the log-probs
    are the processed distribution's on the attempt alone."""
    import torch

    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok = gqa_lm
    k = 3
    proc = _OwnResidue(tok.eos_token_id)
    sizes = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        out = sample_token_ids(model, tok, PROMPTS, k, 12, 1.0, prompts_per_chunk=5, logits_processor=proc,
                               generator=torch.Generator().manual_seed(4))
    finally:
        handle.remove()
    assert proc.errors == []
    assert sizes[1] == len(PROMPTS) and min(sizes[1:]) < len(PROMPTS) and sizes[1:].count(min(sizes[1:])) > 1, sizes
    assert len(proc.calls) == len(sizes)                          # once per forward pass (the prefill's included)
    for p, (attempts, lps) in enumerate(zip(out.token_ids, out.logprobs)):
        ptoks = tok(PROMPTS[p], add_special_tokens=False)["input_ids"]
        for j, (new, lp) in enumerate(zip(attempts, lps)):
            a = p * k + j
            assert proc.seen[a][:len(new)] == new and len(proc.seen[a]) in (len(new), len(new) + 1)
            assert all(t % 5 == a % 5 for t in new), (a, new)
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ptoks + new])).logits[0, len(ptoks) - 1:].float()
            want = [float(torch.log_softmax(proc.mask(a, logits[s].clone()), -1)[t]) for s, t in enumerate(new)]
            assert lp == pytest.approx(want, abs=2e-4), (a, new)


class _TakesBack:
    """A processor that takes tokens back (``line_marks``): an attempt's "line" ends after a token divisible by 3;
    with probability 0.35 a step's attempt drops its current line (at most 3 times an attempt), which the engine must
    then draw again from the logits the line's first token was drawn from.  It keeps each attempt's tokens as it
    understands them (``kept``), and counts what it took back."""

    takes_back = True

    def __init__(self, eos: int, seed: int):
        import random

        self.eos, self.rng = eos, random.Random(seed)
        self.kept: dict[int, list[int]] = {}
        self.line_start: dict[int, int] = {}
        self.drops: dict[int, int] = {}
        self.dropped = 0
        self.errors: list[str] = []

    def ahead(self, attempts, tokens, final=False):
        for a, t in zip(attempts.tolist(), tokens.tolist()):
            toks = self.kept.setdefault(a, [])
            toks.append(t)
            if t % 3 == 0:
                self.line_start[a] = len(toks)

    def line_marks(self, attempts):
        drop, start = [], []
        for a in attempts.tolist():
            toks, at = self.kept.setdefault(a, []), self.line_start.get(a, 0)
            d = 0
            if len(toks) > at and self.drops.get(a, 0) < 3 and self.rng.random() < 0.35:
                d = len(toks) - at
                del toks[at:]
                self.drops[a] = self.drops.get(a, 0) + 1
                self.dropped += d
            drop.append(d)
            start.append(len(toks) == at)
        return drop, start

    def __call__(self, attempts, input_ids, scores):
        for i, a in enumerate(attempts.tolist()):
            n = len(self.kept.get(a, []))
            if input_ids[i, :n].tolist() != self.kept.get(a, []):
                self.errors.append(f"attempt {a}: input_ids {input_ids[i, :n].tolist()} != {self.kept.get(a)}")
        return scores


def test_taken_back_tokens_leave_no_trace(gqa_lm):
    """Attempts that take tokens back (a refused line drawn again) are still computed exactly as if alone on the tokens
    they keep: every kept token's log-probability is the model's on the kept sequence alone (a hidden column still
    read, a position counted from the steps instead of the kept tokens, or a line redrawn from the wrong logits would
    change it); the engine's tokens are the processor's; the attempts' budgets count kept tokens."""
    import torch

    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok = gqa_lm
    k, budget = 3, 14
    proc = _TakesBack(tok.eos_token_id, seed=5)
    out = sample_token_ids(model, tok, PROMPTS, k, budget, 1.0, prompts_per_chunk=5, logits_processor=proc,
                           generator=torch.Generator().manual_seed(6))
    assert proc.errors == []
    assert proc.dropped > 20 and len(proc.drops) > 5, (proc.dropped, proc.drops)
    longer = 0
    for p, (attempts, lps) in enumerate(zip(out.token_ids, out.logprobs)):
        for j, (new, lp) in enumerate(zip(attempts, lps)):
            a = p * k + j
            assert proc.kept[a][:len(new)] == new and len(proc.kept[a]) - len(new) in (0, 1)
            assert len(new) <= budget
            assert lp == pytest.approx(_alone_logprobs(model, tok, PROMPTS[p], new, 1.0), abs=2e-4), (a, new)
            longer += proc.drops.get(a, 0) > 0 and len(new) == budget
    assert longer > 0   # attempts that took tokens back still filled their budget (the chunk ran more steps)


class _OwnResidueLate(_OwnResidue):
    """``_OwnResidue`` for rows that entered after step 0: an attempt's ``input_ids`` are its tokens first (then columns
    of steps before it entered, stale), as after tokens were taken back."""

    def __call__(self, attempts, input_ids, scores):
        self.calls.append(attempts.tolist())
        for i, a in enumerate(attempts.tolist()):
            if a in self.ended:
                self.errors.append(f"attempt {a} asked after its end")
            mine = self.seen.get(a, [])
            if input_ids[i, :len(mine)].tolist() != mine:
                self.errors.append(f"attempt {a}: input_ids {input_ids[i].tolist()} do not start with {mine}")
            scores[i] = self.mask(a, scores[i])
        return scores


LATE_PROMPTS = PROMPTS + ["sch blk dense\nloops b0 2", "post"]   # with room for 2 prompts, 5 enter late


def _late_processors(tok):
    """One processor that keeps each attempt to its residue class, one that takes tokens back."""
    return _OwnResidueLate(tok.eos_token_id), _TakesBack(tok.eos_token_id, seed=7)


def test_ended_rows_are_refilled_by_the_next_prompts(gqa_lm, monkeypatch):
    """Continuous batching of rows: with room for 2 prompts' rows, a row whose attempts all ended gives its place to
    the next prompt at once (the batch refills instead of shrinking until its longest row ends), the steps before
    every row's entry leave the cache (the mask narrows), and still every attempt -- also of a prompt that entered
    late, and with tokens taken back -- is computed exactly as if alone; the processor sees each by its own id."""
    from little_dragon.generation import shared_prefix

    model, tok = gqa_lm
    monkeypatch.setattr(shared_prefix, "COMPACT_STEPS", 2)
    prompts, k, budget = LATE_PROMPTS, 3, 14
    for proc in _late_processors(tok):
        out, steps = _decoded_steps(model, tok, prompts, k, budget, proc)
        sizes, widths = [rows for rows, _, _ in steps], [cols for _, _, cols in steps]
        assert proc.errors == []
        assert max(sizes) == 2
        assert any(b < a for a, b in zip(widths, widths[1:])), widths      # dead steps dropped from the cache
        # an ended row's place is taken in the same step: the batch never runs short while prompts wait
        assert sizes == sorted(sizes, reverse=True) and sizes.count(1) < budget * 5 // 4 + 1, sizes
        if isinstance(proc, _OwnResidueLate):  # rows ended at different steps: a row decoded beside several others
            partners: dict[int, set] = {}
            for call in proc.calls:
                for a in call:
                    partners.setdefault(a // k, set()).update(b // k for b in call if b // k != a // k)
            assert max(len(v) for v in partners.values()) >= 2, partners
        else:
            assert proc.dropped > 0
        _each_as_if_alone(model, tok, prompts, k, budget, proc, out)
        assert sum(len(a) for attempts in out.token_ids[4:] for a in attempts) > 0   # the late prompts decoded


def test_a_prompts_attempts_in_rows_of_their_own(gqa_lm, monkeypatch):
    """[row attempts] ``ROW_ATTEMPTS`` 2, k 4: each prompt's attempts in two cache rows of two (room for 2 prompts: 4
    rows of 2 attempts), each row leaving the batch when its own two attempts end and the next row taking its place;
    the processor still sees each attempt by its own id ``p * k + j`` with its own tokens, and every attempt -- with
    rows refilled, and with tokens taken back -- is computed exactly as if alone."""
    from little_dragon.generation import shared_prefix

    model, tok = gqa_lm
    monkeypatch.setattr(shared_prefix, "ROW_ATTEMPTS", 2)
    prompts, k, budget = LATE_PROMPTS, 4, 14
    for proc in _late_processors(tok):
        out, steps = _decoded_steps(model, tok, prompts, k, budget, proc)
        assert proc.errors == []
        assert {n for _, n, _ in steps} == {2} and max(b for b, _, _ in steps) == 4, steps
        _each_as_if_alone(model, tok, prompts, k, budget, proc, out)
        if isinstance(proc, _TakesBack):
            assert proc.dropped > 0
        assert sum(len(a) for attempts in out.token_ids for a in attempts) > 0


def _each_as_if_alone(model, tok, prompts, k, budget, proc, out):
    """Every attempt of ``out`` (prompt p's j-th is attempt ``p * k + j``) within the budget, the processor's view of it
    its own tokens, and its log-probs the model's on it alone: under ``_TakesBack`` the plain distribution of its kept
    tokens, under ``_OwnResidueLate`` its own residue class's (``proc.mask``)."""
    import torch

    for p, (attempts, lps) in enumerate(zip(out.token_ids, out.logprobs)):
        assert len(attempts) == k
        for j, (new, lp) in enumerate(zip(attempts, lps)):
            a = p * k + j
            assert len(new) <= budget
            if isinstance(proc, _TakesBack):
                assert proc.kept[a][:len(new)] == new
                want = _alone_logprobs(model, tok, prompts[p], new, 1.0)
            else:
                assert proc.seen[a][:len(new)] == new and all(t % 5 == a % 5 for t in new), (a, new)
                ptoks = tok(prompts[p], add_special_tokens=False)["input_ids"]
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([ptoks + new])).logits[0, len(ptoks) - 1:].float()
                want = [float(torch.log_softmax(proc.mask(a, logits[s].clone()), -1)[t]) for s, t in enumerate(new)]
            assert lp == pytest.approx(want, abs=2e-4), (p, j, new)


def _decoded_steps(model, tok, prompts, k, budget, proc):
    """``sample_token_ids`` of ``prompts`` (room for 2 prompts, seed 8) under ``proc``, and each decoding step's (rows,
    attempts a row, cache columns it reads)."""
    import torch

    from little_dragon.generation import shared_prefix

    steps = []

    def seen(m, a, kw):
        mask = kw.get("attention_mask")
        if mask is not None and mask.dim() == 4:            # a decoding step (a prefill's mask is 2-D)
            steps.append((*kw["input_ids"].shape, mask.shape[-1]))

    handle = model.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        out = shared_prefix.sample_token_ids(model, tok, prompts, k, budget, 1.0, prompts_per_chunk=2,
                                             logits_processor=proc, generator=torch.Generator().manual_seed(8))
    finally:
        handle.remove()
    return out, steps
