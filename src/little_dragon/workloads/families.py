"""Kernel families: TE/topi definitions of real tensor operators, parameterised by shapes and dtype.

Every family turns ``(shapes, dtype)`` into TE tensors (inputs first, then the output) that
``te.create_prim_func`` makes into schedulable TensorIR, and counts its FLOPs analytically (a multiply-add
is 2 operations; exp, max, division, comparison each count 1).  Mixed precision follows the usual kernel
libraries: float16 inputs accumulate (and normalise) in float32; int8 inputs accumulate in int32.  Input
tensors are always named ``A, B, C, ...`` and the output ``out`` so that naming never splits two equal
kernels.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

ACCUMULATOR = {"float32": "float32", "float16": "float32", "int8": "int32"}
FLOAT = ("float32", "float16")
ALL = ("float32", "float16", "int8")
ACTIVATIONS = ("relu", "gelu", "silu")


class SpecError(ValueError):
    """Shape parameters a family cannot build (missing key, non-divisible groups, empty output...)."""


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    dtypes: tuple[str, ...]
    params: tuple[str, ...]  # shape-parameter names, in the order used for workload names
    build: Callable[[dict[str, Any], str], list[Any]]
    flops: Callable[[dict[str, Any]], float]
    doc: str
    accepts: Callable[[dict[str, Any], str], bool] = lambda shapes, dtype: True  # dtype-specific exclusions


FAMILIES: dict[str, Family] = {}


def family(name: str, dtypes: tuple[str, ...], params: str, flops: Callable[[dict[str, Any]], float],
           accepts: Callable[[dict[str, Any], str], bool] | None = None):
    def register(fn):
        FAMILIES[name] = Family(name, dtypes, tuple(params.split()), fn, flops, (fn.__doc__ or "").strip(),
                                accepts or (lambda shapes, dtype: True))
        return fn
    return register


def family_of(name: str) -> Family:
    """The registered family ``name``; a SpecError naming the known ones otherwise."""
    f = FAMILIES.get(name)
    if f is None:
        raise SpecError(f"unknown family {name!r}; known: {sorted(FAMILIES)}")
    return f


def check_shape_params(f: Family, shapes: dict[str, Any], where: str = "") -> None:
    """A SpecError (prefixed by ``where``) unless ``shapes`` names exactly the family's shape parameters."""
    missing = [p for p in f.params if p not in shapes]
    extra = sorted(set(shapes) - set(f.params))
    if missing or extra:
        raise SpecError(f"{where}family {f.name}: shape parameters missing {missing}, unknown {extra}")


def build_tensors(fam: str, shapes: dict[str, Any], dtype: str) -> list[Any]:
    f = family_of(fam)
    if dtype not in f.dtypes:
        raise SpecError(f"family {fam} has no {dtype} variant (has {list(f.dtypes)})")
    check_shape_params(f, shapes)
    if not f.accepts(shapes, dtype):
        raise SpecError(f"family {fam} has no {dtype} variant for {shapes}")
    return f.build(shapes, dtype)


# ---------------------------------------------------------------------------------------- helpers
def _te():
    from tvm import te, topi

    return te, topi


def _ph(shape, dtype, name):
    te, _ = _te()
    return te.placeholder(tuple(int(s) for s in shape), dtype, name=name)


def _dtype(x) -> str:
    """dtype of a TE tensor, tensor element or PrimExpr (TVM 0.27 PrimExprs carry it in ``.ty``)."""
    d = getattr(x, "dtype", None)
    return str(d if d is not None else x.ty)


def _cast(x, dtype):
    return x if _dtype(x) == dtype else x.astype(dtype)


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out <= 0:
        raise SpecError(f"empty output: size {size}, kernel {kernel}, stride {stride}, pad {pad}")
    return out


