"""Real model configurations (published hyper-parameters) as data, and the kernel shapes they imply.

Transformers give the Linear layers (QKV, output, MLP up/down), attention (scores, softmax, P@V),
normalisation, activation epilogues and decode-time GEMVs for a set of (batch, sequence) points; CNNs give
their convolution, depthwise, grouped, transposed-convolution and pooling layers.
"""
from __future__ import annotations

from typing import Any, Iterator

# name -> hidden size, attention heads, key/value heads, MLP width, norm, activation, mask, max positions
TRANSFORMERS: dict[str, dict[str, Any]] = {
    "llama-2-7b": dict(hidden=4096, heads=32, kv_heads=32, ffn=11008, norm="rms_norm", act="silu", mask="causal", max_pos=4096),
    "llama-3-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, norm="rms_norm", act="silu", mask="causal", max_pos=8192),
    "llama-3.2-1b": dict(hidden=2048, heads=32, kv_heads=8, ffn=8192, norm="rms_norm", act="silu", mask="causal", max_pos=8192),
    "tinyllama-1.1b": dict(hidden=2048, heads=32, kv_heads=4, ffn=5632, norm="rms_norm", act="silu", mask="causal", max_pos=2048),
    "bert-base": dict(hidden=768, heads=12, kv_heads=12, ffn=3072, norm="layer_norm", act="gelu", mask="padding", max_pos=512),
    "bert-large": dict(hidden=1024, heads=16, kv_heads=16, ffn=4096, norm="layer_norm", act="gelu", mask="padding", max_pos=512),
    "gpt2": dict(hidden=768, heads=12, kv_heads=12, ffn=3072, norm="layer_norm", act="gelu", mask="causal", max_pos=1024),
    "gpt2-medium": dict(hidden=1024, heads=16, kv_heads=16, ffn=4096, norm="layer_norm", act="gelu", mask="causal", max_pos=1024),
    "vit-b16": dict(hidden=768, heads=12, kv_heads=12, ffn=3072, norm="layer_norm", act="gelu", mask="padding", max_pos=197),
    "vit-l16": dict(hidden=1024, heads=16, kv_heads=16, ffn=4096, norm="layer_norm", act="gelu", mask="padding", max_pos=197),
}
BATCHES = (1, 4, 16)
SEQUENCES = (64, 128, 197, 512, 1024, 2048)

# CNN layers: (in channels, spatial size, out channels, kernel, stride, pad)
CONV_LAYERS: dict[str, list[tuple[int, int, int, int, int, int]]] = {
    "resnet-18": [(3, 224, 64, 7, 2, 3), (64, 56, 64, 3, 1, 1), (64, 56, 128, 3, 2, 1), (128, 28, 128, 3, 1, 1),
                  (128, 28, 256, 3, 2, 1), (256, 14, 256, 3, 1, 1), (256, 14, 512, 3, 2, 1), (512, 7, 512, 3, 1, 1),
                  (64, 56, 128, 1, 2, 0), (128, 28, 256, 1, 2, 0), (256, 14, 512, 1, 2, 0)],
    "resnet-50": [(64, 56, 64, 1, 1, 0), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0), (256, 56, 128, 1, 1, 0),
                  (128, 28, 128, 3, 1, 1), (128, 28, 512, 1, 1, 0), (256, 56, 512, 1, 2, 0), (512, 28, 128, 1, 1, 0),
                  (512, 28, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1), (256, 14, 1024, 1, 1, 0), (1024, 14, 256, 1, 1, 0),
                  (1024, 14, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1), (512, 7, 2048, 1, 1, 0), (2048, 7, 512, 1, 1, 0)],
    "vit-b16-patch": [(3, 224, 768, 16, 16, 0)],
    "vit-l16-patch": [(3, 224, 1024, 16, 16, 0)],
}
# MobileNet-V2 depthwise layers: (channels, spatial size, stride); kernel 3, pad 1
DEPTHWISE_LAYERS: dict[str, list[tuple[int, int, int]]] = {
    "mobilenet-v2": [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
                     (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)],
}
# ResNeXt-50 32x4d grouped 3x3 layers: (channels in = out, spatial size, stride, groups)
GROUPED_LAYERS: dict[str, list[tuple[int, int, int, int]]] = {
    "resnext-50": [(128, 56, 1, 32), (256, 56, 2, 32), (256, 28, 1, 32), (512, 28, 2, 32), (512, 14, 1, 32),
                   (1024, 14, 2, 32), (1024, 7, 1, 32)],
}
# Decoder upsampling: (in channels, spatial size, out channels, kernel, stride, pad)
TRANSPOSED_LAYERS: dict[str, list[tuple[int, int, int, int, int, int]]] = {
    "dcgan-generator": [(512, 4, 256, 4, 2, 1), (256, 8, 128, 4, 2, 1), (128, 16, 64, 4, 2, 1), (64, 32, 3, 4, 2, 1)],
    "unet-decoder": [(1024, 28, 512, 2, 2, 0), (512, 56, 256, 2, 2, 0), (256, 104, 128, 2, 2, 0), (128, 200, 64, 2, 2, 0)],
}
# Pooling: (channels, spatial size, kernel, stride, pad, pool)
POOL_LAYERS: dict[str, list[tuple[int, int, int, int, int, str]]] = {
    "resnet": [(64, 112, 3, 2, 1, "max"), (512, 7, 7, 1, 0, "avg"), (2048, 7, 7, 1, 0, "avg")],
    "vgg-16": [(64, 224, 2, 2, 0, "max"), (128, 112, 2, 2, 0, "max"), (256, 56, 2, 2, 0, "max"),
               (512, 28, 2, 2, 0, "max"), (512, 14, 2, 2, 0, "max")],
}
CNN_BATCHES = (1, 8, 32)


