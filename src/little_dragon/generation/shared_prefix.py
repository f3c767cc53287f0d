"""Shared-prefix sampling: the k attempts of a prompt read its KV cache once (``cache_implementation: shared_prefix``).

``model.generate(num_return_sequences=k)`` copies every prompt k times: k prefills, k copies of the prompt's KV
cache, and each decoding step reads all k copies again -- with kernels and scripts of 1.5-4k tokens and attempts
of ~300, nearly all of a step's memory traffic is the same prompt read k times (the H200 profile of issue 13:
attention over padded prompts was 51 of 88 ms per step). Here one cache row holds a prompt once, followed by its
k attempts' tokens interleaved::

    row i of the KV cache:  [pad..pad prompt_i][a0 a1 .. a(k-1)]@t=0 [a0 .. a(k-1)]@t=1 ...
    (step t of attempt j sits at column Lp + t*k + j; Lp = the chunk's padded prompt length)

Each decoding step is one forward of the model's own ``forward`` on the k next tokens of every row as k query
positions, with a 4-D mask (attempt j sees the prompt's real tokens and its own earlier tokens, nothing else)
and position ids ``len(prompt_i) + t``, so every attempt is computed exactly as if it were alone. Rows whose k
attempts all ended leave the batch (their cache rows are dropped), and the next prompts take their places at once
(continuous batching of rows, ``_Refill``): ``prompts_per_chunk`` rows decode at a time, a prompt entering at step s
is prefilled (left padded to the call's longest prompt) and appended as a row whose attempts' columns start at step s
(positions and masks per attempt from then on, as after tokens are taken back, below); once every row in the batch
entered at step s or later, the columns of the steps before s are dropped (``COMPACT_STEPS`` at a time), so attention
spans the rows' own steps.  A chunk of rows used to decode until its longest attempt ended, most of its rows idle
behind it (the H200 A/B of session 28: 8 rows, 1,280 steps a chunk).  A row may also hold fewer than a prompt's k
attempts (``ROW_ATTEMPTS``: the prompt in k / ROW_ATTEMPTS rows, its keys and values once a row): a row then leaves
when its own attempts have ended, and each attempt's step reads its row's columns only (``n`` of them a step), not
all k attempts'.  Attention is ``grouped_sdpa``
(``generation.grouped_attention``): GQA's shared K/V heads are read once, never repeated per query head.

The cache, the model, the mask conventions are transformers' own (``DynamicCache``, a 4-D boolean mask passed
as is); only the batching is ours: no library available to us (transformers' continuous batching builds one
dense mask over the whole flattened batch with SDPA, forks copy blocks; vLLM/FlashInfer are not on the device)
shares a prompt across samples. Sampling is plain temperature sampling (``top_k`` 0, as ``sample_scripts``
asks ``generate`` for); temperature 0 is greedy, one attempt repeated k times.

**A per-step logits processor** (``logits_processor``: constrained decoding, ``generation.constrained``) sees the
attempts by their own ids, which never change while rows leave the batch: attempt ``p * n + j`` is attempt ``j``
of ``prompts[p]`` (``n`` = k, or 1 when greedy).  Every step, before the model's next forward pass, the engine
hands it the tokens just sampled, ``proc.ahead(attempts, tokens, final)`` (``attempts`` the ids of the attempts
that sampled them, EOS included; ``final``: no forward pass follows, the last tokens of the call), so its work on
them can run while the model computes; after the forward it calls ``proc(attempts, input_ids, scores)`` on the
attempts that have not ended: ``input_ids`` ``[m, t]`` their tokens so far (after tokens were taken back, below: an
attempt's kept tokens first, then stale ones), ``scores`` ``[m, V]`` their float
logits, to be returned masked (``-inf``: not allowed).  Sampling then draws from the processed logits at the
temperature (``log_softmax(scores / T)``: the masked, renormalised distribution; ``logprobs`` are its), one token
per attempt also at the first step (so every attempt gets its own mask there too).  Without a processor nothing
of this runs: the samples are the same as before it existed (same seed, same draws).

**Taking an attempt's last tokens back** (a processor with ``line_marks``: constrained decoding's line retries).
Before each draw the engine asks ``proc.line_marks(attempts)`` for two lists: how many of its last tokens each attempt
drops (a line TVM refused, to be drawn again, or the lines back to an earlier line's start) and whether its next token
starts a line.  The engine keeps the logits an attempt drew each line's first token from; an attempt that drops tokens
(back to a line's start: any other count is refused) draws again from that line's logits, its dropped
tokens' cache columns are hidden from it (never read again; the cache still grows by k columns a step), and its
positions count its kept tokens only.  From the first such drop on, a chunk's mask and positions are built per
attempt (``_TakeBack.mask``); until then they are the plain ones above (the same samples as without the hook).  An
attempt's budget is ``max_new_tokens`` kept tokens; a chunk runs at most ``max_new_tokens + max_new_tokens // 4``
steps when it can drop tokens, so attempts that drew lines again still reach most of their budget.  After the last
step every attempt is asked once more (``line_marks`` of all of them): what it drops then (a line its last token ended,
refused) is cut from its tokens.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any


@dataclasses.dataclass
class SharedPrefixOutput:
    token_ids: list[list[list[int]]]        # per prompt, its k attempts' new tokens (EOS excluded)
    logprobs: list[list[list[float]]]       # log p(token) under the (temperature-scaled) sampling distribution


def sample_shared_prefix(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                         temperature: float, prompts_per_chunk: int = 4,
                         generator: Any = None, logits_processor: Any = None) -> list[list[str]]:
    """``k`` sampled completions per prompt (``scripts[i]`` are prompt ``i``'s), ``prompts_per_chunk`` prompts
    (``k`` times as many sequences) decoded together, longest prompts first; a prompt whose attempts all ended gives its
    place to the next at once."""
    out = sample_token_ids(model, tokenizer, prompts, k, max_new_tokens, temperature, prompts_per_chunk,
                           generator=generator, logits_processor=logits_processor)
    return [[tokenizer.decode(ids, skip_special_tokens=True) for ids in attempts] for attempts in out.token_ids]


def sample_token_ids(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                     temperature: float, prompts_per_chunk: int = 4, generator: Any = None,
                     logits_processor: Any = None) -> SharedPrefixOutput:
    """Token ids and their log-probabilities; see ``sample_shared_prefix`` (and the module's docstring for
    ``logits_processor``)."""
    import torch

    from little_dragon.generation.grouped_attention import grouped_sdpa

    greedy = temperature <= 0
    n = 1 if greedy else max(1, k)
    if not prompts or max_new_tokens <= 0:
        return SharedPrefixOutput([[[] for _ in range(k)] for _ in prompts], [[[] for _ in range(k)] for _ in prompts])
    per_row = _row_attempts(n)
    g = n // per_row                                 # rows a prompt: row r holds attempts (r % g) * per_row .. of r // g
    enc = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    rows_enc = [e for e in enc for _ in range(g)]
    order = sorted(range(len(rows_enc)), key=lambda i: -len(rows_enc[i]))   # (stable: a prompt's rows together)
    row_ids: list[list[list[int]]] = [[] for _ in rows_enc]
    row_lps: list[list[list[float]]] = [[] for _ in rows_enc]
    was_training = model.training
    model.eval()
    try:
        with grouped_sdpa(model), torch.no_grad():
            c = 0
            while c < len(order):  # one call decodes all the rows left where the cache lets rows be refilled
                rest = order[c:]
                # attempt ids: row r's j-th is r * per_row + j = prompt p's attempt (r % g) * per_row + j, p = r // g
                toks, lps = _decode_chunk(model, [rows_enc[i] for i in rest], per_row, max_new_tokens, temperature,
                                          _eos_ids(tokenizer), _pad_id(tokenizer), generator,
                                          logits_processor, rest, width=max(1, prompts_per_chunk * g))
                for i, t, lp in zip(rest, toks, lps):
                    row_ids[i], row_lps[i] = t, lp
                c += len(toks)
    finally:
        model.train(was_training)
    ids_out = [[a for r in range(p * g, (p + 1) * g) for a in row_ids[r] for _ in range(k // n)] for p in range(len(enc))]
    lp_out = [[a for r in range(p * g, (p + 1) * g) for a in row_lps[r] for _ in range(k // n)] for p in range(len(enc))]
    return SharedPrefixOutput(ids_out, lp_out)


def _row_attempts(n: int) -> int:
    """The attempts a cache row holds of a prompt's ``n``: ``ROW_ATTEMPTS`` where it divides ``n``, else all ``n``."""
    r = ROW_ATTEMPTS
    return r if r and 0 < r < n and n % r == 0 else n


def _eos_ids(tokenizer: Any) -> set[int]:
    eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}