def _activation(x, act: str):
    """relu / gelu (tanh form, as GPT-2 and BERT use) / silu on a TE expression."""
    te, _ = _te()
    import tvm

    dt = _dtype(x)
    if act == "relu":
        return tvm.tirx.max(x, tvm.tirx.const(0, dt))
    if act == "gelu":
        c = tvm.tirx.const(math.sqrt(2.0 / math.pi), dt)
        inner = c * (x + tvm.tirx.const(0.044715, dt) * x * x * x)
        return tvm.tirx.const(0.5, dt) * x * (tvm.tirx.const(1.0, dt) + te.tanh(inner))
    if act == "silu":
        return x / (tvm.tirx.const(1.0, dt) + te.exp(-x))
    raise SpecError(f"unknown activation {act!r}; known: {ACTIVATIONS}")


ACT_FLOPS = {"relu": 1, "gelu": 8, "silu": 4}


def _matmul(a, b, m, n, k, acc, a_index, b_index, name="out", batch=None):
    te, _ = _te()
    r = te.reduce_axis((0, k), name="k")
    if batch is None:
        return te.compute((m, n), lambda i, j: te.sum(_cast(a_index(i, r), acc) * _cast(b_index(j, r), acc), axis=r),
                          name=name)
    return te.compute((batch, m, n), lambda z, i, j: te.sum(
        _cast(a_index(z, i, r), acc) * _cast(b_index(z, j, r), acc), axis=r), name=name)


# ------------------------------------------------------------------------------ matmul families
@family("dense", ALL, "m n k", lambda s: 2.0 * s["m"] * s["n"] * s["k"])
def dense(s, dtype):
    """out[m, n] = sum_k A[m, k] * B[n, k] (a Linear layer: weight stored [out, in])."""
    acc = ACCUMULATOR[dtype]
    a, b = _ph((s["m"], s["k"]), dtype, "A"), _ph((s["n"], s["k"]), dtype, "B")
    return [a, b, _matmul(a, b, s["m"], s["n"], s["k"], acc, lambda i, r: a[i, r], lambda j, r: b[j, r])]


@family("dense_bias_act", FLOAT, "m n k act",
        lambda s: 2.0 * s["m"] * s["n"] * s["k"] + s["m"] * s["n"] * (1 + ACT_FLOPS[s["act"]]))
def dense_bias_act(s, dtype):
    """act(A @ B^T + bias), cast back to the input dtype: a Linear layer with its fused epilogue."""
    te, _ = _te()
    acc = ACCUMULATOR[dtype]
    a, b = _ph((s["m"], s["k"]), dtype, "A"), _ph((s["n"], s["k"]), dtype, "B")
    bias = _ph((s["n"],), dtype, "C")
    mm = _matmul(a, b, s["m"], s["n"], s["k"], acc, lambda i, r: a[i, r], lambda j, r: b[j, r], name="matmul")
    out = te.compute((s["m"], s["n"]), lambda i, j: _cast(_activation(mm[i, j] + _cast(bias[j], acc), s["act"]), dtype),
                     name="out")
    return [a, b, bias, out]


@family("batch_matmul", ALL, "b m n k ta tb", lambda s: 2.0 * s["b"] * s["m"] * s["n"] * s["k"])
def batch_matmul(s, dtype):
    """out[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; ``ta``/``tb`` = 1 store A as [b, k, m] / B as [b, n, k]."""
    acc = ACCUMULATOR[dtype]
    bb, m, n, k = s["b"], s["m"], s["n"], s["k"]
    a = _ph((bb, k, m) if s["ta"] else (bb, m, k), dtype, "A")
    b = _ph((bb, n, k) if s["tb"] else (bb, k, n), dtype, "B")
    ai = (lambda z, i, r: a[z, r, i]) if s["ta"] else (lambda z, i, r: a[z, i, r])
    bi = (lambda z, j, r: b[z, j, r]) if s["tb"] else (lambda z, j, r: b[z, r, j])
    return [a, b, _matmul(a, b, m, n, k, acc, ai, bi, batch=bb)]


@family("gemv", ALL, "n k", lambda s: 2.0 * s["n"] * s["k"])
def gemv(s, dtype):
    """out[n] = sum_k A[n, k] * B[k]: one-token decoding through a Linear layer."""
    te, _ = _te()
    acc = ACCUMULATOR[dtype]
    a, x = _ph((s["n"], s["k"]), dtype, "A"), _ph((s["k"],), dtype, "B")
    r = te.reduce_axis((0, s["k"]), name="k")
    return [a, x, te.compute((s["n"],), lambda i: te.sum(_cast(a[i, r], acc) * _cast(x[r], acc), axis=r), name="out")]


