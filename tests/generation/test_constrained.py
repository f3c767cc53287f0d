"""Constrained decoding (generation/constrained.py): the constraint accepts every real harvested trace token
by token, forbids what the workload rules out, and a model generating under it writes scripts that decode.

Real parts only: real MetaSchedule records (the committed llvm/CUDA databases of tests/codec/data, the
session's tiny real llvm harvest, and the H200 harvest under data/harvest when it is pulled), the real
codec, TVM schedules, llguidance, SmolLM2's tokenizer and a byte-level BPE trained on the scripts (the tiny
model's kind).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from dragon_testkit import kept_what_it_checked

ROOT = Path(__file__).resolve().parents[2]
CODEC_DATA = ROOT / "tests" / "codec" / "data"
# every record of these is fed through the constraint; the H200 harvest (902 records) is covered by
# benchmarks/constrained_bench.py --harvest (results/constrained-decoding.md): here one record per workload
# (48, `post *` form) when data/ is pulled (`dvc pull data.dvc`), to stay within the test budget
CUDA_HARVEST = ROOT / "data" / "harvest" / "cuda-sm_90-6e5dd8"
CUDA_PER_WORKLOAD = 1


def _records(db_dirs, per_workload=None, measured=False):
    """(workload name, module, target JSON, trace JSON) of every record of MetaSchedule databases; ``measured``: and
    whether MetaSchedule built and ran it (finite run_secs; a candidate that failed is stored with 1e10)."""
    from little_dragon.codec.roundtrip import RECORD_FILE, read_database

    for db in db_dirs:
        lines = (Path(db) / RECORD_FILE).read_text().splitlines()
        for name, mod, recs in read_database(db):
            for n, trace_json, target in recs[:per_workload]:
                if measured:
                    ran = all(float(x) < 1e9 for x in json.loads(lines[n])[1][1])
                    yield name, mod, target, trace_json, ran
                else:
                    yield name, mod, target, trace_json


def _forms(trace_json) -> list[tuple[str, str]]:
    """The script as the model writes it (post-processing derived: ``post *``) and self-contained."""
    from little_dragon.codec import encode

    text = encode(trace_json)
    lines = text.splitlines()
    # as the encoder writes it: one newline after the last line (a blank line is not canonical white space)
    forms = [("self-contained", text if text.endswith("\n") else text + "\n")]
    if "post" in lines:
        forms.insert(0, ("post *", "\n".join(lines[:lines.index("post")] + ["post *"]) + "\n"))
    return forms


def _feed(engine, workload, text, tokenizer, eos=True):
    """Feed ``text`` (+ EOS: a whole script) token by token; returns None when every token was allowed, else
    where not."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask

    c = ScriptConstraint(engine, workload)
    bits = allocate_bitmask(1, engine.vocab_size)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
    for i, t in enumerate(ids):
        c.fill_mask(bits, 0)
        if not (int(bits[0, t // 32]) >> (t % 32)) & 1:
            if c.dead and c.error.startswith("post:"):
                return c.error  # the end check refused the script at its `post` line: the rest of its section is moot
            return f"token {i} {tokenizer.decode([t])!r} after {tokenizer.decode(ids[:i])[-120:]!r}: {c.error}"
        c.advance(t)
    return c.error or None


def _db_dirs(harvested):
    dirs = sorted((CODEC_DATA / "real_llvm_db").iterdir())
    dirs += [CODEC_DATA / "real_cuda_db", CODEC_DATA / "real_cuda_valid_db", CODEC_DATA / "real_cuda_simt_db"]
    dirs += sorted(p for p in (harvested / "harvest").glob("*/db/*") if p.is_dir())
    return dirs


def test_real_harvest_records_are_never_forbidden(harvested, smollm2):
    """Every record of the committed real databases and the session's real llvm harvest, in both script
    forms, is accepted token by token (SmolLM2's tokenizer) with the workload's semantic constraints on;
    and a sample of every workload of the H200 harvest when data/ is pulled.  The end-of-script check agrees with
    MetaSchedule: it passes every record MetaSchedule built and ran; a record whose build failed in tuning
    (run_secs 1e10: the committed CUDA ones, TVM's tensor-core lowering refuses them) may be rejected at its
    `post *`, and only there."""
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    dirs = _db_dirs(harvested)
    per = {d: None for d in dirs}
    if CUDA_HARVEST.is_dir():
        for d in sorted((CUDA_HARVEST / "db").iterdir()):
            if d.is_dir():
                per[d] = CUDA_PER_WORKLOAD
    checked, failures, rejected_at_end = 0, [], 0
    for d, n in per.items():
        for name, mod, target, trace_json, ran in _records([d], n, measured=True):
            for form, text in _forms(trace_json)[:1 if n else None]:
                why = _feed(engine, Workload(mod, target), text, smollm2)
                checked += 1
                if why and not ran and why.startswith("post:"):
                    rejected_at_end += 1  # MetaSchedule's build failed too: every token allowed, the end refuses
                elif why:
                    failures.append(f"{name} ({form}, {'measured' if ran else 'failed in tuning'}): {why}")
    assert checked >= 2 * 4 + 2 * 2 + 3 + 20, checked  # the committed records and the tiny harvest's
    assert failures == []
    assert rejected_at_end >= 2  # the committed failed CUDA records: refused at their end, as MetaSchedule's build


def test_real_records_accepted_with_a_corpus_bpe(harvested):
    """The tiny model's kind of tokenizer (byte-level BPE over phrases: tokens such as ' = 1 1\\n' span
    several grammar terminals and end lines) accepts the same records."""
    from little_dragon.generation.constrained import TokenEngine, Workload
    from little_dragon.tokenizer import train_bpe_tokenizer

    recs = list(_records(_db_dirs(harvested)[:2] + [CODEC_DATA / "real_cuda_valid_db"]))  # llvm, CUDA measured
    texts = [t for *_, tj in recs for _, t in _forms(tj)]
    tok = train_bpe_tokenizer(texts * 4, vocab_size=600, split="phrases")
    assert any("\n" in tok.convert_tokens_to_string([t]) and len(tok.convert_tokens_to_string([t])) > 2
               for t in tok.get_vocab()), "the BPE should have line-ending multi-character tokens"
    engine = TokenEngine(tok)
    for name, mod, target, tj in recs:
        for form, text in _forms(tj):
            assert _feed(engine, Workload(mod, target), text, tok) is None, (name, form)


def _matmul_workload():
    from dragon_testkit import matmul_tensors, prim_module

    from little_dragon.generation.constrained import Workload

    return Workload(prim_module(matmul_tensors(96)), json.dumps({"kind": "llvm", "num-cores": 2}))


def _allowed(engine, workload, text, tokenizer) -> bool:
    """``text`` is allowed as the beginning of a script (no end: EOS comes only after the post-processing)."""
    return _feed(engine, workload, text, tokenizer, eos=False) is None


def test_forbids_a_bad_block_name_a_non_dividing_tile_and_unknown_variables(smollm2):
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay
    from little_dragon.generation.constrained import TokenEngine, Workload

    engine = TokenEngine(smollm2)
    wl = _matmul_workload()
    good = "blk C\nloops b0 3\ntile l0 = 4 8 3\n"
    assert _allowed(engine, wl, good, smollm2)
    # the workload has blocks C and root only
    assert not _allowed(engine, wl, "blk D\n", smollm2)
    assert not _allowed(engine, wl, "blk Cx\n", smollm2)
    # every factor divides what remains of 96: 10 and 5 never do, nor 8 after 4 and 4 (6 remains)
    assert not _allowed(engine, wl, "blk C\nloops b0 3\ntile l0 = 10\n", smollm2)
    assert not _allowed(engine, wl, "blk C\nloops b0 3\ntile l0 = 4 5 2\n", smollm2)
    assert not _allowed(engine, wl, "blk C\nloops b0 3\ntile l0 = 4 4 4 8\n", smollm2)
    # TVM's SamplePerfectTile keeps t2..tN and sets t1 := 96 / (t2*..*tN) when it replays a decision: the first
    # factor is TVM's to fix, so `4 8 4` (t2*t3 = 32 divides 96) is allowed and TVM builds the perfect (3, 8, 4)
    for text, perfect in (("tile l0 = 4 8 4\n", [3, 8, 4]), ("tile l0 = 4 8\n", [12, 8])):
        assert _allowed(engine, wl, "blk C\nloops b0 3\n" + text, smollm2), text
        sch = replay(wl.mod, codec.decode("blk C\nloops b0 3\n" + text, codec.SyntaxOnlyContext())).sch
        assert [int(x) for x in sch.trace.decisions[sch.trace.insts[2]]] == perfect, text
    # the attempt's script carries the factor TVM ran: the script is the trace applied, its tile perfect
    from dragon_testkit import feed_constraint

    text = "blk C\nloops b0 3\ntile l0 = 4 8 4\npost *\n"
    why, c = feed_constraint(engine, wl, smollm2, text)
    assert why is None, why
    c.advance(smollm2.eos_token_id)
    assert c.script(text) == "blk C\nloops b0 3\ntile l0 = 3 8 4\npost *\n"
    # C has 3 loops above it; b1 and l3 do not exist; after the split l0 is gone
    assert not _allowed(engine, wl, "blk C\nloops b0 2\n", smollm2)
    assert not _allowed(engine, wl, "blk C\nloops b1 3\n", smollm2)
    assert not _allowed(engine, wl, "blk C\nloops b0 3\npar l3\n", smollm2)
    assert not _allowed(engine, wl, good + "par l0\n", smollm2)
    assert _allowed(engine, wl, good + "par l3\n", smollm2)
    # categorical decisions index their candidates
    assert _allowed(engine, wl, "blk root\nann b0 unroll cat unroll = 3\n", smollm2)
    assert not _allowed(engine, wl, "blk root\nann b0 unroll cat unroll = 4\n", smollm2)
    assert not _allowed(engine, wl, "blk root\nann b0 unroll cat 0 16 = 2\n", smollm2)
    assert _allowed(engine, wl, "blk root\nann b0 unroll cat 0 16 64 = 2\n", smollm2)
    many = " ".join(str(i) for i in range(20))
    assert _allowed(engine, wl, f"blk root\nann b0 unroll cat {many} = 19\n", smollm2)
    # l10 carries the reduction iter k: par/vec/a block bind are masked (TVM's iter-type rule), a threadIdx bind
    # (cross-thread reduction) is not, on a GPU (on this llvm workload no GPU thread at all: the target rule)
    gpu = Workload(wl.mod, json.dumps({"kind": "cuda", "arch": "sm_90"}))
    assert not _allowed(engine, wl, good + "loops b0 5\npar l10\n", smollm2)
    assert not _allowed(engine, gpu, good + "loops b0 5\nbind l10 bx\n", smollm2)
    assert _allowed(engine, gpu, good + "loops b0 5\nbind l10 tx", smollm2)
    assert not _allowed(engine, wl, good + "loops b0 5\nbind l10 tx", smollm2)
    # an annotation's value is a literal, a value variable or a list: TVM's Annotate refuses a block or loop (TypeError)
    from dragon_testkit import tvm_accepts

    for line in ("ann b0 max_step l3\n", "ann l3 key b0\n", "ann b0bind l3\n"):
        assert not tvm_accepts(wl.mod, good + line), line
        assert not _allowed(engine, wl, good + line, smollm2), line
    assert _allowed(engine, wl, good + "ann l3 max_step 16\n", smollm2)
    assert _allowed(engine, wl, good + 'ann b0 tiling "x"\n', smollm2)
    # fuse joins a loop with its only child, outer first (l6..l10 = i0 i1 i2 j k): TVM's Fuse refuses the others
    assert not _allowed(engine, wl, good + "loops b0 5\nfuse l6 l9\n", smollm2)
    assert not _allowed(engine, wl, good + "loops b0 5\nfuse l7 l6\n", smollm2)
    assert _allowed(engine, wl, good + "loops b0 5\nfuse l6 l7 l8\n", smollm2)
    # C (b0) is an output block with an init statement: TVM's ComputeInline refuses it, and so does the mask
    assert not _allowed(engine, wl, good + "inline b0\n", smollm2)
    # the reject at line end: TVM refuses to reverse-inline C, which has no producer block (not checked while
    # decoding); the attempt is dead
    assert "apply" in (_feed(engine, wl, good + "rinline b0\n", smollm2) or "")


def _train_briefly(model, tok, texts, steps=40):
    """A few real optimiser steps on script texts, so the small model ends lines and scripts (a model with
    random weights picks among thousands of allowed name tokens and rarely ends a line)."""
    import torch

    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def test_generation_under_constraint_writes_scripts_that_decode(smollm2):
    """A small model briefly trained on real scripts, sampling under the constraint: every attempt decodes,
    the ones that pass their line checks apply to the workload; the same model sampling freely does not
    reach that."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from little_dragon import codec
    from little_dragon.datasets.prompts import construction_prompt
    from little_dragon.generation.constrained import generate_constrained
    from little_dragon.training.callbacks import sample_scripts

    wl = _matmul_workload()
    tok = smollm2
    tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
                                         bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    prompt = construction_prompt(wl.mod.script(), json.loads(wl.target))
    texts = [t + tok.eos_token for *_, tj in _records(sorted((CODEC_DATA / "real_llvm_db").iterdir()))
             for _, t in _forms(tj)[:1]]
    _train_briefly(model, tok, [t[:400] for t in texts])
    rng = torch.get_rng_state()
    res = generate_constrained(model, tok, [prompt], k=4, max_new_tokens=96, temperature=1.0, batch_size=4,
                               max_resamples=1)
    scripts = res.scripts[0]
    assert len(scripts) == 4 and res.stats.attempts >= 4 and res.stats.lines > 0, res.stats
    assert any(s.strip() for s in scripts), scripts  # a budget of 96 tokens can end mid-line (complete lines kept)
    for s in scripts:
        codec.decode(s, codec.SyntaxOnlyContext())  # raises DecodeError if not
    # a step's constraint work beside the forward pass in a thread (the accelerator default) samples the
    # very same scripts as the same work done in the caller's thread (the CPU default)
    from little_dragon.generation import constrained

    after = torch.get_rng_state()
    for background in (False, True):
        constrained.BACKGROUND = background
        try:
            torch.set_rng_state(rng)
            r = generate_constrained(model, tok, [prompt], k=4, max_new_tokens=96, temperature=1.0, batch_size=4,
                                     max_resamples=1)
        finally:
            constrained.BACKGROUND = None
        assert (r.first_scripts, r.scripts, r.stats.lines) == (res.first_scripts, res.scripts, res.stats.lines)
    # resampled attempts keep what their own constraint checked (complete lines; a failing line only when
    # TVM refused it): two prompts x 3 attempts, so the resample batch differs in size from the first pass
    hook = constrained.ConstrainedDecoding(tok)
    r = generate_constrained(model, tok, [prompt, prompt], k=3, max_new_tokens=96, temperature=1.0, batch_size=6,
                             max_resamples=1, hook=hook)
    pending = [(p, a) for p in range(2) for a in range(3) if not r.first_ok[p][a]]
    assert r.stats.resampled == len(pending)
    if pending:
        assert len(hook.last_constraints) == len(pending)
        for (p, a), c in zip(pending, hook.last_constraints):
            s = r.scripts[p][a]
            assert kept_what_it_checked(s, c), (s, c.text, c.error)
    torch.set_rng_state(after)
    free = sample_scripts(model, tok, [prompt], 96, 1.0, batch_size=4, num_return_sequences=4)
    decoded = 0
    for s in free:
        try:
            decoded += bool(codec.decode(s, codec.SyntaxOnlyContext())[0])
        except Exception:  # noqa: BLE001
            pass
    assert decoded < 4, free


def test_masked_log_probs_match_the_constrained_sampler(smollm2):
    """RL consistency: replaying a completion reproduces the sampler's masks, and the masked log-probs are
    a proper distribution over the allowed tokens (the sampled token always has finite log-prob)."""
    import torch

    from little_dragon.datasets.prompts import construction_prompt
    from little_dragon.generation.constrained import TokenEngine, masked_log_probs, replay_masks

    engine = TokenEngine(smollm2)
    wl = _matmul_workload()
    prompt = construction_prompt(wl.mod.script(), json.loads(wl.target))
    ids = smollm2("blk C\nloops b0 3\ntile l0 = 4 8 3\n", add_special_tokens=False)["input_ids"]
    masks = replay_masks(engine, prompt, ids)
    assert masks.shape == (len(ids), engine.vocab_size)
    assert all(bool(masks[i, t]) for i, t in enumerate(ids))
    after_tile = len(smollm2("blk C\nloops b0 3\ntile l0 =", add_special_tokens=False)["input_ids"])
    assert masks[after_tile].sum() < 64  # white space only (of 49k tokens): a divisor of 96 follows
    logits = torch.randn(len(ids), masks.shape[1] + 7, requires_grad=True)
    lp = masked_log_probs(logits, masks, torch.tensor(ids))
    assert torch.isfinite(lp).all()
    probs = torch.softmax(logits.detach().masked_fill(~torch.nn.functional.pad(masks, (0, 7)), float("-inf")), -1)
    assert torch.allclose(lp.exp(), probs[torch.arange(len(ids)), torch.tensor(ids)], atol=1e-6)
    lp.sum().backward()
    assert logits.grad is not None


def test_incremental_decode_equals_the_codecs_decode(harvested):
    """The constraint decodes a script one line at a time on the decoder state of the prefix before it
    (``constrained._decode``); on every prefix of real records it equals the codec's whole-text decode."""
    from little_dragon import codec
    from little_dragon.generation import constrained

    checked = 0
    for _, _, _, trace_json in _records(_db_dirs(harvested)):
        lines = codec.encode(trace_json).splitlines()
        if "post" in lines:
            lines = lines[:lines.index("post")]
        for i in range(1, len(lines) + 1):
            text = "\n".join(lines[:i]) + "\n"
            assert constrained._decode(text) == codec.decode(text, codec.SyntaxOnlyContext()), (i, lines[i - 1])
            checked += 1
        constrained._DECODED.data.clear()  # and a whole script with no prefix cached
        assert constrained._decode(text) == codec.decode(text, codec.SyntaxOnlyContext())
    assert checked > 100
    bad = "blk C\nloops b0 3\ntile l7 = 4 8 3\n"
    with pytest.raises(codec.DecodeError):
        constrained._decode(bad)
    with pytest.raises(codec.DecodeError):
        codec.decode(bad, codec.SyntaxOnlyContext())


def test_schedule_facts_match_the_schedule_api():
    """``constrain_state`` queries TVM's FFI directly (no Python type checker); its facts are the ones the
    public ``Schedule`` methods give."""
    from tvm.s_tir import Schedule, Trace

    from little_dragon import codec
    from little_dragon.generation.constrain_state import prefix_state

    wl = _matmul_workload()
    for text in ("blk C\n", "blk C\nloops b0 3\ntile l0 = 4 8 3\n", "blk C\nblk root\nloops b0 3\n"
                 "tile l0 = 4 8 3\nann b1 .unroll_explicit cat unroll = 3\n"):
        trace_json = codec.decode(text, codec.SyntaxOnlyContext())
        st = prefix_state(wl.mod, trace_json)
        sch = Schedule(wl.mod, debug_mask=0)
        Trace.apply_json_to_schedule(trace_json, sch)
        blocks = [rv for inst in sch.trace.insts for rv in inst.outputs if type(rv).__name__ == "SBlockRV"]
        assert sorted(st.blocks) == list(range(len(blocks)))

        def count(query):  # -1: TVM refuses the query (the root block has no producers/consumers scope)
            try:
                return len(query())
            except Exception:  # noqa: BLE001
                return -1

        for k, rv in enumerate(blocks):
            assert st.blocks[k] == sch.get(rv).name_hint
            assert st.n_loops_above[k] == count(lambda: sch.get_loops(rv))
            assert st.n_children[k] == count(lambda: sch.get_child_blocks(rv))
            assert st.n_producers[k] == count(lambda: sch.get_producers(rv))
            assert st.n_consumers[k] == count(lambda: sch.get_consumers(rv))
        assert sorted(st.block_names) == sorted(["root", "C"])


def test_line_by_line_apply_equals_replaying_the_prefix(harvested):
    """The constraint applies each line to a copy of the prefix's live schedule (``constrain_state.extend``);
    on every prefix of real records (llvm and CUDA tensor-core) the facts and the scheduled IR equal those
    of applying the whole prefix to a fresh schedule, and the two agree on which prefixes fail."""
    import dataclasses

    import tvm_ffi

    from little_dragon import codec
    from little_dragon.generation import constrained
    from little_dragon.generation.constrain_state import live_state, replay

    checked = 0
    unchanged_seen: set[bool] = set()
    from little_dragon.generation import schedule_worker

    before = dict(schedule_worker.APPLIED)
    for _, mod, target, trace_json in _records(_db_dirs(harvested)[:5], 2):
        from little_dragon.tvmx.postprocs import needs_tensor_intrinsics

        if needs_tensor_intrinsics(trace_json):
            from little_dragon.tvmx.build import import_tensor_intrinsics

            import_tensor_intrinsics()
        lines = codec.encode(trace_json).splitlines()
        if "post" in lines:
            lines = lines[:lines.index("post")]
        key = ("test", id(trace_json))
        for i in range(len(lines) + 1):
            text = "\n".join(lines[:i]) + "\n" if i else ""
            state = constrained._prefix_state(mod, text, key)
            fresh = replay(mod, constrained._decode(text) if text else [[], []])
            expect = live_state(fresh)
            # the worker's `unchanged` (a structural hash, then equality) against structural equality alone
            expect.unchanged = bool(tvm_ffi.structural_equal(fresh.sch.mod, mod))
            expect.lookup_run = schedule_worker.lookup_run(text)  # a fact of the text, not of the schedule
            unchanged_seen.add(expect.unchanged)
            assert dataclasses.asdict(state) == dataclasses.asdict(expect), (i, lines[i - 1])
            assert schedule_worker._LIVE.get((key, text)).sch.mod.script() == fresh.sch.mod.script(), i
            checked += 1
    assert checked > 100 and unchanged_seen == {True, False}
    assert schedule_worker.APPLIED["extended"] - before.get("extended", 0) > checked // 2  # mostly one line
