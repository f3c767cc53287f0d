"""The tests' shared kit: tiny real kernels, tiny workload tables and small configs (one copy of each).

Fixtures built from these (the tiny real harvest, the datasets built from it, the tokenizer) live in
tests/conftest.py, which pytest loads for every test folder; test modules import helpers from here
(``from dragon_testkit import datasets_cfg``: tests/ is on the path because tests/conftest.py lives there).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

LLVM = {"kind": "llvm", "num-cores": 2}


def _row(name: str, family: str, shapes: str, mod) -> dict:
    from little_dragon.workloads.store import structural_hash, workload_id_of

    return {"workload_id": workload_id_of(mod), "family": family, "name": name, "source": "test",
            "dtype": "float32", "shapes": shapes, "flops": 1.0, "bytes": 1.0,
            "structural_hash": str(structural_hash(mod)), "tvmscript": mod.script()}


def matmul_tensors(n: int, m: int | None = None, k: int | None = None, dtype: str = "float32") -> list:
    """C[i, j] = sum_k A[i, k] * B[k, j] as TE tensors [A, B, C] (square n x n unless m/k are given)."""
    from tvm import te

    m, k = m or n, k or n
    a = te.placeholder((n, k), name="A", dtype=dtype)
    b = te.placeholder((k, m), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    return [a, b, te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


def softmax_tensors(rows: int, cols: int | None = None) -> list:
    from tvm import te, topi

    x = te.placeholder((rows, cols or rows), name="X")
    return [x, topi.nn.softmax(x, axis=-1)]


def add_tensors(n: int) -> list:
    from tvm import te

    x = te.placeholder((n, n), name="X")
    y = te.placeholder((n, n), name="Y")
    return [x, y, te.compute((n, n), lambda i, j: x[i, j] + y[i, j], name="Z")]


# the tiny model's cross-thread row sum on the H200 sealed set (sessions 11 and 17), up to its second split: `sum` computed
# in shared memory at the consumer's outer loop, the consumer's inner loop bound to threadIdx.x; the two wrong results
# differ in what follows (tests/generation/test_constrained_end_check.py, test_constrained_kernel_axes.py)
ROW_SUM_HEAD = """blk sum
blk out
blk root
cons b0 1
loops b3 1
cat 4 8 16 32 64 128 256 512 = 2
split l0 _ v0
bind l2 tx
at b0 l1
scope b0 0 shared
loops b0 3
split l5 _ v0
"""

def two_block_tensors(rows: int = 64, cols: int = 256) -> list:
    """A -> B -> C, two elementwise blocks: B's buffer is allocated under the root block (as in every fused workload),
    the shape of TVM 0.27's in-place write (tests/tvmx/test_schedule.py). [A, C]."""
    from tvm import te

    a = te.placeholder((rows, cols), name="A")
    b = te.compute((rows, cols), lambda i, j: a[i, j] * 2.0, name="B")
    return [a, te.compute((rows, cols), lambda i, j: b[i, j] + 1.0, name="C")]


def prim_module(tensors: list):
    """An IRModule whose one PrimFunc ``main`` computes ``tensors`` (as the workload store writes them)."""
    import tvm
    from tvm import te

    return tvm.IRModule({"main": te.create_prim_func(tensors).with_attr("global_symbol", "main")})


# the H200's target as the harvest and the evaluation give it (the end check's and the constraint's CUDA tests)
H200_TARGET = {"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024,
               "thread_warp_size": 32}


def end_check(mod, text: str, target) -> str:
    """``schedule_worker.finish_check``'s verdict on script ``text`` (its `post` section included) for ``mod`` on
    ``target`` (a dict, a JSON string or a Target): "" when the constraint would let the attempt end there."""
    import json

    import tvm

    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.generation.schedule_worker import finish_check

    if isinstance(target, (dict, str)):
        target = tvm.target.Target(json.loads(target) if isinstance(target, str) else target)
    return finish_check(mod, PostprocContext(mod, target), text)


def mean_variance_module():
    """M = row sums of a 64 x 256 A, V = row sums of (A - M)^2: a reduction that reads another's result (the
    reduction-restart rule's kernel: V placed under M's reduction loop sums again and again)."""
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    m = te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="M")
    k2 = te.reduce_axis((0, 256), name="k2")
    v = te.compute((64,), lambda i: te.sum((a[i, k2] - m[i]) * (a[i, k2] - m[i]), axis=k2), name="V")
    return prim_module([a, v])