def transformer_shapes(name: str, cfg: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(family, shapes) for one transformer at every (batch, sequence) point it supports."""
    h, heads, kvh, ffn = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    d = h // heads
    gated = cfg["act"] == "silu"  # Llama MLPs: gate and up projections, then down
    for b in BATCHES:
        yield "gemv", dict(n=h, k=h)
        yield "gemv", dict(n=ffn, k=h)
        yield "gemv", dict(n=h, k=ffn)
        yield "batch_matmul", dict(b=b * heads, m=1, n=2048, k=d, ta=0, tb=1)  # decode scores, 2k cache
        for s in SEQUENCES:
            if s > cfg["max_pos"]:
                continue
            t = b * s
            yield "dense", dict(m=t, n=h + 2 * kvh * d, k=h)  # fused QKV projection
            yield "dense", dict(m=t, n=h, k=h)
            yield "dense_bias_act", dict(m=t, n=ffn * (2 if gated else 1), k=h, act=cfg["act"])
            yield "dense", dict(m=t, n=h, k=ffn)
            yield "batch_matmul", dict(b=b * heads, m=s, n=s, k=d, ta=0, tb=1)  # Q @ K^T
            yield "batch_matmul", dict(b=b * heads, m=s, n=d, k=s, ta=0, tb=0)  # P @ V
            yield "softmax", dict(rows=b * heads * s, cols=s)
            yield cfg["norm"], dict(rows=t, cols=h)
            yield "bias_act", dict(rows=t, cols=ffn, act=cfg["act"])
            yield "reduce", dict(rows=t, cols=h, op="mean")
            yield "attention_score", dict(b=b, h=heads, sq=s, skv=s, d=d, mask=cfg["mask"])


def cnn_shapes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(model, family, shapes) for every CNN layer at every batch size."""
    for n in CNN_BATCHES:
        for model, layers in CONV_LAYERS.items():
            for c, hw, k, r, st, p in layers:
                conv = dict(n=n, c=c, h=hw, w=hw, k=k, r=r, stride=st, pad=p, dilation=1)
                yield model, "conv2d_nchw", conv
                yield model, "conv2d_nhwc", conv
        for model, layers in DEPTHWISE_LAYERS.items():
            for c, hw, st in layers:
                yield model, "depthwise_conv2d", dict(n=n, c=c, h=hw, w=hw, r=3, stride=st, pad=1)
        for model, layers in GROUPED_LAYERS.items():
            for c, hw, st, g in layers:
                yield model, "grouped_conv2d", dict(n=n, c=c, h=hw, w=hw, k=c, r=3, stride=st, pad=1, groups=g)
        for model, layers in TRANSPOSED_LAYERS.items():
            for c, hw, k, r, st, p in layers:
                yield model, "conv2d_transpose", dict(n=n, c=c, h=hw, w=hw, k=k, r=r, stride=st, pad=p)
        for model, layers in POOL_LAYERS.items():
            for c, hw, kk, st, p, pool in layers:
                yield model, "pool2d", dict(n=n, c=c, h=hw, w=hw, kernel=kk, stride=st, pad=p, pool=pool)


def model_shapes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(model, family, shapes) over every configured model."""
    for name, cfg in TRANSFORMERS.items():
        for fam, shapes in transformer_shapes(name, cfg):
            yield name, fam, shapes
    yield from cnn_shapes()
