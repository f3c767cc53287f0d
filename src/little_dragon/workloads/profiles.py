"""Profiles: which workload specs to emit, in a deterministic order.

- ``default``: a curated list of small kernels, about one per family (seconds to tune on 2 CPU cores);
- ``models``: every kernel shape implied by the real model configurations in ``models.py``, per dtype;
- ``large``: ``models`` plus ``samples_per_family`` seeded draws per family and dtype from each family's
  shape ranges (more than 50,000 distinct specs with the profile's own sample count).

Specs are deduplicated by their key here (cheap); structurally equal kernels from different specs are
deduplicated later by structural hash.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Callable, Iterator

from little_dragon.workloads.config import WorkloadsConfig
from little_dragon.workloads.families import ACTIVATIONS, FAMILIES, SpecError
from little_dragon.workloads.models import model_shapes
from little_dragon.workloads.spec import WorkloadSpec


@dataclasses.dataclass(frozen=True)
class Profile:
    curated: bool
    model_shapes: bool
    samples_per_family: int
    graph_models: tuple[str, ...]


PROFILES: dict[str, Profile] = {
    "default": Profile(curated=True, model_shapes=False, samples_per_family=0, graph_models=()),
    "models": Profile(curated=True, model_shapes=True, samples_per_family=0,
                      graph_models=("gpt2-tiny", "llama-tiny", "bert-tiny", "resnet-block")),
    "large": Profile(curated=True, model_shapes=True, samples_per_family=1500,
                     graph_models=("gpt2-tiny", "llama-tiny", "bert-tiny", "resnet-block")),
}

# Small kernels shaped like tiny-model layers: each tunes at about a second per trial on 2 CPU cores.
CURATED: list[tuple[str, str, dict[str, Any]]] = [
    ("dense", "float32", dict(m=32, n=64, k=64)),
    ("dense", "int8", dict(m=32, n=64, k=64)),
    ("dense_bias_act", "float32", dict(m=32, n=128, k=64, act="gelu")),
    ("batch_matmul", "float32", dict(b=4, m=32, n=32, k=16, ta=0, tb=1)),
    ("batch_matmul", "float16", dict(b=4, m=32, n=16, k=32, ta=0, tb=0)),
    ("gemv", "float32", dict(n=256, k=128)),
    ("conv2d_nchw", "float32", dict(n=1, c=16, h=14, w=14, k=16, r=3, stride=1, pad=1, dilation=1)),
    ("conv2d_nhwc", "float32", dict(n=1, c=16, h=14, w=14, k=32, r=1, stride=1, pad=0, dilation=1)),
    ("conv2d_nhwc", "int8", dict(n=1, c=16, h=8, w=8, k=16, r=3, stride=1, pad=1, dilation=1)),
    ("depthwise_conv2d", "float32", dict(n=1, c=32, h=14, w=14, r=3, stride=1, pad=1)),
    ("grouped_conv2d", "float32", dict(n=1, c=32, h=14, w=14, k=32, r=3, stride=1, pad=1, groups=4)),
    ("conv2d_transpose", "float32", dict(n=1, c=16, h=8, w=8, k=8, r=4, stride=2, pad=1)),
    ("pool2d", "float32", dict(n=1, c=16, h=28, w=28, kernel=3, stride=2, pad=1, pool="max")),
    ("softmax", "float32", dict(rows=128, cols=128)),
    ("softmax", "float16", dict(rows=64, cols=128)),
    ("layer_norm", "float32", dict(rows=64, cols=256)),
    ("rms_norm", "float16", dict(rows=64, cols=256)),
    ("reduce", "float32", dict(rows=128, cols=256, op="sum")),
    ("bias_act", "float16", dict(rows=64, cols=256, act="gelu")),
    ("attention_score", "float32", dict(b=1, h=2, sq=32, skv=32, d=16, mask="causal")),
]


# ------------------------------------------------------------------------------ shape samplers
def _log_dim(rng: random.Random, lo: int, hi: int, multiple: int = 1) -> int:
    """Log-uniform in [lo, hi], rounded to a multiple (values below the multiple stay exact)."""
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    if v < multiple:
        return max(lo, int(round(v)))
    return max(lo, min(hi, int(round(v / multiple)) * multiple))


SPATIAL = (7, 14, 28, 56, 112, 224)


def _hw(rng: random.Random) -> int:
    return rng.choice(SPATIAL) if rng.random() < 0.5 else _log_dim(rng, 4, 256)


def _conv(rng: random.Random) -> dict[str, Any]:
    r = rng.choice((1, 3, 3, 5, 7))
    hw = _hw(rng)
    return dict(n=rng.choice((1, 1, 2, 4, 8, 16, 32)), c=rng.choice((3, 3)) if rng.random() < 0.05 else _log_dim(rng, 8, 1024, 8),
                h=hw, w=hw if rng.random() < 0.9 else _hw(rng), k=_log_dim(rng, 8, 1024, 8), r=r,
                stride=rng.choice((1, 1, 2)), pad=r // 2, dilation=rng.choice((1, 1, 1, 2)) if r > 1 else 1)


def _rows_cols(rng: random.Random) -> dict[str, Any]:
    return dict(rows=_log_dim(rng, 1, 65536, 16), cols=_log_dim(rng, 16, 16384, 16))


SAMPLERS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "dense": lambda g: dict(m=_log_dim(g, 1, 4096, 16), n=_log_dim(g, 16, 8192, 16), k=_log_dim(g, 16, 8192, 16)),
    "dense_bias_act": lambda g: dict(m=_log_dim(g, 1, 4096, 16), n=_log_dim(g, 16, 8192, 16),
                                     k=_log_dim(g, 16, 8192, 16), act=g.choice(ACTIVATIONS)),
    "batch_matmul": lambda g: dict(b=_log_dim(g, 1, 64), m=_log_dim(g, 1, 2048, 8), n=_log_dim(g, 1, 2048, 8),
                                   k=_log_dim(g, 8, 2048, 8), ta=g.choice((0, 0, 1)), tb=g.choice((0, 1))),
    "gemv": lambda g: dict(n=_log_dim(g, 64, 16384, 64), k=_log_dim(g, 64, 16384, 64)),
    "conv2d_nchw": _conv,
    "conv2d_nhwc": _conv,
    "depthwise_conv2d": lambda g: (lambda r, hw: dict(n=g.choice((1, 1, 2, 4, 8, 16)), c=_log_dim(g, 8, 1024, 8),
                                                      h=hw, w=hw, r=r, stride=g.choice((1, 2)), pad=r // 2))(
        g.choice((3, 3, 5, 7)), _hw(g)),
    "grouped_conv2d": lambda g: (lambda groups, hw: dict(
        n=g.choice((1, 1, 2, 4, 8)), c=groups * g.choice((1, 2, 4, 8, 16, 32)), h=hw, w=hw,
        k=groups * g.choice((1, 2, 4, 8, 16, 32)), r=3, stride=g.choice((1, 2)), pad=1, groups=groups))(
        g.choice((2, 4, 8, 16, 32, 64)), _hw(g)),
    "conv2d_transpose": lambda g: (lambda r: dict(
        n=g.choice((1, 1, 2, 4, 8)), c=_log_dim(g, 8, 512, 8), h=(hw := _log_dim(g, 4, 64)), w=hw,
        k=_log_dim(g, 3, 512, 8), r=r, stride=g.choice((1, 2, 2)), pad=g.randrange(0, r)))(g.choice((2, 3, 4, 5))),
    "pool2d": lambda g: (lambda kk, hw: dict(n=g.choice((1, 1, 2, 4, 8, 16)), c=_log_dim(g, 8, 2048, 8), h=hw, w=hw,
                                             kernel=kk, stride=g.choice((1, 2, kk)), pad=g.randrange(0, kk // 2 + 1),
                                             pool=g.choice(("max", "avg"))))(g.choice((2, 3, 5, 7)), _hw(g)),
    "softmax": _rows_cols,
    "layer_norm": _rows_cols,
    "rms_norm": _rows_cols,
    "reduce": lambda g: {**_rows_cols(g), "op": g.choice(("sum", "max", "mean"))},
    "bias_act": lambda g: {**_rows_cols(g), "act": g.choice(ACTIVATIONS)},
    "attention_score": lambda g: (lambda sq, mask: dict(
        b=g.choice((1, 2, 4, 8)), h=g.choice((1, 2, 4, 8, 12, 16, 32)), sq=sq,
        skv=sq if g.random() < 0.5 else _log_dim(g, sq, max(sq, 4096), 8 if sq >= 8 else 1),
        d=g.choice((32, 64, 80, 96, 128)), mask=mask))(_log_dim(g, 1, 2048, 8), g.choice(("causal", "padding"))),
}
assert set(SAMPLERS) == set(FAMILIES), "every family needs a shape sampler"


def sample_specs(family: str, dtype: str, count: int, seed: int) -> Iterator[WorkloadSpec]:
    """``count`` valid specs drawn from the family's ranges; one RNG per (seed, family, dtype), so adding a
    family or dtype never changes the others' draws."""
    rng = random.Random(f"{seed}:{family}:{dtype}")
    fam = FAMILIES[family]
    made = tries = 0
    while made < count and tries < count * 20:
        tries += 1
        shapes = SAMPLERS[family](rng)
        try:
            spec = WorkloadSpec.of(family, dtype, shapes, f"synthetic:sampled-seed{seed}")
            spec.flops()  # validates output sizes without TVM
        except SpecError:
            continue
        if not fam.accepts(shapes, dtype):
            continue
        made += 1
        yield spec


