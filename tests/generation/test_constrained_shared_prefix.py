"""Constrained decoding on the shared-prefix engine (generation.shared_prefix + constrained.AttemptLogitsProcessor):
every attempt is masked by its own constraint at every step -- also after rows have left the batch -- and the
masked distribution it samples from is the one the same constraint gives the model's logits of that attempt
alone (the HF ``generate`` path's processor, ``CodecLogitsProcessor``).

Real parts: a tiny random-weight Llama (dragon_testkit.random_llama) over a byte-level BPE trained on the committed
real llvm records' scripts (the tiny model's kind of tokenizer), the prompts of those records' real workloads
(and a real matmul kernel), llguidance, TVM schedules.
"""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from dragon_testkit import random_llama
from dragon_testkit import kept_what_it_checked

CODEC_DATA = Path(__file__).resolve().parents[1] / "codec" / "data"
TARGET = {"kind": "llvm", "num-cores": 2}


def _records():
    from little_dragon.codec.roundtrip import read_database

    for db in sorted((CODEC_DATA / "real_llvm_db").iterdir()):
        for name, mod, recs in read_database(db):
            for _, trace_json, target in recs:
                yield name, mod, target, trace_json


@pytest.fixture(scope="module")
def setup():
    """(model, tokenizer, prompts): the prompts of the committed records' two real workloads, a real matmul kernel,
    and the first again (two prompts with the same text: their attempts must still keep their own constraints)."""
    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.codec import encode
    from little_dragon.datasets.prompts import construction_prompt
    from little_dragon.tokenizer import train_bpe_tokenizer

    prompts, seen, texts = [], set(), []
    for name, mod, target, tj in _records():
        text = encode(tj)
        lines = text.splitlines()
        texts += [text, "\n".join(lines[:lines.index("post")] + ["post *"]) + "\n" if "post" in lines else text]
        if name not in seen:
            seen.add(name)
            prompts.append(construction_prompt(mod.script(), json.loads(target)))
    prompts.append(construction_prompt(prim_module(matmul_tensors(96)).script(), TARGET))
    prompts.append(prompts[0])
    bpe = train_bpe_tokenizer(texts * 4, vocab_size=600, split="phrases")
    model, tok = random_llama(types.SimpleNamespace(tokenizer=bpe.backend_tokenizer), hidden=64, intermediate=96,
                              heads=4, kv_heads=2, max_positions=4096, attn_implementation="sdpa")
    return model, tok, prompts


class Recording:
    """The real processor, its per-step outputs kept (what the engine sampled from): attempt id -> [scores]."""

    def __init__(self, proc):
        self.proc, self.out, self.calls = proc, {}, 0

    def ahead(self, attempts, tokens, final=False):
        self.proc.ahead(attempts, tokens, final)

    def __call__(self, attempts, input_ids, scores):
        scores = self.proc(attempts, input_ids, scores)
        self.calls += 1
        for a, row in zip(attempts.tolist(), scores):
            self.out.setdefault(a, []).append(row.clone())
        return scores


def _batch_sizes(model):
    sizes = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    return sizes, handle


def _alone(model, tok, prompt, new, ended, temperature):
    """The masked log-softmax the HF path's processor gives this attempt alone, step by step: one unpadded sequence
    teacher-forced through the model (stock sdpa), a fresh ``CodecLogitsProcessor`` of one fresh constraint."""
    import torch

    from little_dragon.generation import constrained

    eng = constrained.engine_for(tok)
    c = constrained.ScriptConstraint(eng, constrained.workload_of_prompt(prompt))
    proc = constrained.CodecLogitsProcessor(eng, [c])
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    steps = len(new) + ended  # the step that sampled EOS was masked too
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p + new])).logits[0, len(p) - 1:len(p) - 1 + steps].float()
    out = []
    for s in range(steps):
        scores = proc(torch.tensor([p + new[:s]]), logits[s:s + 1].clone())
        out.append(torch.log_softmax(scores[0] / temperature, -1))
    if steps:  # the HF processor consumes a token at the next step: the last one by hand
        c.advance((new + [tok.eos_token_id] * ended)[-1])
    return out, c