def tiny_workloads_frame():
    """Four small real kernels in three families (two dense shape classes)."""
    import pandas as pd

    rows = []
    for name, fam, shapes, tensors in [
        ("matmul32", "dense", '{"m": 32, "n": 32, "k": 32}', matmul_tensors(32)),
        ("matmul64", "dense", '{"m": 64, "n": 64, "k": 64}', matmul_tensors(64)),
        ("softmax32", "softmax", '{"rows": 32, "cols": 32}', softmax_tensors(32)),
        ("add64", "elementwise", '{"rows": 64, "cols": 64}', add_tensors(64)),
    ]:
        rows.append(_row(name, fam, shapes, prim_module(tensors)))
    return pd.DataFrame(rows)


def datasets_cfg(harvest_dir: Path, out: Path, **kw):
    """A datasets config over the tiny harvest, writing under ``out`` (one group per split)."""
    from little_dragon.datasets.config import DatasetsConfig

    base = dict(workloads=str(harvest_dir / "workloads.parquet"), harvest_roots=[str(harvest_dir / "harvest")],
                out_dir=str(out / "datasets"), sealed_dir=str(out / "sealed"), card_dir=str(out / "card"),
                heldout_families=["softmax"], sealed_fraction=0.34, validation_fraction=0.34,
                construction_per_workload=3, refinement_per_workload=6, refinement_min_speedup=1.10)
    base.update(kw)
    cfg = DatasetsConfig(**base)
    if "seed" not in kw:  # the first seed that puts a dense kernel (it has refinement pairs) in train
        import pandas as pd

        from little_dragon.datasets.split import assign_splits

        wl = pd.read_parquet(cfg.workloads)
        cfg = next(c for c in (dataclasses.replace(cfg, seed=s) for s in range(100))
                   if "dense" in set(assign_splits(wl, c).query("split == 'train'")["family"]))
    return cfg


def quality_cfg(out: Path, **kw):
    from little_dragon.quality.config import QualityConfig

    base = dict(gx_root=str(out / "monitoring"), data_docs_dir=str(out / "monitoring" / "data-docs"),
                metrics_dir=str(out / "monitoring" / "metrics"), max_family_share=1.0, min_families=1)
    base.update(kw)
    return QualityConfig(**base)


def replace(cfg, **kw):
    return dataclasses.replace(cfg, **kw)


def random_llama(token_counter, *, hidden: int, intermediate: int, heads: int, kv_heads: int,
                 max_positions: int, **config):
    """A 2-layer Llama with random weights (seed 0) and its tokenizer (EOS = pad = ``<|endoftext|>``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=token_counter.tokenizer, eos_token="<|endoftext|>",
                                  clean_up_tokenization_spaces=False)
    tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=2,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id, **config)
    return LlamaForCausalLM(cfg).eval(), tok


CODEC_DATA = Path(__file__).resolve().parent / "codec" / "data"  # the committed real MetaSchedule databases


def real_records(db: Path):
    """(name, module, target, trace JSON) of every record of a committed real database: ``db`` itself, or each
    database folder inside it."""
    from little_dragon.codec.roundtrip import read_database

    dbs = [db] if (db / "database_workload.json").exists() else sorted(p for p in db.iterdir() if p.is_dir())
    for d in dbs:
        for name, mod, recs in read_database(d):
            for _, trace_json, target in recs:
                yield name, mod, target, trace_json


def model_script_lines(trace_json) -> list[str]:
    """A record's script as the model writes it: its lines, the post-processing written `post *`."""
    from little_dragon.codec import encode

    lines = encode(trace_json).splitlines()
    return lines[:lines.index("post")] + ["post *"] if "post" in lines else lines


def with_tiles(lines: list[str], factors: dict[str, str]) -> list[str]:
    """``lines`` with the factors of the `tile` lines of the loops ``factors`` names replaced (``{"l15": "1 1 8 1 1"}``)."""
    import re

    out = []
    for ln in lines:
        m = re.match(r"tile (l\d+) (m=\d+ )?= ", ln)
        out.append(m.group(0) + factors[m.group(1)] if m and m.group(1) in factors else ln)
    return out


def lines_through(lines: list[str], last: str) -> str:
    """The script text of ``lines`` up to and including the line ``last``."""
    return "".join(x + "\n" for x in lines[:lines.index(last) + 1])