# ------------------------------------------------------------------------------------ profiles
def resolve(cfg: WorkloadsConfig) -> Profile:
    try:
        prof = PROFILES[cfg.profile]
    except KeyError as e:
        raise SpecError(f"workloads.profile {cfg.profile!r} unknown; known: {sorted(PROFILES)}") from e
    return dataclasses.replace(
        prof,
        samples_per_family=prof.samples_per_family if cfg.samples_per_family is None else cfg.samples_per_family,
        graph_models=prof.graph_models if cfg.graph_models is None else tuple(cfg.graph_models),
    )


def profile_specs(cfg: WorkloadsConfig) -> list[WorkloadSpec]:
    """The profile's specs in a deterministic order, distinct by key, filtered by families and dtypes."""
    prof = resolve(cfg)
    unknown = sorted(set(cfg.families) - set(FAMILIES))
    if unknown:
        raise SpecError(f"workloads.families: unknown {unknown}; known: {sorted(FAMILIES)}")
    families = [f for f in FAMILIES if not cfg.families or f in cfg.families]
    dtypes = list(cfg.dtypes)

    def wanted(family: str, dtype: str, shapes: dict[str, Any]) -> bool:
        fam = FAMILIES[family]
        return family in families and dtype in dtypes and dtype in fam.dtypes and fam.accepts(shapes, dtype)

    def candidates() -> Iterator[WorkloadSpec]:
        if prof.curated:
            for family, dtype, shapes in CURATED:
                if wanted(family, dtype, shapes):
                    yield WorkloadSpec.of(family, dtype, shapes, "synthetic:curated")
        if prof.model_shapes:
            for model, family, shapes in model_shapes():
                for dtype in dtypes:
                    if wanted(family, dtype, shapes):
                        yield WorkloadSpec.of(family, dtype, shapes, f"synthetic:{model}")
        if prof.samples_per_family:
            for family in families:
                for dtype in dtypes:
                    if dtype in FAMILIES[family].dtypes:
                        yield from sample_specs(family, dtype, prof.samples_per_family, cfg.seed)

    seen: set[tuple] = set()
    out = []
    for spec in candidates():
        if spec.key not in seen:
            seen.add(spec.key)
            out.append(spec)
    return out
