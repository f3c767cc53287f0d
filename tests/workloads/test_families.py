"""Every family builds with llvm and computes what it claims, against an independent float64 reference."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from little_dragon.workloads.families import ACCUMULATOR, FAMILIES
from little_dragon.workloads.spec import WorkloadSpec, build_module

SMALL = {
    "dense": dict(m=5, n=7, k=12),
    "dense_bias_act": dict(m=5, n=7, k=12, act="gelu"),
    "batch_matmul": dict(b=2, m=5, n=6, k=8, ta=1, tb=1),
    "gemv": dict(n=9, k=16),
    "conv2d_nchw": dict(n=1, c=3, h=7, w=7, k=4, r=3, stride=2, pad=1, dilation=1),
    "conv2d_nhwc": dict(n=2, c=3, h=6, w=6, k=4, r=3, stride=1, pad=1, dilation=2),
    "depthwise_conv2d": dict(n=1, c=4, h=6, w=6, r=3, stride=1, pad=1),
    "grouped_conv2d": dict(n=1, c=4, h=5, w=5, k=6, r=3, stride=1, pad=1, groups=2),
    "conv2d_transpose": dict(n=1, c=3, h=4, w=4, k=2, r=4, stride=2, pad=1),
    "pool2d": dict(n=1, c=2, h=7, w=7, kernel=3, stride=2, pad=1, pool="avg"),
    "softmax": dict(rows=3, cols=10),
    "layer_norm": dict(rows=3, cols=10),
    "rms_norm": dict(rows=3, cols=10),
    "reduce": dict(rows=3, cols=10, op="mean"),
    "bias_act": dict(rows=3, cols=10, act="silu"),
    "attention_score": dict(b=1, h=2, sq=3, skv=5, d=8, mask="causal"),
}
# extra variants whose code paths differ from the SMALL ones
VARIANTS = [
    ("batch_matmul", dict(b=2, m=5, n=6, k=8, ta=0, tb=0), "float32"),
    ("pool2d", dict(n=1, c=2, h=7, w=7, kernel=3, stride=2, pad=1, pool="max"), "float32"),
    ("pool2d", dict(n=1, c=2, h=7, w=7, kernel=3, stride=2, pad=1, pool="max"), "int8"),
    ("reduce", dict(rows=3, cols=10, op="max"), "float16"),
    ("reduce", dict(rows=3, cols=10, op="sum"), "int8"),
    ("dense_bias_act", dict(m=4, n=6, k=8, act="relu"), "float32"),
    ("bias_act", dict(rows=3, cols=10, act="gelu"), "float32"),
    ("attention_score", dict(b=2, h=1, sq=4, skv=4, d=8, mask="padding"), "float16"),
]


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


ACT = {"relu": lambda x: np.maximum(x, 0), "gelu": _gelu_tanh, "silu": lambda x: x / (1 + np.exp(-x))}


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def reference(family: str, s: dict, ins: list[np.ndarray]) -> np.ndarray:
    x = [np.asarray(a, dtype=np.float64) for a in ins]
    if family == "dense":
        return x[0] @ x[1].T
    if family == "dense_bias_act":
        return ACT[s["act"]](x[0] @ x[1].T + x[2])
    if family == "batch_matmul":
        a = x[0].transpose(0, 2, 1) if s["ta"] else x[0]
        b = x[1].transpose(0, 2, 1) if s["tb"] else x[1]
        return a @ b
    if family == "gemv":
        return x[0] @ x[1]
    if family == "conv2d_nchw":
        return F.conv2d(_t(x[0]), _t(x[1]), stride=s["stride"], padding=s["pad"], dilation=s["dilation"]).numpy()
    if family == "conv2d_nhwc":
        y = F.conv2d(_t(x[0]).permute(0, 3, 1, 2), _t(x[1]).permute(3, 2, 0, 1), stride=s["stride"],
                     padding=s["pad"], dilation=s["dilation"])
        return y.permute(0, 2, 3, 1).numpy()
    if family == "depthwise_conv2d":
        return F.conv2d(_t(x[0]), _t(x[1]), stride=s["stride"], padding=s["pad"], groups=s["c"]).numpy()
    if family == "grouped_conv2d":
        return F.conv2d(_t(x[0]), _t(x[1]), stride=s["stride"], padding=s["pad"], groups=s["groups"]).numpy()
    if family == "conv2d_transpose":
        return F.conv_transpose2d(_t(x[0]), _t(x[1]), stride=s["stride"], padding=s["pad"]).numpy()
    if family == "pool2d":
        if s["pool"] == "max":
            return F.max_pool2d(_t(x[0]), s["kernel"], s["stride"], s["pad"]).numpy()
        return F.avg_pool2d(_t(x[0]), s["kernel"], s["stride"], s["pad"], count_include_pad=True).numpy()
    if family == "softmax":
        return _softmax(x[0])
    if family == "layer_norm":
        mu, var = x[0].mean(-1, keepdims=True), x[0].var(-1, keepdims=True)
        return (x[0] - mu) / np.sqrt(var + 1e-5) * x[1] + x[2]
    if family == "rms_norm":
        return x[0] / np.sqrt((x[0] ** 2).mean(-1, keepdims=True) + 1e-5) * x[1]
    if family == "reduce":
        return {"sum": x[0].sum(-1), "max": x[0].max(-1), "mean": x[0].mean(-1)}[s["op"]]
    if family == "bias_act":
        return ACT[s["act"]](x[0] + x[1])
    if family == "attention_score":
        scores = x[0] @ x[1].transpose(0, 1, 3, 2) / math.sqrt(s["d"])
        if s["mask"] == "causal":
            sq, skv = s["sq"], s["skv"]
            allowed = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
            scores = np.where(allowed, scores, -np.inf)
        else:
            scores = scores + x[2][:, None, None, :]
        return _softmax(scores)
    raise AssertionError(family)


def _inputs(args_info, n_in, dtype, rng):
    out = []
    for a in args_info[:n_in]:
        shape = [int(d) for d in a.shape]
        if dtype == "int8":
            out.append(rng.integers(-8, 8, size=shape).astype("int8"))
        else:
            out.append((rng.standard_normal(shape) * 0.5).astype(dtype))
    return out


def run_and_check(family: str, shapes: dict, dtype: str) -> None:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    spec = WorkloadSpec.of(family, dtype, shapes, "test")
    mod = build_module(spec)
    rt = tvm.tirx.build(mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 1}))
    info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    rng = np.random.default_rng(0)
    ins = _inputs(info, len(info) - 1, dtype, rng)
    dev = tvm.cpu()
    out_info = info[-1]
    out = tvm.runtime.tensor(np.zeros([int(d) for d in out_info.shape], dtype=str(out_info.dtype)), dev)
    rt["main"](*[tvm.runtime.tensor(a, dev) for a in ins], out)
    got = out.numpy()
    want = reference(family, shapes, ins)
    assert got.shape == want.shape, f"{spec.name}: shape {got.shape} != {want.shape}"
    matmul_like = family not in ("softmax", "layer_norm", "rms_norm", "bias_act", "attention_score", "pool2d",
                                 "dense_bias_act") \
        and not (family == "reduce" and shapes["op"] == "max")
    if matmul_like:  # the accumulator dtype is the output dtype for mixed precision
        assert str(out_info.dtype) == ACCUMULATOR[dtype], f"{spec.name}: output {out_info.dtype}"
    if dtype == "int8":
        np.testing.assert_array_equal(got, np.round(want).astype(got.dtype), err_msg=spec.name)
    else:
        tol = 2e-2 if dtype == "float16" else 1e-4
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=spec.name)


def test_at_least_12_families_and_all_have_small_cases():
    assert len(FAMILIES) >= 12
    assert set(SMALL) == set(FAMILIES)


@pytest.mark.parametrize("family,dtype", [(f, d) for f in FAMILIES for d in FAMILIES[f].dtypes
                                          if FAMILIES[f].accepts(SMALL[f], d)])
def test_family_matches_reference(family, dtype):
    run_and_check(family, SMALL[family], dtype)


@pytest.mark.parametrize("family,shapes,dtype", VARIANTS, ids=[f"{f}-{d}-{i}" for i, (f, _, d) in enumerate(VARIANTS)])
def test_variant_matches_reference(family, shapes, dtype):
    run_and_check(family, shapes, dtype)


def test_analytic_flops_match_tir_walk_for_matmul_and_conv():
    """The analytic counts agree with TVM's own TIR walk where both count the same thing."""
    from tvm.s_tir.analysis import estimate_tir_flops

    for family in ("dense", "batch_matmul", "gemv", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d",
                   "grouped_conv2d"):
        spec = WorkloadSpec.of(family, "float32", SMALL[family], "test")
        assert spec.flops() == pytest.approx(estimate_tir_flops(build_module(spec))), family