# -------------------------------------------------------------------------------- convolutions
def _conv_flops(s, groups=1):
    oh = _conv_out(s["h"], s["r"], s["stride"], s["pad"], s.get("dilation", 1))
    ow = _conv_out(s["w"], s["r"], s["stride"], s["pad"], s.get("dilation", 1))
    return 2.0 * s["n"] * s["k"] * oh * ow * (s["c"] // groups) * s["r"] * s["r"]


def _check_conv(s):
    _conv_out(s["h"], s["r"], s["stride"], s["pad"], s.get("dilation", 1))
    _conv_out(s["w"], s["r"], s["stride"], s["pad"], s.get("dilation", 1))


@family("conv2d_nchw", ALL, "n c h w k r stride pad dilation", _conv_flops)
def conv2d_nchw(s, dtype):
    """2-D convolution, NCHW data and KCRS (square r x r) weights."""
    _, topi = _te()
    _check_conv(s)
    x = _ph((s["n"], s["c"], s["h"], s["w"]), dtype, "A")
    wt = _ph((s["k"], s["c"], s["r"], s["r"]), dtype, "B")
    out = topi.nn.conv2d_nchw(x, wt, s["stride"], s["pad"], s["dilation"], out_dtype=ACCUMULATOR[dtype])
    return [x, wt, out]


@family("conv2d_nhwc", ALL, "n c h w k r stride pad dilation", _conv_flops)
def conv2d_nhwc(s, dtype):
    """2-D convolution, NHWC data and RSCK (HWIO) weights."""
    _, topi = _te()
    _check_conv(s)
    x = _ph((s["n"], s["h"], s["w"], s["c"]), dtype, "A")
    wt = _ph((s["r"], s["r"], s["c"], s["k"]), dtype, "B")
    out = topi.nn.conv2d_nhwc(x, wt, s["stride"], s["pad"], s["dilation"], out_dtype=ACCUMULATOR[dtype])
    return [x, wt, out]


@family("depthwise_conv2d", ALL, "n c h w r stride pad",
        lambda s: 2.0 * s["n"] * s["c"] * s["r"] * s["r"] * _conv_out(s["h"], s["r"], s["stride"], s["pad"])
        * _conv_out(s["w"], s["r"], s["stride"], s["pad"]))
def depthwise_conv2d(s, dtype):
    """Depthwise 2-D convolution (channel multiplier 1), NCHW data, [c, 1, r, r] weights."""
    _, topi = _te()
    _check_conv(s)
    x = _ph((s["n"], s["c"], s["h"], s["w"]), dtype, "A")
    wt = _ph((s["c"], 1, s["r"], s["r"]), dtype, "B")
    out = topi.nn.depthwise_conv2d_nchw(x, wt, s["stride"], s["pad"], 1, out_dtype=ACCUMULATOR[dtype])
    return [x, wt, out]


@family("grouped_conv2d", ALL, "n c h w k r stride pad groups", lambda s: _conv_flops(s, s["groups"]))
def grouped_conv2d(s, dtype):
    """Grouped 2-D convolution (ResNeXt), NCHW data, [k, c / groups, r, r] weights."""
    _, topi = _te()
    _check_conv(s)
    g = s["groups"]
    if g < 2 or s["c"] % g or s["k"] % g:
        raise SpecError(f"grouped_conv2d: groups {g} must be >= 2 and divide c {s['c']} and k {s['k']}")
    x = _ph((s["n"], s["c"], s["h"], s["w"]), dtype, "A")
    wt = _ph((s["k"], s["c"] // g, s["r"], s["r"]), dtype, "B")
    out = topi.nn.group_conv2d_nchw(x, wt, s["stride"], s["pad"], 1, g, out_dtype=ACCUMULATOR[dtype])
    return [x, wt, out]


def _convT_out(s) -> int:
    out = (s["h"] - 1) * s["stride"] - 2 * s["pad"] + s["r"]
    if out <= 0:
        raise SpecError(f"conv2d_transpose: empty output for {s}")
    return out


@family("conv2d_transpose", FLOAT, "n c h w k r stride pad",
        lambda s: 2.0 * s["n"] * s["c"] * s["h"] * s["w"] * s["k"] * s["r"] * s["r"])
def conv2d_transpose(s, dtype):
    """Transposed 2-D convolution (decoder upsampling), NCHW data, [c, k, r, r] weights."""
    _, topi = _te()
    _convT_out(s)
    if s["pad"] >= s["r"]:
        raise SpecError(f"conv2d_transpose: pad {s['pad']} must be < kernel {s['r']}")
    x = _ph((s["n"], s["c"], s["h"], s["w"]), dtype, "A")
    wt = _ph((s["c"], s["k"], s["r"], s["r"]), dtype, "B")
    out = topi.nn.conv2d_transpose_nchw(x, wt, (s["stride"],) * 2, (s["pad"],) * 2, ACCUMULATOR[dtype], (0, 0))
    return [x, wt, out]


@family("pool2d", ALL, "n c h w kernel stride pad pool",
        lambda s: 1.0 * s["n"] * s["c"] * s["kernel"] ** 2 * _conv_out(s["h"], s["kernel"], s["stride"], s["pad"])
        * _conv_out(s["w"], s["kernel"], s["stride"], s["pad"]),
        accepts=lambda s, dtype: not (s["pool"] == "avg" and dtype == "int8"))
def pool2d(s, dtype):
    """Max or average 2-D pooling, NCHW (average pools count padding and accumulate in float32; int8 is max only)."""
    _, topi = _te()
    if s["pool"] not in ("max", "avg"):
        raise SpecError(f"pool2d: pool must be max or avg, got {s['pool']!r}")
    if s["pad"] * 2 > s["kernel"]:
        raise SpecError(f"pool2d: pad {s['pad']} larger than half the kernel {s['kernel']}")
    _conv_out(s["h"], s["kernel"], s["stride"], s["pad"])
    x = _ph((s["n"], s["c"], s["h"], s["w"]), dtype, "A")
    src = x if s["pool"] == "max" else _cast_tensor(x, ACCUMULATOR[dtype])
    out = topi.nn.pool2d(src, (s["kernel"],) * 2, (s["stride"],) * 2, (1, 1), (s["pad"],) * 4, s["pool"],
                         layout="NCHW", count_include_pad=True)
    return [x, out]


def _cast_tensor(x, dtype):
    te, _ = _te()
    if x.dtype == dtype:
        return x
    return te.compute(x.shape, lambda *i: x(*i).astype(dtype), name="cast")


# ------------------------------------------------------------------------- normalisation & co
@family("softmax", FLOAT, "rows cols", lambda s: 5.0 * s["rows"] * s["cols"])
def softmax(s, dtype):
    """Row softmax over the last axis (float16 computes in float32)."""
    _, topi = _te()
    x = _ph((s["rows"], s["cols"]), dtype, "A")
    y = topi.nn.softmax(_cast_tensor(x, "float32"), axis=-1)
    return [x, _cast_tensor(y, dtype) if dtype != "float32" else y]


@family("layer_norm", FLOAT, "rows cols", lambda s: 8.0 * s["rows"] * s["cols"])
def layer_norm(s, dtype):
    """LayerNorm over the last axis with gamma and beta (topi computes float16 in float32)."""
    _, topi = _te()
    x = _ph((s["rows"], s["cols"]), dtype, "A")
    g, b = _ph((s["cols"],), dtype, "B"), _ph((s["cols"],), dtype, "C")
    return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[-1], epsilon=1e-5)]


@family("rms_norm", FLOAT, "rows cols", lambda s: 4.0 * s["rows"] * s["cols"])
def rms_norm(s, dtype):
    """RMSNorm over the last axis with a weight (Llama)."""
    _, topi = _te()
    x = _ph((s["rows"], s["cols"]), dtype, "A")
    g = _ph((s["cols"],), dtype, "B")
    return [x, g, topi.nn.rms_norm(x, g, axis=[-1], epsilon=1e-5)]


@family("reduce", ALL, "rows cols op", lambda s: 1.0 * s["rows"] * s["cols"],
        accepts=lambda s, dtype: not (s["op"] == "mean" and dtype == "int8"))
def reduce(s, dtype):
    """sum / max / mean over the last axis (sum and mean accumulate in float32 / int32)."""
    te, _ = _te()
    op = s["op"]
    if op not in ("sum", "max", "mean"):
        raise SpecError(f"reduce: op must be sum, max or mean, got {op!r}")
    if op == "mean" and dtype == "int8":
        raise SpecError("reduce: no int8 mean")
    x = _ph((s["rows"], s["cols"]), dtype, "A")
    r = te.reduce_axis((0, s["cols"]), name="k")
    if op == "max":
        return [x, te.compute((s["rows"],), lambda i: te.max(x[i, r], axis=r), name="out")]
    acc = ACCUMULATOR[dtype]
    total = te.compute((s["rows"],), lambda i: te.sum(_cast(x[i, r], acc), axis=r), name="sum" if op == "mean" else "out")
    if op == "sum":
        return [x, total]
    return [x, te.compute((s["rows"],), lambda i: total[i] / float(s["cols"]), name="out")]


@family("bias_act", FLOAT, "rows cols act", lambda s: 1.0 * s["rows"] * s["cols"] * (1 + ACT_FLOPS[s["act"]]))
def bias_act(s, dtype):
    """Elementwise chain: cast to float32, add bias, activation, cast back (a matmul epilogue on its own)."""
    te, _ = _te()
    x = _ph((s["rows"], s["cols"]), dtype, "A")
    bias = _ph((s["cols"],), dtype, "B")
    out = te.compute((s["rows"], s["cols"]), lambda i, j: _cast(
        _activation(_cast(x[i, j], "float32") + _cast(bias[j], "float32"), s["act"]), dtype), name="out")
    return [x, bias, out]


@family("attention_score", FLOAT, "b h sq skv d mask",
        lambda s: 2.0 * s["b"] * s["h"] * s["sq"] * s["skv"] * s["d"] + 7.0 * s["b"] * s["h"] * s["sq"] * s["skv"])
def attention_score(s, dtype):
    """softmax(Q K^T * d^-0.5 + mask) over keys; ``mask`` is ``causal`` (in-kernel, GPT/Llama) or
    ``padding`` (an additive [b, skv] input, BERT). Scores accumulate and normalise in float32."""
    te, topi = _te()
    import tvm

    b, h, sq, skv, d = s["b"], s["h"], s["sq"], s["skv"], s["d"]
    if s["mask"] not in ("causal", "padding"):
        raise SpecError(f"attention_score: mask must be causal or padding, got {s['mask']!r}")
    if s["mask"] == "causal" and skv < sq:
        raise SpecError(f"attention_score: causal mask needs skv >= sq ({skv} < {sq})")
    q, kk = _ph((b, h, sq, d), dtype, "A"), _ph((b, h, skv, d), dtype, "B")
    r = te.reduce_axis((0, d), name="k")
    scale = 1.0 / math.sqrt(d)
    qk = te.compute((b, h, sq, skv), lambda z, y, i, j: te.sum(
        _cast(q[z, y, i, r], "float32") * _cast(kk[z, y, j, r], "float32"), axis=r), name="qk")
    args = [q, kk]
    if s["mask"] == "causal":
        neg = tvm.tirx.const(-3.0e38, "float32")
        scores = te.compute((b, h, sq, skv), lambda z, y, i, j: tvm.tirx.Select(
            j <= i + (skv - sq), qk[z, y, i, j] * scale, neg), name="scores")
    else:
        m = _ph((b, skv), dtype, "C")
        args.append(m)
        scores = te.compute((b, h, sq, skv), lambda z, y, i, j: qk[z, y, i, j] * scale + _cast(m[z, j], "float32"),
                            name="scores")
    p = topi.nn.softmax(scores, axis=-1)
    return args + [_cast_tensor(p, dtype) if dtype != "float32" else p]