def feed_constraint(engine, workload, tok, text: str, retries: int = 0):
    """Feed ``text`` to a fresh ``ScriptConstraint`` token by token, each checked against the mask the sampler
    would apply: (None, constraint) when every token was allowed, else (the position and token refused,
    constraint).  ``retries``: the constraint's line retries (a refused line is taken back, as on the engine)."""
    from little_dragon.generation.constrained import ScriptConstraint, allocate_bitmask

    c = ScriptConstraint(engine, workload)
    c.line_retries = retries
    bits = allocate_bitmask(1, engine.vocab_size)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    for i, t in enumerate(ids):
        c.fill_mask(bits, 0)
        if not (int(bits[0, t // 32]) >> (t % 32)) & 1:
            return f"token {i} {tok.decode([t])!r} after {tok.decode(ids[:i])[-60:]!r}", c
        c.advance(t)
    return None, c


def back_to_tiling(engine, workload, tok, lines: list[str], last: str, reason: str):
    """Feed ``lines`` through the line ``last`` to a constraint with two line retries, every token allowed, and check
    that the line was refused back to the first `tile` line of its tiling as the end check would send it: one retry
    whose reason starts with ``reason``, the tokens since the tiling taken back, and the constraint at a line start
    exactly where a fresh one fed the lines before the tiling stands (its loops and its mask).  (constraint, token ids
    fed, index of the tiling's first line) for the caller's own checks."""
    head = lines_through(lines, last)
    refused, c = feed_constraint(engine, workload, tok, head, retries=2)
    assert refused is None, (refused, c.error)
    ids = tok(head, add_special_tokens=False)["input_ids"]
    first_tile = next(i for i, ln in enumerate(lines) if ln.startswith("tile"))
    kept = "".join(x + "\n" for x in lines[:first_tile])
    assert not c.dead and c.retried == 1 and c.text == kept, (c.dead, c.error, c.text[-200:])
    assert c.take_back == len(ids) - c.n_tokens
    assert [r for r in c.stats.retry_reasons if r.startswith(reason)], c.stats.retry_reasons
    fresh = feed_constraint(engine, workload, tok, kept)[1]
    assert c.at_line_start() and c.state.loops == fresh.state.loops and mask_of(c, engine) == mask_of(fresh, engine)
    return c, ids, first_tile


def mask_of(c, engine) -> list[int]:
    """The bitmask words the constraint ``c`` gives its next token (``fill_mask``)."""
    from little_dragon.generation.constrained import allocate_bitmask

    bits = allocate_bitmask(1, engine.vocab_size)
    c.fill_mask(bits, 0)
    return bits[0].tolist()


def allowed_by_mask(engine, workload, tok, text: str) -> bool:
    """Every token of ``text`` allowed by the constraint's mask (``feed_constraint``)."""
    return feed_constraint(engine, workload, tok, text)[0] is None


def real_prefixes(db: Path, before: tuple[str, ...], limit: int):
    """(record name, module, ``Workload``, the record's script lines up to a line starting with one of ``before``,
    that line) for the first ``limit`` such lines of a committed real database."""
    from little_dragon.generation.constrained import Workload

    n = 0
    for name, mod, target, tj in real_records(db):
        lines = model_script_lines(tj)
        for i, line in enumerate(lines):
            if line.startswith(before) and n < limit:
                n += 1
                yield name, mod, Workload(mod, target), "".join(x + "\n" for x in lines[:i]), line


def prefix_state(mod, head: str):
    """The ``ScheduleState`` after ``head`` (complete lines), from a fresh schedule of ``mod``."""
    from little_dragon import codec
    from little_dragon.generation.constrain_state import live_state, replay

    from little_dragon.generation.schedule_worker import lookup_run

    state = live_state(replay(mod, codec.decode(head, codec.SyntaxOnlyContext())))
    state.lookup_run = lookup_run(head)  # a fact of the text (``schedule_worker.prefix_facts`` sets it too)
    return state


def tvm_accepts(mod, text: str) -> bool:
    """TVM's verdict on ``text`` (complete script lines), decoded by the codec and applied whole to a fresh
    schedule of ``mod``."""
    from little_dragon import codec
    from little_dragon.generation.constrain_state import replay

    trace_json = codec.decode(text, codec.SyntaxOnlyContext())
    try:
        replay(mod, trace_json)
        return True
    except Exception:  # noqa: BLE001 - TVM's ScheduleError (and what else it raises): the verdict
        return False


def kept_what_it_checked(script: str, c) -> bool:
    """Whether an attempt's ``script`` is what its ``ScriptConstraint`` ``c`` checked: the lines up to a line TVM
    refused; its checked lines, finished by `post *` where the post-processors accept them, after any other kill
    (a dead end) or when the token budget cut it; or the whole text of an attempt that ended (EOS) alive."""
    if c.done and not c.dead:
        return script.startswith(c.text)
    if c.dead and c.error.startswith("apply:"):
        return script == c.text
    return script in (c.text, c.text + "post *\n")