def _pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _decode_chunk(model: Any, prompt_ids: list[list[int]], n: int, max_new_tokens: int, temperature: float,
                  eos: set[int], pad: int, generator: Any, proc: Any = None,
                  prompt_index: list[int] | None = None,
                  width: int | None = None) -> tuple[list[list[list[int]]], list[list[list[float]]]]:
    """Decode the first ``width`` of ``prompt_ids`` (all: None) together, and, where the cache is the preallocated one,
    the rest too: a row whose attempts all ended gives its place to the next prompt at once (continuous batching of
    rows, ``_Refill``).  Returns the tokens and log-probs of the prompts it decoded, in order (the caller goes on
    with the others)."""
    import torch

    device = next(model.parameters()).device
    rows = len(prompt_ids)
    width = rows if width is None else min(width, rows)
    lp_ = max(len(p) for p in prompt_ids)           # every prompt fits a row's prompt columns (left padded)
    out, prefix = _prefill(model, prompt_ids[:width], lp_, pad, device)
    lengths = prefix.sum(1)                          # real prompt lengths: the first new token's position
    # transformers >= 5.24 names the cache `cache` (past_key_values is deprecated there, the only name in 5.17)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = getattr(out, cache_kw)              # updated in place by every later forward
    lines = _takes_back(proc)
    max_steps = max_new_tokens + (max_new_tokens // 4 if lines else 0)
    refill = _preallocate(cache, lp_ + n * max_steps) and REFILL and width < rows
    if not refill:
        rows = width
    eos_t = torch.tensor(sorted(eos), device=device)
    alive = torch.arange(width, device=device)       # cache row -> chunk row
    done = torch.zeros((width, n), dtype=torch.bool, device=device)
    hist_tok = torch.full((rows, n, max_new_tokens), pad, dtype=torch.long, device=device)
    hist_lp = torch.zeros((rows, n, max_new_tokens), dtype=torch.float32, device=device)
    n_steps = torch.zeros((rows, n), dtype=torch.long, device=device)   # tokens kept per attempt
    back = _TakeBack(rows, n, max_new_tokens, max_steps, device) if lines or refill else None
    fill = _Refill(model, cache, prompt_ids, width, lp_, pad, cache_kw) if refill else None
    entry = torch.zeros(width, dtype=torch.long, device=device)        # the step each cache row's prompt entered at
    # attempt ids: chunk row r, attempt j -> prompts' index * n + j (fixed while rows leave the batch)
    base = torch.tensor(prompt_index[:rows] if prompt_index is not None else list(range(rows)), device=device) * n
    ids_of = base[:, None] + torch.arange(n, device=device)[None, :]                 # (rows, n)
    tok, lp = _first_tokens(proc, out.logits, ids_of, alive, lines, back, hist_tok, n_steps, temperature, generator)
    # the suffix mask: attempt j sees column Lp + s*n + j' iff j' == j (s <= t)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    t = 0
    while True:
        live = ~done
        if back is None or not back.ragged:
            hist_tok[alive, :, t] = torch.where(live, tok, pad)
            hist_lp[alive, :, t] = torch.where(live, lp, 0.0)
        else:  # each attempt writes at its own length (some took tokens back, or entered later)
            back.write(hist_tok, hist_lp, alive, live, tok, lp, n_steps)
        if back is not None:
            back.kept(alive, live, n_steps, t)
        n_steps[alive] += live.long()
        done = done | torch.isin(tok, eos_t) | (n_steps[alive] >= max_new_tokens)
        t += 1
        done = done | (t - entry >= max_steps)[:, None]      # a row's attempts decode at most max_steps steps
        last = bool(done.all()) and (fill is None or fill.left == 0)
        if proc is not None:  # the tokens just sampled, before the next forward pass (or the end)
            proc.ahead(ids_of[alive][live], tok[live], last)
        if last:
            if lines:  # a line the last tokens ended and TVM refused: taken back, its attempt ends before it
                back.trim(proc, ids_of, n_steps)
            break
        keep = ~done.all(1)
        if not bool(keep.all()):                     # rows whose attempts all ended leave the batch
            idx = keep.nonzero().squeeze(1)
            cache.batch_select_indices(idx)
            alive, done, tok, prefix, lengths, entry = (alive[idx], done[idx], tok[idx], prefix[idx], lengths[idx],
                                                        entry[idx])
            if fill is not None and fill.left:       # the next prompts take their places, their first tokens drawn
                nprefix, nlengths, logits = fill.enter(width - alive.shape[0])
                m = nprefix.shape[0]
                rows_new = torch.arange(fill.next - m, fill.next, device=device)
                ntok, nlp = _first_tokens(proc, logits, ids_of, rows_new, lines, back, hist_tok, n_steps,
                                          temperature, generator)
                back.ragged = True
                every = torch.ones((m, n), dtype=torch.bool, device=device)
                back.write(hist_tok, hist_lp, rows_new, every, ntok, nlp, n_steps)
                back.kept(rows_new, every, n_steps, t - 1)      # fed with the others' tokens of step t - 1
                n_steps[rows_new] += 1
                ndone = torch.isin(ntok, eos_t) | (n_steps[rows_new] >= max_new_tokens)
                if proc is not None:
                    proc.ahead(ids_of[rows_new].flatten(), ntok.flatten(), False)
                alive, done, tok = torch.cat([alive, rows_new]), torch.cat([done, ndone]), torch.cat([tok, ntok])
                prefix, lengths = torch.cat([prefix, nprefix]), torch.cat([lengths, nlengths])
                entry = torch.cat([entry, torch.full((m,), t - 1, dtype=torch.long, device=device)])
            if fill is not None:                     # the steps before every row's entry: read by none, dropped
                back.compact(cache, int(entry.min()), lp_, n)
        b = alive.shape[0]
        if back is None or not back.ragged:
            mask = torch.cat([prefix[:, None, None, :].expand(b, 1, n, lp_),
                              eye.repeat(1, t)[None, None].expand(b, 1, n, n * t)], dim=-1)
            pos_ids = (lengths + (t - 1))[:, None].expand(b, n)
        else:
            mask = torch.cat([prefix[:, None, None, :].expand(b, 1, n, lp_), back.mask(alive, eye, t)], dim=-1)
            pos_ids = lengths[:, None] + (n_steps[alive] - 1).clamp(min=0)
        out = model(input_ids=tok, attention_mask=mask, position_ids=pos_ids, use_cache=True, **{cache_kw: cache})
        if proc is None:
            tok, lp = _sample(out.logits.float(), 1, temperature, generator)   # (b, n) from (b, n, V)
        else:
            logits = out.logits.float()
            if lines:
                logits = back.marks(proc, logits, ids_of[alive], done, alive, n_steps)
            tok, lp = _processed_sample(proc, logits, ids_of[alive], done, hist_tok, alive, t,
                                        temperature, generator)
    # EOS ends an attempt and is not part of it (skip_special_tokens would drop it anyway)
    toks: list[list[list[int]]] = [[] for _ in range(rows)]
    lps: list[list[list[float]]] = [[] for _ in range(rows)]
    ht, hl, ns = hist_tok.cpu(), hist_lp.cpu(), n_steps.cpu()
    for r in range(rows):
        for j in range(n):
            row = ht[r, j, :int(ns[r, j])].tolist()
            lrow = hl[r, j, :int(ns[r, j])].tolist()
            if row and row[-1] in eos:
                row, lrow = row[:-1], lrow[:-1]
            toks[r].append(row)
            lps[r].append(lrow)
    return toks, lps


def _prefill(model: Any, prompt_ids: list[list[int]], lp_: int, pad: int, device: Any) -> tuple[Any, Any]:
    """One forward over the prompts left padded to ``lp_`` columns (every prompt ends at column Lp - 1): its output
    (the last position's logits, a fresh cache) and the prompts' real-token mask."""
    import torch

    ids = torch.full((len(prompt_ids), lp_), pad, dtype=torch.long)
    prefix = torch.zeros((len(prompt_ids), lp_), dtype=torch.bool)
    for r, p in enumerate(prompt_ids):
        ids[r, lp_ - len(p):] = torch.tensor(p, dtype=torch.long)
        prefix[r, lp_ - len(p):] = True
    ids, prefix = ids.to(device), prefix.to(device)
    pos = (prefix.long().cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=prefix.long(), position_ids=pos, use_cache=True, logits_to_keep=1)
    return out, prefix


def _first_tokens(proc: Any, logits: Any, ids_of: Any, rows: Any, lines: bool, back: Any, hist_tok: Any,
                  n_steps: Any, temperature: float, generator: Any) -> tuple[Any, Any]:
    """The first token of every attempt of the chunk rows ``rows`` (those just prefilled, in cache order), from their
    prefill's last logits ``(m, 1, V)``: ``n`` draws a row, or, under a processor, each attempt its own mask (and its
    line marks when attempts take tokens back)."""
    import torch

    m, n = len(rows), ids_of.shape[1]
    if proc is None:
        return _sample(logits[:, -1, :].float(), n, temperature, generator)      # (m, n)
    done = torch.zeros((m, n), dtype=torch.bool, device=logits.device)
    logits = logits[:, -1, None, :].float().expand(m, n, -1)
    if lines:
        logits = back.marks(proc, logits, ids_of[rows], done, rows, n_steps)
    return _processed_sample(proc, logits, ids_of[rows], done, hist_tok, rows, 0, temperature, generator)


class _Refill:
    """The prompts after the first ``width`` of a call, entering as rows leave (continuous batching of rows): each is
    prefilled alone with the others entering with it (left padded to the call's ``Lp``) and its prompt's keys and values
    become a new cache row; its attempts' columns start at the step it entered (those before are hidden from it, and
    dropped once no row reads them: ``_TakeBack.compact``)."""

    def __init__(self, model: Any, cache: Any, prompt_ids: list[list[int]], width: int, lp_: int, pad: int,
                 cache_kw: str):
        self.model, self.cache, self.prompt_ids, self.lp, self.pad, self.cache_kw = (model, cache, prompt_ids, lp_,
                                                                                     pad, cache_kw)
        self.next = width                            # the next prompt to enter (its chunk row)

    @property
    def left(self) -> int:
        return len(self.prompt_ids) - self.next

    def enter(self, places: int) -> tuple[Any, Any, Any]:
        """The next ``places`` prompts (fewer at the end) prefilled and appended to the cache as rows; their prompt
        masks, real lengths and prefill logits."""
        device = next(self.model.parameters()).device
        new = self.prompt_ids[self.next:self.next + places]
        self.next += len(new)
        out, prefix = _prefill(self.model, new, self.lp, self.pad, device)
        fresh = getattr(out, self.cache_kw)
        for layer, src in zip(self.cache.layers, fresh.layers):
            layer.append_rows(src.keys, src.values)
        return prefix, prefix.sum(1), out.logits


def _takes_back(proc: Any) -> bool:
    """Whether ``proc`` may ask attempts to take tokens back (``line_marks``, and it says it will)."""
    return proc is not None and callable(getattr(proc, "line_marks", None)) and bool(getattr(proc, "takes_back", False))


class _TakeBack:
    """The engine's side of taking tokens back (module docstring), indexed by chunk row like ``hist_tok``:
    ``visible[r, j, s]``: attempt j of row r still reads the token it sampled at step s (its cache column);
    ``step_of[r, j, i]``: the step of its i-th kept token; ``line_logits[(r, j)][i]``: the logits it drew a line's first
    token from when it had kept ``i`` tokens (every line start it may go back to)."""

    def __init__(self, rows: int, n: int, max_new_tokens: int, max_steps: int, device: Any):
        import torch

        self.visible = torch.zeros((rows, n, max_steps), dtype=torch.bool, device=device)
        self.step_of = torch.zeros((rows, n, max_new_tokens), dtype=torch.long, device=device)
        self.line_logits: dict[tuple[int, int], dict[int, Any]] = {}
        self.ragged = False   # an attempt of this chunk took tokens back: per-attempt masks and positions from now on
        self.t_base = 0       # the first step the cache still holds columns of (``compact``)

    def marks(self, proc: Any, logits: Any, ids_of: Any, done: Any, alive: Any, n_steps: Any) -> Any:
        """Ask ``proc`` which live attempts (of the cache rows ``alive``) take tokens back and which start a line;
        the logits to draw from: a taking-back attempt's are those the first token of the line it goes back to was
        drawn from."""
        live = ~done
        if not bool(live.any()):
            return logits
        drop, start = proc.line_marks(ids_of[live])
        back = [i for i, d in enumerate(drop) if d]
        if not back and not any(start):
            return logits
        # the attempts' places and kept counts read off the device once (not a read per attempt: each is a sync)
        where = live.nonzero().tolist()                              # (m, 2): cache row, attempt
        rows = alive.tolist()
        kept = n_steps[alive].tolist()                               # (b, n): by cache row
        if back:
            logits = logits.clone()
            for i in back:
                r, j = where[i]
                row, had = rows[r], kept[r][j]
                keep = had - int(drop[i])
                starts = self.line_logits.get((row, j), {})
                if keep not in starts:
                    raise ValueError(f"attempt {int(ids_of[live][i])} takes back {drop[i]} of its "
                                     f"{had} tokens: no line started after {keep}")
                self.visible[row, j, self.step_of[row, j, keep:had]] = False
                n_steps[row, j] = keep
                kept[r][j] = keep
                logits[r, j] = starts[keep]
                for later in [k for k in starts if k > keep]:
                    del starts[later]
            self.ragged = True
        firsts = [where[i] for i, s in enumerate(start) if s]
        if firsts:  # one gather for every line start of the step; each keeps its row (a view of that copy, never written)
            got = logits[[r for r, _ in firsts], [j for _, j in firsts]]
            for (r, j), row_logits in zip(firsts, got):
                self.line_logits.setdefault((rows[r], j), {})[kept[r][j]] = row_logits
        return logits

    def trim(self, proc: Any, ids_of: Any, n_steps: Any) -> None:
        """After the last step: the tokens every attempt still takes back (a line refused by a token the processor
        consumed last, at the end or when its attempt reached its budget) are cut from its tokens."""
        drop, _ = proc.line_marks(ids_of.flatten())
        for i, d in enumerate(drop):
            if d:
                r, j = divmod(i, ids_of.shape[1])
                n_steps[r, j] -= min(int(d), int(n_steps[r, j]))

    def kept(self, alive: Any, live: Any, n_steps: Any, t: int) -> None:
        """The live attempts' tokens of step ``t`` are kept: visible from now on, at their attempts' next index."""
        import torch

        if t >= self.visible.shape[2]:  # rows refilled: the call runs past one row's steps
            more = torch.zeros_like(self.visible[:, :, :max(t + 1 - self.visible.shape[2], self.visible.shape[2] // 2)])
            self.visible = torch.cat([self.visible, more], dim=2)
        rows, atts = live.nonzero(as_tuple=True)
        chunk = alive[rows]
        self.visible[chunk, atts, t] = True
        self.step_of[chunk, atts, n_steps[chunk, atts].clamp(max=self.step_of.shape[2] - 1)] = t

    def write(self, hist_tok: Any, hist_lp: Any, alive: Any, live: Any, tok: Any, lp: Any, n_steps: Any) -> None:
        rows, atts = live.nonzero(as_tuple=True)
        chunk = alive[rows]
        at = n_steps[chunk, atts].clamp(max=hist_tok.shape[2] - 1)
        hist_tok[chunk, atts, at] = tok[rows, atts]
        hist_lp[chunk, atts, at] = lp[rows, atts]

    def mask(self, alive: Any, eye: Any, t: int) -> Any:
        """The suffix part of the 4-D mask, ``(b, 1, n, n * t)``: attempt j reads column ``s * n + j`` iff it still
        keeps its step-s token."""
        vis = self.visible[alive, :, self.t_base:t]                  # (b, n, t - t_base)
        b, n, s = vis.shape
        return (vis[:, :, :, None] & eye[None, :, None, :]).reshape(b, 1, n, s * n)

    def compact(self, cache: Any, first: int, lp_: int, n: int) -> None:
        """Every row in the batch entered at step ``first`` or later: the cache columns of the steps before it are read
        by none, and are dropped (every layer's columns after the prompt's move back) once there are
        ``COMPACT_STEPS`` of them, so that a refilled batch's attention spans its rows' own steps, not the call's."""
        if first - self.t_base < COMPACT_STEPS:
            return
        for layer in cache.layers:
            layer.drop_columns(lp_, (first - self.t_base) * n)
        self.t_base = first


def _processed_sample(proc: Any, logits: Any, ids_of: Any, done: Any, hist_tok: Any, alive: Any, t: int,
                      temperature: float, generator: Any) -> tuple[Any, Any]:
    """One token per attempt of ``logits`` ``(b, n, V)``; the attempts that have not ended (``~done``) go through
    ``proc`` first (their ids ``ids_of`` ``(b, n)``, their ``t`` tokens so far, their logits), the others are
    sampled unprocessed (their tokens are never kept)."""
    live = ~done
    first = getattr(proc, "sample_first", None)
    if first is not None and first(logits.device):
        return _checked_sample(proc, logits, ids_of, live, hist_tok, alive, t, temperature, generator)
    scores = logits[live]                                       # (m, V), attempts in row-major order
    scores = proc(ids_of[live], hist_tok[alive][live][:, :t], scores)
    logits = logits.clone() if logits.stride(1) == 0 else logits     # the first step's expanded view
    logits[live] = scores
    return _sample(logits, 1, temperature, generator)


# a refused draw is drawn again from the model's distribution without the tokens refused so far, up to this many
# times, before its mask is computed (``_checked_sample``): most refused draws then need no mask, and a mask at a line's
# start costs a whole line grammar (the tiny model's refusals were mostly there)
REDRAWS = 4


def _checked_sample(proc: Any, logits: Any, ids_of: Any, live: Any, hist_tok: Any, alive: Any, t: int,
                    temperature: float, generator: Any) -> tuple[Any, Any]:
    """``_processed_sample`` for a processor that checks draws (``proc.sample_first``): every attempt draws from the
    model's distribution and ``proc.allows`` says which live draws its mask would allow; a refused attempt draws again
    from that distribution without the tokens refused so far (up to ``REDRAWS`` times, each draw checked), and one
    still refused is masked (``proc``) and drawn from the mask.  The same masked, renormalised distribution: whatever
    tokens R were refused (never allowed ones), a draw from p without R that lands in the allowed set A is a draw from
    p / p(A) (A lies inside the rest), and so is the masked draw; greedy, the same token (the best allowed one).  A log-prob
    is kept only for a masked draw (elsewhere the mask, hence p(A), was never computed: NaN; nothing reads these under
    a processor)."""
    import torch

    tok, lp = _sample(logits, 1, temperature, generator)                     # (b, n)
    ok = torch.tensor(proc.allows(ids_of[live], tok[live]), dtype=torch.bool, device=tok.device)
    refused = live.clone()
    refused[live] = ~ok
    lp = torch.where(live, torch.full_like(lp, float("nan")), lp)
    if not bool(refused.any()):
        return tok, lp
    where = refused.nonzero()                                                # (m, 2): the refused attempts
    rows = logits[refused].clone()                                           # (m, V)
    ids, drawn = ids_of[refused], tok[refused]
    pending = torch.arange(where.shape[0], device=tok.device)
    spent = []                                                               # rows with no token left to draw
    for _ in range(REDRAWS):
        rows[pending, drawn] = float("-inf")                                 # the tokens refused so far
        left = torch.isfinite(rows[pending]).any(-1)
        spent.append(pending[~left])
        pending = pending[left]
        if not len(pending):
            break
        again, _ = _sample(rows[pending], 1, temperature, generator)         # (p, 1)
        drawn = again[:, 0]
        ok = torch.tensor(proc.allows(ids[pending], drawn, redraw=True), dtype=torch.bool, device=tok.device)
        kept = where[pending[ok]]
        tok[kept[:, 0], kept[:, 1]] = drawn[ok]
        pending, drawn = pending[~ok], drawn[~ok]
        if not len(pending):
            break
    pending = torch.cat(spent + [pending])
    if not len(pending):
        return tok, lp
    masked = torch.zeros_like(refused)
    masked[where[pending, 0], where[pending, 1]] = True
    scores = proc(ids_of[masked], hist_tok[alive][masked][:, :t], logits[masked])   # (p, V)
    tok2, lp2 = _sample(scores, 1, temperature, generator)                  # (p, 1)
    tok[masked], lp[masked] = tok2[:, 0], lp2[:, 0]
    return tok, lp


# ended rows are refilled by the next prompts (``_Refill``); False: chunks of rows, each decoded until its last attempt
# ends (the engine before session 29; benchmarks/constrained_bench.py's +norefill arms)
REFILL = True

# [row attempts] a cache row holds this many of a prompt's k attempts (a divisor of k; None: all k), the prompt then in
# k / ROW_ATTEMPTS rows (its keys and values once a row, read by that row's attempts): a row leaves the batch, and the
# next row enters, when its own attempts have ended, so one long attempt holds fewer ended ones in the batch beside
# it, and a step's attention reads the row's columns only: the prompt, then n columns a step (of which one is the
# attempt's own; the mask hides the others, which SDPA still computes).  Session 35's H100 A/B (16 CUDA prompts x 8):
# the constrained arm's batch held one row for the last ~500 of its 1,792 steps; the free arm, whose attempts end
# sooner, ended after 1,023.  Attempt ids (the processor's) and every attempt's draws' law are the same either way;
# the draws themselves are not (the generator's order).  The bench's +rowN.
ROW_ATTEMPTS: int | None = None
# the fewest dead steps (columns of rows that left, before every row's entry) ``_TakeBack.compact`` drops at a time:
# each drop copies the cache's columns after the prompt once
COMPACT_STEPS = 32


def _preallocate(cache: Any, capacity: int) -> bool:
    """Give every layer of the prefill's cache room for all k attempts' tokens, so a step writes its k columns in
    place: transformers' DynamicCache concatenates, copying the whole cache at every step of every layer (on the
    H200 that was 38% of the GPU time at 4k columns, growing with the cache)."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not layers or not all(type(layer) is DynamicLayer for layer in layers):
        return False                                # another cache layout: left as it is (still correct; no refill)
    cache.layers = [_preallocated_layer_class().of(layer, capacity) for layer in layers]
    return True


@functools.cache
def _preallocated_layer_class() -> Any:
    from torch import cat as torch_cat
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values are views of a buffer of ``capacity`` columns (filled left to right)."""

        @classmethod
        def of(cls, layer: Any, capacity: int) -> Any:
            new = cls()
            k, v = layer.keys, layer.values
            b, h, n, _ = k.shape
            new._k = k.new_empty((b, h, max(capacity, n), k.shape[-1]))
            new._v = v.new_empty((b, h, max(capacity, n), v.shape[-1]))
            new._k[:, :, :n].copy_(k)
            new._v[:, :, :n].copy_(v)
            new._n = n
            new.dtype, new.device, new.is_initialized = k.dtype, k.device, True
            new._view()
            return new

        def _view(self) -> None:
            self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            m = key_states.shape[-2]
            if self._n + m > self._k.shape[2]:  # refilled rows ran past the columns foreseen: half as many again
                self._resize(max(self._n + m, self._k.shape[2] * 3 // 2))
            self._k[:, :, self._n:self._n + m].copy_(key_states)
            self._v[:, :, self._n:self._n + m].copy_(value_states)
            self._n += m
            self._view()
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            self._k, self._v = self._k[indices], self._v[indices]
            self._view()

        def _resize(self, capacity: int) -> None:
            k, v = self._k, self._v
            self._k = k.new_empty((k.shape[0], k.shape[1], capacity, k.shape[3]))
            self._v = v.new_empty((v.shape[0], v.shape[1], capacity, v.shape[3]))
            self._k[:, :, :self._n].copy_(k[:, :, :self._n])
            self._v[:, :, :self._n].copy_(v[:, :, :self._n])
            self._view()

        def append_rows(self, keys: Any, values: Any) -> None:
            """New rows after the others: ``keys``/``values`` ``(m, heads, c, dim)`` as their first ``c`` columns (a
            prompt's), the columns after them zero (hidden by the mask until their attempts write them)."""
            m, c = keys.shape[0], keys.shape[2]
            k = self._k.new_zeros((m, *self._k.shape[1:]))
            v = self._v.new_zeros((m, *self._v.shape[1:]))
            k[:, :, :c].copy_(keys)
            v[:, :, :c].copy_(values)
            self._k, self._v = torch_cat([self._k, k]), torch_cat([self._v, v])
            self._view()

        def drop_columns(self, start: int, count: int) -> None:
            """Columns ``start .. start + count`` removed: those after them move back by ``count``."""
            if count <= 0:
                return
            self._k[:, :, start:self._n - count] = self._k[:, :, start + count:self._n].clone()
            self._v[:, :, start:self._n - count] = self._v[:, :, start + count:self._n].clone()
            self._n -= count
            self._view()

    return PreallocatedLayer


def _sample(logits: Any, n: int, temperature: float, generator: Any) -> tuple[Any, Any]:
    """``n`` tokens per row of (rows, V) logits, or one per row of (rows, n, V); with their log-probs."""
    import torch

    if temperature <= 0:
        lp = torch.log_softmax(logits, dim=-1)
        tok = logits.argmax(-1)
        if logits.dim() == 2:
            tok = tok[:, None].expand(-1, n)
            return tok, lp.gather(-1, tok)
        return tok, lp.gather(-1, tok[..., None]).squeeze(-1)
    lp = torch.log_softmax(logits / temperature, dim=-1)
    flat = lp.reshape(-1, lp.shape[-1])
    tok = torch.multinomial(flat.exp(), n if logits.dim() == 2 else 1, replacement=True, generator=generator)
    if logits.dim() == 2:
        return tok, flat.gather(-1, tok)
    tok = tok.view(logits.shape[:-1])
    return tok, lp.gather(-1, tok[..., None]).squeeze(-1)