def _allowed_by_a_fresh_constraint(tok, prompt, ids, ended) -> str | None:
    from little_dragon.generation import constrained

    eng = constrained.engine_for(tok)
    c = constrained.ScriptConstraint(eng, constrained.workload_of_prompt(prompt))
    bits = constrained.allocate_bitmask(1, eng.vocab_size)
    for i, t in enumerate(ids + [tok.eos_token_id] * ended):
        c.fill_mask(bits, 0)
        if not (int(bits[0, t // 32]) >> (t % 32)) & 1:
            return f"token {i} {tok.decode([t])!r} after {tok.decode(ids[:i])!r} ({c.error})"
        c.advance(t)
    return None


def test_every_attempt_is_masked_by_its_own_constraint_as_if_alone(setup):
    """Sampled on the engine under the constraint: every token of every attempt (its end included) is allowed by a
    fresh constraint of its own prompt fed its own tokens; the distribution each step was sampled from (the
    processed logits) is, entry by entry, the HF processor's masked log-softmax of the model's logits of that attempt
    alone; the engine's log-probs are those; each attempt's constraint holds its own text; rows left the batch while
    others decoded on."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok, prompts = setup
    k, temperature = 3, 0.8
    hook = constrained.ConstrainedDecoding(tok)
    proc = Recording(hook.attempt_processor(prompts, k))
    sizes, handle = _batch_sizes(model)
    try:
        out = sample_token_ids(model, tok, prompts, k, 96, temperature, prompts_per_chunk=4, logits_processor=proc,
                               generator=torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    decoding = sizes[1:]
    assert decoding[0] == len(prompts) and min(decoding) < len(prompts), sizes  # rows left ...
    assert sum(s < len(prompts) for s in decoding) > 2, str(sizes)             # ... and the others went on
    eos = tok.eos_token_id
    lines = 0
    for p, (attempts, lps) in enumerate(zip(out.token_ids, out.logprobs)):
        for j, (new, lp) in enumerate(zip(attempts, lps)):
            a = p * k + j
            c = proc.proc.constraints[a]
            ended = int(c.done)
            assert _allowed_by_a_fresh_constraint(tok, prompts[p], new, ended) is None, (p, j)
            alone, fresh = _alone(model, tok, prompts[p], new, ended, temperature)
            got = [torch.log_softmax(s / temperature, -1) for s in proc.out[a]]
            assert len(got) == len(alone) == len(new) + ended, (p, j)
            for s, (g, want) in enumerate(zip(got, alone)):
                assert torch.equal(torch.isinf(g), torch.isinf(want)), (p, j, s)      # the same allowed set
                fin = torch.isfinite(want)
                assert torch.allclose(g[fin], want[fin], atol=2e-4), (p, j, s)        # the same distribution
            toks = new + [eos] * ended
            assert lp == pytest.approx([float(alone[s][t]) for s, t in enumerate(toks)][:len(new)], abs=2e-4)
            # its own constraint saw exactly its own tokens
            assert (c.text, c.line, c.dead, c.done) == (fresh.text, fresh.line, fresh.dead, fresh.done), (p, j)
            lines += c.text.count("\n")
    assert lines > 0  # some lines ended and were checked (their workload's line grammars followed)
    # and the dead: only EOS after a failed line (their masks after the kill are EOS alone)
    for a, steps in proc.out.items():
        c = proc.proc.constraints[a]
        if c.dead:
            assert torch.isfinite(steps[-1]).nonzero().flatten().tolist() == [eos]


def test_greedy_constrained_equals_the_generate_path(setup):
    """Greedy constrained decoding: the shared-prefix engine writes what transformers' generate with the HF path's
    processor writes (the same masked argmax at every step), prompt by prompt."""
    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_shared_prefix
    from little_dragon.training.callbacks import sample_scripts

    model, tok, prompts = setup
    hf = sample_scripts(model, tok, prompts, 40, 0.0, batch_size=4, num_return_sequences=1,
                        logits_processor_factory=constrained.ConstrainedDecoding(tok))
    hook = constrained.ConstrainedDecoding(tok)
    shared = sample_shared_prefix(model, tok, prompts, 1, 40, 0.0, prompts_per_chunk=4,
                                  logits_processor=hook.attempt_processor(prompts, 1))
    assert [a[0] for a in shared] == hf
    assert any(s.strip() for s in hf)


def test_generate_constrained_on_the_engine_decodes_and_resamples_with_own_constraints(setup):
    """``generate_constrained(cache_implementation="shared_prefix")``: every script decodes; the first pass's verdicts
    are its constraints'; resampled attempts keep what their own constraint checked; the constraint work beside the
    forward pass in a thread samples the very same scripts; the free engine's attempts of the same model do not all
    decode."""
    import torch

    from little_dragon import codec
    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_shared_prefix

    model, tok, prompts = setup
    runs = []
    for background in (False, True):
        constrained.BACKGROUND = background
        hook = constrained.ConstrainedDecoding(tok)
        sizes, handle = _batch_sizes(model)
        try:
            torch.manual_seed(3)
            r = constrained.generate_constrained(model, tok, prompts, 3, 48, 1.0, batch_size=12, max_resamples=1,
                                                 hook=hook, cache_implementation="shared_prefix")
        finally:
            constrained.BACKGROUND = None
            handle.remove()
        runs.append((r, hook, sizes))
    (r, hook, sizes), (r2, _, _) = runs
    assert (r2.first_scripts, r2.scripts, r2.first_ok, r2.stats.lines) == (r.first_scripts, r.scripts, r.first_ok,
                                                                            r.stats.lines)
    assert sizes[1] == len(prompts) and len(set(sizes)) > 2  # the engine: one row per prompt, rows leaving
    assert [len(s) for s in r.scripts] == [3] * len(prompts) and r.stats.attempts >= 3 * len(prompts)
    for s in [x for ss in r.first_scripts + r.scripts for x in ss]:
        codec.decode(s, codec.SyntaxOnlyContext())  # raises DecodeError if not
    pending = [(p, a) for p in range(len(prompts)) for a in range(3) if not r.first_ok[p][a]]
    assert pending and r.stats.resampled == len(pending)
    assert len(hook.last_constraints) == len(pending)  # the resample pass: one attempt (and constraint) each
    for (p, a), c in zip(pending, hook.last_constraints):
        s = r.scripts[p][a]
        assert kept_what_it_checked(s, c), (s, c.text, c.error)
    torch.manual_seed(3)
    free = sample_shared_prefix(model, tok, prompts, 3, 48, 1.0, prompts_per_chunk=4)
    decoded = 0
    for s in [x for ss in free for x in ss]:
        try:
            codec.decode(s, codec.SyntaxOnlyContext())
            decoded += 1
        except Exception:  # noqa: BLE001
            pass
    assert decoded < 3 * len(prompts)


def test_local_generator_runs_constrained_on_the_shared_prefix_engine(setup):
    """``generation.constrained: true`` with ``cache_implementation: shared_prefix`` decodes on the engine (its 4-D
    attention mask), not through generate; ``constrained_processes`` moves the constraint into processes of its own
    (the same attempts); continuous batching still refuses a constraint."""
    import torch

    from little_dragon.generation.config import GenerationConfig
    from little_dragon.generation.sample import LocalGenerator

    model, tok, prompts = setup
    threads = torch.get_num_threads()
    cfg = GenerationConfig(max_new_tokens=24, temperature=1.0, batch_size=6, constrained=True, constrained_resamples=0,
                           cpu_threads=threads)
    gen = LocalGenerator(None, cfg, model=model, tokenizer=tok)
    assert gen.logits_processor_factory._processes == []  # constrained_processes -1 beside a CPU model: the thread
    masks = []
    handle = model.register_forward_pre_hook(
        lambda m, a, kw: masks.append(getattr(kw.get("attention_mask"), "dim", lambda: 0)()), with_kwargs=True)
    try:
        scripts = gen.generate(prompts[:2], 3)
    finally:
        handle.remove()
    assert [len(s) for s in scripts] == [3, 3] and 4 in masks
    assert gen.logits_processor_factory.stats.attempts == 6
    import dataclasses

    # generation.constrained_processes: the constraint in two processes of its own samples the thread's attempts
    runs = []
    for processes in (0, 2):
        gen = LocalGenerator(None, dataclasses.replace(cfg, constrained_processes=processes), model=model,
                             tokenizer=tok)
        assert len(gen.logits_processor_factory._processes) == processes
        torch.manual_seed(5)
        runs.append(gen.generate(prompts[:3], 2))
        assert gen.logits_processor_factory.stats.attempts == 6 and gen.logits_processor_factory.stats.lines > 0
        gen.logits_processor_factory.close()
    assert runs[0] == runs[1]

    with pytest.raises(ValueError, match="continuous"):
        LocalGenerator(None, dataclasses.replace(cfg, cache_implementation="continuous"), model=model,
                       tokenizer=tok).generate(prompts[:1], 2)


def _first_step(model, tok, prompt, n):
    """The model's logits of ``prompt``'s first new token, as the engine's first step has them: ``(1, n, V)``."""
    import torch

    p = tok(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p])).logits[0, -1].float()
    return logits[None, None, :].expand(1, n, -1)


def test_checked_draws_sample_the_masked_distribution(setup):
    """The engine's draw-then-check sampling (``SAMPLE_FIRST``: a draw from the model kept when the constraint allows
    it, the attempt masked and drawn again when not) samples the masked, renormalised distribution: 4000 attempts of
    one prompt at its first step, the model's logits shifted so that the forbidden tokens hold half its mass (about
    half the draws are refused); every token's frequency is within 5 sigma of its masked probability, none is forbidden, and
    every branch ran (kept, kept when drawn again without the refused tokens, drawn from the mask).  Greedy, it picks the masked argmax."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import _checked_sample

    model, tok, prompts = setup
    n = 4000
    hook = constrained.ConstrainedDecoding(tok)
    proc = hook.attempt_processor(prompts[:1], n)
    assert proc.sample_first(torch.device("cpu"))
    eng = constrained.engine_for(tok)
    bits = constrained.allocate_bitmask(1, eng.vocab_size)
    constrained.ScriptConstraint(eng, constrained.workload_of_prompt(prompts[0])).fill_mask(bits, 0)
    logits = _first_step(model, tok, prompts[0], n).clone()
    allowed = constrained.unpack_bitmask(bits, logits.shape[-1])[0]
    forbidden = (~allowed).nonzero().flatten()[:50]
    row = logits[0, 0]  # the model puts as much mass on the forbidden tokens as on the allowed ones
    logits[..., allowed] += float(torch.logsumexp(row[~allowed], 0) - torch.logsumexp(row[allowed], 0))
    want = torch.softmax(logits[0, 0].masked_fill(~allowed, float("-inf")), -1)
    ids_of = torch.arange(n)[None, :]
    live = torch.ones((1, n), dtype=torch.bool)
    tok_, lp = _checked_sample(proc, logits, ids_of, live, torch.zeros((1, n, 1), dtype=torch.long),
                               torch.tensor([0]), 0, 1.0, torch.Generator().manual_seed(0))
    stats = hook.stats
    assert stats.checked == n and n // 4 < stats.check_refused < n - n // 4, stats.as_dict()
    counts = torch.bincount(tok_[0], minlength=logits.shape[-1]).double() / n
    assert counts[~allowed].sum() == 0
    sigma = (want * (1 - want) / n).sqrt().double()
    assert ((counts - want.double()).abs() <= 5 * sigma + 1e-9).all()
    assert (want > 0.02).sum() >= 3  # a distribution, not one token
    # the three ways a token came: kept at the first draw, kept at a redraw without the refused tokens, drawn from the
    # mask after REDRAWS refused redraws; only the last has a log-prob (elsewhere the mask was never computed: NaN)
    masked = int(torch.isfinite(lp[0]).sum())
    assert stats.redraws > stats.redraw_refused > 0 and 0 < masked < stats.check_refused, (masked, stats.as_dict())
    # greedy: the masked argmax, whether the model's argmax is allowed (kept) or forbidden (masked)
    for boost in (0.0, 50.0):
        g = _first_step(model, tok, prompts[0], 1).clone()
        g[..., forbidden[0]] += boost
        proc = hook.attempt_processor(prompts[:1], 1)
        t, _ = _checked_sample(proc, g, torch.zeros((1, 1), dtype=torch.long), torch.ones((1, 1), dtype=torch.bool),
                               torch.zeros((1, 1, 1), dtype=torch.long), torch.tensor([0]), 0, 0.0, None)
        assert int(t[0, 0]) == int(g[0, 0].masked_fill(~allowed, float("-inf")).argmax())


def test_checked_sampling_keeps_every_attempt_within_its_own_constraint(setup):
    """Sampled on the engine with draw-then-check: every token of every attempt (its end included) is one a fresh
    constraint of its own prompt allows, and each attempt's constraint holds what a fresh one fed its tokens holds;
    most draws needed no mask, some were refused and drawn again from the mask."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok, prompts = setup
    k = 3
    constrained.SAMPLE_FIRST = True
    try:
        hook = constrained.ConstrainedDecoding(tok)
        proc = hook.attempt_processor(prompts, k)
        out = sample_token_ids(model, tok, prompts, k, 48, 0.8, prompts_per_chunk=4, logits_processor=proc,
                               generator=torch.Generator().manual_seed(0))
    finally:
        constrained.SAMPLE_FIRST = None
    lines = 0
    for p, attempts in enumerate(out.token_ids):
        for j, new in enumerate(attempts):
            c = proc.constraints[p * k + j]
            ended = int(c.done)
            assert _allowed_by_a_fresh_constraint(tok, prompts[p], new, ended) is None, (p, j)
            _, fresh = _alone(model, tok, prompts[p], new, ended, 0.8)
            assert (c.text, c.line, c.dead, c.done) == (fresh.text, fresh.line, fresh.dead, fresh.done), (p, j)
            lines += c.text.count("\n")
    st = hook.stats
    assert lines > 0 and st.checked > 0 and 0 < st.check_refused < st.checked, st.as_dict()


class RecordingBack(Recording):
    """``Recording`` of a processor whose attempts take refused lines back: the scores of the tokens an attempt drops
    are dropped with them, so ``out[a]`` are the distributions its kept tokens (and its end) were drawn from."""

    takes_back = True

    def __init__(self, proc):
        super().__init__(proc)
        self.dropped = 0

    def line_marks(self, attempts):
        drop, start = self.proc.line_marks(attempts)
        for a, d in zip(attempts.tolist(), drop):
            if d:
                del self.out[a][-d:]
                self.dropped += d
        return drop, start


# compute-at lines TVM refuses (a block moved again under a loop outside its scope): the line-retry tests run with the
# session 33 move-once rule off (``constrained.ANNOTATION_AND_MOVE_RULES``), which masks most of them on a GPU
FOND_OF_REFUSED = "blk C\nloops b0 3\nat b0 l1\nrat b0 l2\nat b1 l2\n"


def _fond_of(model, tok, text: str, boost: float):
    """A copy of ``model`` whose output layer gets a bias of ``boost`` on every token (2+ characters) of ``text``: a
    model that often writes compute-at lines TVM refuses (the random model mostly writes lines it accepts, or none)."""
    import copy

    import torch

    fond = copy.deepcopy(model)
    old = fond.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    head.weight.data.copy_(old.weight.data)
    head.bias.data.zero_()
    words = [i for i in range(old.out_features) if len(tok.decode([i])) >= 2 and tok.decode([i]) in text]
    head.bias.data[words] = boost
    fond.lm_head = head
    return fond


def _drawn_as_alone(scores, alone, steps, temperature, where) -> None:
    """The ``scores`` an attempt's kept tokens (and its end) were drawn from (``RecordingBack``) are, step by step, the
    masked log-softmax of the model on its kept tokens alone (``_alone``)."""
    import torch

    got = [torch.log_softmax(s / temperature, -1) for s in scores]
    assert len(got) == steps, where
    for s, (g, want) in enumerate(zip(got, alone)):
        assert torch.equal(torch.isinf(g), torch.isinf(want)), (*where, s)
        fin = torch.isfinite(want)
        assert torch.allclose(g[fin], want[fin], atol=2e-4), (*where, s)


def test_a_refused_line_is_drawn_again_as_if_it_never_was(setup, monkeypatch):
    """Line retries (``ConstrainedDecoding(line_retries=...)`` on the engine): a line TVM refuses is taken back and drawn
    again.  What an attempt keeps is what a fresh constraint of its prompt (no retries) allows token by token and ends
    in the same state; each kept token was drawn from the masked distribution of the model on the kept tokens alone
    (the HF processor's, teacher-forced); lines were retried, attempts that retried went on past the retried line,
    and an attempt ended at a refused line only with its retries spent.  Draw-then-check sampling keeps the same
    invariants."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_token_ids

    model, tok, prompts = setup
    model = _fond_of(model, tok, FOND_OF_REFUSED, 6.0)
    monkeypatch.setattr(constrained, "ANNOTATION_AND_MOVE_RULES", False)  # FOND_OF_REFUSED's moves TVM refuses
    k, temperature, retries = 4, 1.0, 3
    for checked in (False, True):
        hook = constrained.ConstrainedDecoding(tok, line_retries=retries)
        inner = hook.attempt_processor(prompts, k)
        proc = inner if checked else RecordingBack(inner)
        constrained.SAMPLE_FIRST = checked
        try:
            out = sample_token_ids(model, tok, prompts, k, 64, temperature, prompts_per_chunk=4, logits_processor=proc,
                                   generator=torch.Generator().manual_seed(3))
        finally:
            constrained.SAMPLE_FIRST = None
        st = hook.stats
        assert st.line_retries >= 5 and st.retried_tokens > st.line_retries, (st.reasons, st.retry_reasons)
        went_on = 0
        for p, attempts in enumerate(out.token_ids):
            for j, new in enumerate(attempts):
                c = inner.constraints[p * k + j]
                ended = int(c.done)
                assert _allowed_by_a_fresh_constraint(tok, prompts[p], new, ended) is None, (checked, p, j)
                alone, fresh = _alone(model, tok, prompts[p], new, ended, temperature)
                assert (c.text, c.line, c.dead, c.done) == (fresh.text, fresh.line, fresh.dead, fresh.done), (p, j)
                assert c.retried <= retries and (c.retried == retries or not c.error.startswith("apply:")), c.error
                went_on += c.retried > 0 and not c.dead
                if checked:
                    continue
                _drawn_as_alone(proc.out[p * k + j], alone, len(new) + ended, temperature, (p, j))
        assert sum(c.retried for c in inner.constraints) == st.line_retries
        assert went_on > 0, st.as_dict()
        # each retry reason keeps its first lines drawn again, to be read: the refused line last, after the marker
        assert set(st.retry_examples) == set(st.retry_reasons), st.retry_examples
        for reason, texts in st.retry_examples.items():
            assert 1 <= len(texts) <= min(st.retry_reasons[reason], constrained.RETRY_EXAMPLES)
            for text in texts:
                taken = text.split("~~~ taken back:\n", 1)[1].split("\n~~~ and the line being written:")[0].split("\n")
                if reason.startswith("apply:"):  # a line TVM refused, drawn again at its own start: that line alone
                    assert len(taken) == 1 and taken[0].strip(), text
        if not checked:
            assert proc.dropped == st.retried_tokens


SAME_COUNTS = ("attempts", "lines", "rejected_decode", "rejected_apply", "rejected_end", "end_checked", "resampled",
               "truncated", "line_retries", "retried_tokens", "finished_earlier", "finished_earlier_lines",
               "checked", "check_refused", "redraws", "redraw_refused", "lazy_lines", "lazy_refused", "reasons",
               "retry_reasons")


def test_the_constraint_processes_sample_what_the_thread_samples(setup, monkeypatch):
    """``constrained.PROCESSES``: the constraints, their masks and TVM workers in processes of their own (one, or two
    sharing out the attempts: [spread] each prompt's 4 in two groups, one a process, or by prompt, as before session 36)
    give the same first and final scripts, verdicts and counts as the thread beside the forward pass -- masked every
    step and drawn then checked, with line retries (a model fond of refused compute-at lines) and an earlier finish,
    and with line starts drawn ahead of their state (``LAZY_LINE_STARTS``: every line start, so the draws do not depend
    on how the attempts are dealt out); the children's counts join the hook's, and they end when closed."""
    import os

    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.constraint_process import process_cores

    model, tok, prompts = setup
    model = _fond_of(model, tok, FOND_OF_REFUSED, 6.0)
    monkeypatch.setattr(constrained, "ANNOTATION_AND_MOVE_RULES", False)  # FOND_OF_REFUSED's moves TVM refuses
    for checked, arms, lazy in ((False, ((0, True), (1, True), (2, True), (2, False)), False),
                                (True, ((0, True), (2, True)), False), (False, ((0, True), (2, True)), True)):
        runs = []
        for processes, spread in arms:
            constrained.BACKGROUND, constrained.SAMPLE_FIRST, constrained.PROCESSES = True, checked, processes
            monkeypatch.setattr(constrained, "LAZY_LINE_STARTS", lazy)
            monkeypatch.setattr(constrained, "SPREAD_ATTEMPTS", spread)
            try:
                hook = constrained.ConstrainedDecoding(tok, line_retries=1, finish_back=4)
                torch.manual_seed(3)
                r = constrained.generate_constrained(model, tok, prompts, 4, 64, 1.0, batch_size=16, max_resamples=1,
                                                     hook=hook, cache_implementation="shared_prefix")
            finally:
                constrained.BACKGROUND = constrained.SAMPLE_FIRST = None
                constrained.PROCESSES = 0
            runs.append((r, hook))
        (a, thread_hook), *others = runs
        assert thread_hook._processes == [] and a.stats.rpc_s == a.stats.marks_s == a.stats.send_s == 0
        # (the lazy draw of this seed leaves no attempt dead: nothing to resample)
        assert a.stats.lines > 0 and a.stats.line_retries > 0 and (lazy or a.stats.resampled > 0), a.stats.as_dict()
        assert (a.stats.checked > 0) == checked
        assert (a.stats.lazy_lines > 0) == lazy and (a.stats.lazy_refused > 0) == lazy, a.stats.as_dict()
        # attempts cut at the token budget keep their last lines to be read (the first few of them)
        assert a.stats.truncated > 0 and len(a.stats.cut_examples) == min(a.stats.truncated, constrained.CUT_EXAMPLES)
        assert all(x.startswith("~~~ ") and " lines, the last " in x for x in a.stats.cut_examples)
        for (k, spread), (b, hook) in zip(arms[1:], others):
            assert len(hook._processes) == k and hook.last_constraints == []
            assert all(p.child.pid != os.getpid() and p.child.is_alive() for p in hook._processes)
            assert (b.first_scripts, b.scripts, b.first_ok) == (a.first_scripts, a.scripts, a.first_ok), (checked, k,
                                                                                                          spread)
            assert {n: getattr(b.stats, n) for n in SAME_COUNTS} == {n: getattr(a.stats, n) for n in SAME_COUNTS}
            # the children's retry examples join the hook's (which come first depends on how prompts were dealt out)
            assert b.stats.retry_examples.keys() == a.stats.retry_examples.keys() == a.stats.retry_reasons.keys()
            assert len(b.stats.cut_examples) == len(a.stats.cut_examples)
            assert b.stats.rpc_s > 0 and b.stats.first_mask_s > 0
            # the loop's time with its processes, by part: marks and masks inside the waits, sends and masking apart
            st = b.stats
            assert st.marks_s > 0 and st.send_s > 0 and st.marks_s + st.wait_s <= st.rpc_s, st.as_dict()
            assert st.apply_s > 0, st.as_dict()
            # masked every step, a step's masks come with its marks (one request a step); drawn then checked, only
            # the refused draws' masks are asked, apart
            assert (st.mask_requests > 0) == checked, st.as_dict()
            # every marks request is in the waits' buckets: its steps and seconds (the first tokens' included)
            assert sum(st.marks_wait_steps.values()) > 0 and set(st.marks_wait_steps) == set(st.marks_wait_bucket_s)
            assert sum(st.marks_wait_bucket_s.values()) == pytest.approx(st.marks_s)
            assert 0 < sum(st.marks_wait_starts.values()) <= sum(st.marks_wait_steps.values()) * 4 * len(prompts)
            # each child keeps to its share of the cores: the children and the model's loop split the host's
            for p in hook._processes:
                assert p.request(("threads",)) == {"compile": process_cores(k), "torch": 1, "tvm": "1",
                                                   "nice": min(os.nice(0) + constrained.PROCESS_NICE, 19),
                                                   "cores": sorted(os.sched_getaffinity(0)),
                                                   "worker_cores": sorted(os.sched_getaffinity(0)),
                                                   "tensor_intrinsics": False}
            hook.close()
            assert not any(p.child.is_alive() for p in hook._processes)
            # each ended by itself when its pipe closed (not killed at _stop's time limit: exit code -9)
            assert [p.child.exitcode for p in hook._processes] == [0] * k


def test_constraint_processes_share_the_cores_with_the_model():
    """N constraint processes and the model's loop split the host's cores (session 29: four children with the whole
    host's pools each were 1.46x slower than the thread on 16 cores); each keeps at least one."""
    from little_dragon.generation.constraint_process import process_cores

    assert [process_cores(n, cpus=16) for n in (1, 2, 4, 8, 16)] == [8, 5, 3, 1, 1]
    assert process_cores(2, cpus=2) == 1


def test_constraint_processes_by_the_machine():
    """``generation.constrained_processes: -1`` (the default): four processes beside a model on an accelerator of a
    16-core host (session 30's H100: 68.4 ms a step against the thread's 96.8), the thread on a CPU model or a
    smaller host."""
    import torch

    from little_dragon.generation.config import GenerationConfig
    from little_dragon.generation.constraint_process import auto_processes

    assert GenerationConfig().constrained_processes == -1
    assert auto_processes(torch.device("cuda", 0), cpus=16) == 4 and auto_processes(torch.device("cuda"), cpus=128) == 4
    assert auto_processes(torch.device("cuda"), cpus=8) == 0
    assert auto_processes(torch.device("cpu"), cpus=64) == 0


def test_constraint_processes_yield_the_cores_to_the_model_when_told(setup, monkeypatch):
    """``constrained.PROCESS_NICE``: a child (and the TVM workers it starts) runs that much nicer than the model's loop,
    whose step is the critical path; by default 10 nicer (session 42's H100), at 0 as nice as it."""
    import os

    from little_dragon.generation import constrained
    from little_dragon.generation.constraint_process import ConstraintProcess

    _, tok, _ = setup
    assert constrained.PROCESS_NICE == 10
    for nice in (0, 3):
        monkeypatch.setattr(constrained, "PROCESS_NICE", nice)
        proc = ConstraintProcess(tok, semantic=False)
        try:
            proc.wait_ready()
            assert proc.request(("threads",))["nice"] == min(os.nice(0) + nice, 19)
        finally:
            proc.close()


def test_constraint_processes_keep_off_the_model_loops_cores_when_told(setup, monkeypatch):
    """[keep cores] ``constrained.PROCESS_KEEP_CORES``: a child, and the TVM worker it starts, run on the parent's cores
    but the first N (left to the model's loop); by default, and where N would leave it none, on all of them."""
    import os

    from little_dragon.generation import constrained
    from little_dragon.generation.constraint_process import ConstraintProcess, child_cores

    assert constrained.PROCESS_KEEP_CORES == 0
    assert child_cores(2, {0, 1, 2, 3, 5}) == {2, 3, 5} and child_cores(1, {4, 7}) == {7}
    assert child_cores(0, {0, 1}) is None and child_cores(2, {0, 1}) is None and child_cores(3, {0, 1}) is None
    _, tok, _ = setup
    mine = sorted(os.sched_getaffinity(0))
    for keep in (0, 1):
        monkeypatch.setattr(constrained, "PROCESS_KEEP_CORES", keep)
        proc = ConstraintProcess(tok, semantic=True)
        try:
            proc.wait_ready()
            got = proc.request(("threads",))
            want = mine[keep:] if len(mine) > 1 else mine
            assert got["cores"] == want and got["worker_cores"] == want, (keep, got)
        finally:
            proc.close()
    assert sorted(os.sched_getaffinity(0)) == mine  # the parent's own cores untouched


def test_the_constraint_process_names_its_failures_and_is_replaced_when_it_dies(setup):
    """A request the child fails is raised in the parent with the child's traceback, and the child serves on; so is what
    a step's tokens raised there (told at the next request), also beside a second process.  A child that dies fails the request with its exit code,
    and the next engine call starts a new one."""
    import torch

    from little_dragon.generation.constrained import ConstraintStats
    from little_dragon.generation.constraint_process import (ConstraintProcess, ConstraintProcessError,
                                                             ProcessAttempts)

    _, tok, prompts = setup
    proc = ConstraintProcess(tok, semantic=False)
    stats = ConstraintStats()
    calls = ProcessAttempts([proc], prompts[:1], 2, False, False, stats)
    scores = torch.zeros(1, proc.vocab_size)
    with pytest.raises(ConstraintProcessError, match=r"failed 'masks'(.|\n)*IndexError"):
        calls(torch.tensor([7]), None, scores)
    assert calls.line_marks(torch.tensor([0, 1])) == ([0, 0], [True, True])
    calls.ahead(torch.tensor([9]), torch.tensor([5]))
    with pytest.raises(ConstraintProcessError, match=r"IndexError"):
        calls.line_marks(torch.tensor([0]))
    calls(torch.tensor([1]), None, scores)  # serves on: attempt 1's first mask
    assert torch.isinf(scores).any() and not torch.isinf(scores).all()
    # two processes (prompt p's attempt j to process j % 2): one fails a request, the other's answer to it is still read, so the
    # next request's answers are that request's
    other = ConstraintProcess(tok, semantic=False)
    two = ProcessAttempts([proc, other], prompts[:2], 2, False, False, stats)
    with pytest.raises(ConstraintProcessError, match=r"IndexError"):
        two(torch.tensor([0, 2, 9]), None, torch.zeros(3, proc.vocab_size))  # 9: prompt 4, held by no one
    assert two.line_marks(torch.tensor([0, 1, 2, 3])) == ([0] * 4, [True] * 4)
    other.close()
    proc.child.kill()
    proc.child.join()
    with pytest.raises(ConstraintProcessError, match=r"exit code -9"):
        calls.line_marks(torch.tensor([0]))
    again = ProcessAttempts([proc], prompts[:1], 1, False, False, stats)
    assert proc.started == 2 and again.line_marks(torch.tensor([0])) == ([0], [True])
    proc.close()
    assert not proc.child.is_alive()


def test_a_prompts_attempts_are_dealt_out_among_the_processes(setup, monkeypatch):
    """[spread] Two processes, two prompts of 4 attempts: each process holds two attempts of each prompt (a prompt's
    group i in process i), so the attempts of one prompt, which start lines and end together, work side by side; by
    prompt (``SPREAD_ATTEMPTS`` False, before session 36) prompt p's 4 in process p.  Each process numbers its share
    from 0, and 3 processes for 4 attempts (gcd 1) deal by prompt.  (That the scripts are the thread's either way:
    ``test_the_constraint_processes_sample_what_the_thread_samples``.)"""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.constrained import ConstraintStats
    from little_dragon.generation.constraint_process import ConstraintProcess, ProcessAttempts

    _, tok, prompts = setup
    procs = [ConstraintProcess(tok, semantic=False) for _ in range(3)]
    try:
        for spread, k, want in ((True, 2, {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}),
                                (False, 2, {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}),
                                (True, 3, {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]})):
            monkeypatch.setattr(constrained, "SPREAD_ATTEMPTS", spread)
            calls = ProcessAttempts(procs[:k], prompts[:2], 4, False, False, ConstraintStats())
            split = calls._split(list(range(8)))
            assert {i: where for i, (where, _, _) in split.items()} == want, (spread, k)
            assert all(local == list(range(len(local))) for _, local, _ in split.values())
            # the answers come back in the attempts' order, whichever process holds them
            assert calls.line_marks(torch.tensor([7, 0, 5, 2])) == ([0] * 4, [True] * 4)
            calls.close()
    finally:
        for proc in procs:
            proc.close()


def test_the_constraint_processes_profile_their_steps_when_told(setup, monkeypatch):
    """[process profile] ``PROFILE_PROCESSES``: each process profiles its steps (from its first request after a step's
    marks up to the next marks' answer), those of ``PROFILE_SLOW_MS`` or more apart with the slowest named, and hands
    the listing back with its counts at ``results``; off, nothing is profiled."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.constrained import ConstraintStats
    from little_dragon.generation.constraint_process import ConstraintProcess, ProcessAttempts

    _, tok, prompts = setup
    procs = [ConstraintProcess(tok, semantic=False) for _ in range(2)]
    ids = torch.tensor([0, 1, 2, 3])
    try:
        for on, slow_ms in ((True, 0.0), (True, 1e9), (False, 0.0)):
            monkeypatch.setattr(constrained, "PROFILE_PROCESSES", on)
            monkeypatch.setattr(constrained, "PROFILE_SLOW_MS", slow_ms)
            stats = ConstraintStats()
            calls = ProcessAttempts(procs, prompts[:1], 4, False, False, stats)
            texts = [""] * 4
            for _ in range(3):  # three steps of masks, a draw and marks: 4 marks, so 4 steps a process
                calls.line_marks(ids)
                scores = calls(ids, None, torch.zeros(4, procs[0].vocab_size))
                drawn = scores.argmax(-1)
                calls.ahead(ids, drawn)
                texts = [t + tok.decode([int(d)]) for t, d in zip(texts, drawn)]
            calls.line_marks(ids)
            calls.results([texts], 4)
            calls.close()
            if not on:
                assert stats.process_profiles == []
                continue
            assert len(stats.process_profiles) == 2  # one a process
            slow, fast = (4, 0) if slow_ms == 0 else (0, 4)
            for text in stats.process_profiles:
                assert f"=== slow steps (>= {slow_ms:g} ms: slow): {slow}," in text
                assert f"=== fast steps (>= {slow_ms:g} ms: slow): {fast}," in text
                assert "=== the TVM worker's lines: 0 extended, 0 replayed" in text  # syntax only: no TVM work
                named = [line for line in text.splitlines() if line.strip().endswith("line starts")]
                assert len(named) == slow  # the slow steps named: their requests, attempts and line starts
                if slow:
                    assert "masks+ahead+marks 2 attempts" in text and "_mask_rows" in text
    finally:
        for proc in procs:
            proc.close()


def _recorded_call(model, tok, prompts, k, max_new_tokens, temperature, **kw):
    """One engine call of a fresh hook's processor (line retries 3; ``kw`` to ``attempt_processor``) under
    ``RecordingBack``: (its counts, its constraints, the recorder, the engine's output)."""
    import torch

    from little_dragon.generation import constrained
    from little_dragon.generation.shared_prefix import sample_token_ids

    hook = constrained.ConstrainedDecoding(tok, line_retries=3)
    inner = hook.attempt_processor(prompts, k, **kw)
    proc = RecordingBack(inner)
    try:
        out = sample_token_ids(model, tok, prompts, k, max_new_tokens, temperature, prompts_per_chunk=4,
                               logits_processor=proc, generator=torch.Generator().manual_seed(3))
    finally:
        inner.close()
    return hook.stats, inner.constraints, proc, out


def _kept_as_alone(model, tok, prompts, k, constraints, out, temperature):
    """Each attempt of ``out`` (prompt p, attempt j, its kept tokens, whether it ended, the masked log-softmax of the
    model on them alone), once checked: what it keeps a fresh constraint of its prompt allows token by token, and it
    ends in that constraint's state."""
    for p, attempts in enumerate(out.token_ids):
        for j, new in enumerate(attempts):
            c = constraints[p * k + j]
            done = int(c.done)
            assert _allowed_by_a_fresh_constraint(tok, prompts[p], new, done) is None, (p, j)
            alone, fresh = _alone(model, tok, prompts[p], new, done, temperature)
            assert (c.text, c.dead, c.done) == (fresh.text, fresh.dead, fresh.done), (p, j, c.error, fresh.error)
            yield p, j, new, done, alone


def test_attempts_that_hold_for_their_end_check_keep_the_masked_distribution(setup):
    """[end wait] On the engine, with line retries and ``end_wait`` 2: an attempt at `post *` holds two steps for its
    end check (tokens the engine takes back with the rest), then ends, or goes back to its tiling.  What every attempt
    keeps is what a fresh constraint of its prompt allows token by token and ends in the same state, and each kept
    token (its end included) was drawn from the masked distribution of the model on the kept tokens alone: the held
    steps leave no trace."""
    model, tok, prompts = setup
    model = _fond_of(model, tok, "blk C\nloops b0 3\nsplit l1 8\npost *\n", 6.0)
    k, temperature = 4, 1.0
    st, constraints, proc, out = _recorded_call(model, tok, prompts, k, 96, temperature, defer_end=True, end_wait=2)
    ended = [c for c in constraints if c.done and c.finished and not c.dead]
    assert st.held_tokens >= 2 * len(ended) > 0 and proc.dropped == st.retried_tokens + st.held_tokens, st.as_dict()
    for p, j, new, done, alone in _kept_as_alone(model, tok, prompts, k, constraints, out, temperature):
        _drawn_as_alone(proc.out[p * k + j], alone, len(new) + done, temperature, (p, j))


def test_end_checks_on_several_workers_draw_the_same_attempts(setup, monkeypatch):
    """[end workers] ``END_CHECK_WORKERS`` 2: the deferred end checks run on two TVM workers side by side (each
    end-check thread its own), and the engine draws the same attempts with the same counts as on one: a verdict is read
    at the step the end wait says, whichever worker gave it."""
    import threading

    from little_dragon.generation import constrained

    model, tok, prompts = setup
    model = _fond_of(model, tok, "blk C\nloops b0 3\nsplit l1 8\npost *\n", 6.0)
    runs = []
    for workers in (1, 2):
        monkeypatch.setattr(constrained, "END_CHECK_WORKERS", workers)
        st, constraints, _, out = _recorded_call(model, tok, prompts, 4, 96, 1.0, defer_end=True, end_wait=2)
        runs.append((out.token_ids, [(c.text, c.dead, c.done, c.error) for c in constraints],
                     {n: getattr(st, n) for n in SAME_COUNTS + ("held_tokens",)}))
    assert runs[0] == runs[1] and runs[0][2]["end_checked"] > 0 and runs[0][2]["held_tokens"] > 0, runs[0][2]
    # two checks at once run on the two workers
    both = threading.Barrier(2)

    def role() -> str:
        both.wait(timeout=30)
        return constrained._END_ROLE.name

    futures = [constrained._end_checks().submit(role) for _ in range(2)]
    assert sorted(f.result(timeout=60) for f in futures) == ["end", "end1"] == constrained.end_roles()


def test_lines_started_ahead_of_their_state_keep_the_masked_distribution(setup, monkeypatch):
    """[lazy line starts] With ``lazy`` and line retries (a model fond of compute-at lines TVM refuses): each line's
    first token is drawn before its state is known, from every token a line may start with, and kept only if the line's
    mask allows it once known (else taken back and drawn again under the mask; with the line before it when TVM refused
    that line).  What every attempt keeps is what a fresh constraint of its prompt allows token by token and ends in the
    same state; each kept token was drawn from the masked distribution of the model on the kept tokens alone, or, at a
    line start drawn ahead, from the same logits over the line-start mask, a superset of the line's mask holding the
    token (so the token's law is the masked one: p(t)/p(S) + (1 - p(A)/p(S)) p(t)/p(A) = p(t)/p(A)).  The taken-back
    tokens are counted."""
    import torch

    from little_dragon.generation import constrained

    model, tok, prompts = setup
    model = _fond_of(model, tok, FOND_OF_REFUSED, 6.0)
    monkeypatch.setattr(constrained, "ANNOTATION_AND_MOVE_RULES", False)  # FOND_OF_REFUSED's moves TVM refuses
    k, temperature = 4, 1.0
    st, constraints, proc, out = _recorded_call(model, tok, prompts, k, 64, temperature, lazy=True)
    assert st.lazy_lines > 0 and st.lazy_refused > 0 and st.line_retries > 0, st.as_dict()
    assert proc.dropped == st.retried_tokens + st.lazy_refused, st.as_dict()
    eng = constrained.engine_for(tok)
    start = constrained.unpack_bitmask(eng.line_start_mask((eng.vocab_size + 31) // 32)[None], eng.vocab_size)[0]
    ahead = 0
    for p, j, new, done, alone in _kept_as_alone(model, tok, prompts, k, constraints, out, temperature):
        got = [torch.log_softmax(s / temperature, -1) for s in proc.out[p * k + j]]
        assert len(got) == len(new) + done, (p, j)
        for s, (g, want) in enumerate(zip(got, alone)):
            fin = torch.isfinite(want)
            if not torch.equal(torch.isfinite(g), fin):  # a line start drawn ahead: over the line-start mask
                ahead += 1
                assert torch.equal(torch.isfinite(g[:eng.vocab_size]), start[:g.shape[0]]), (p, j, s)
                assert bool(fin[new[s]]) and not bool((fin & ~torch.isfinite(g)).any()), (p, j, s)
                shift = g[fin] - want[fin]  # the same logits renormalised over more tokens: a constant shift
                assert torch.allclose(shift, shift[0].expand_as(shift), atol=2e-4), (p, j, s)
                continue
            assert torch.allclose(g[fin], want[fin], atol=2e-4), (p, j, s)
    assert ahead > 0
