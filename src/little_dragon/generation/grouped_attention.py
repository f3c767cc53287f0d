"""``grouped_sdpa``: SDPA attention that reads GQA's shared K/V heads once instead of repeating them.

transformers' ``sdpa`` attention, given a mask (left padding; shared-prefix sampling's 4-D mask), copies every
K/V head ``num_key_value_groups`` times (``repeat_kv``) before calling SDPA, because PyTorch's fused kernels
take GQA only without a mask: with SmolLM2's 9 query heads over 3 K/V heads that is 3x the KV cache written and
read again at every decoding step. For short queries (decoding: 1 to k positions) the query heads of one K/V
head can instead go along the query axis -- (B, H, q, d) -> (B, H_kv, groups*q, d), the mask's rows repeated per
group -- which is the same attention, computed by one masked SDPA over the K/V heads as stored. Prefill (long
queries, causal) and models without GQA take transformers' ``sdpa_attention_forward`` unchanged.

``with grouped_sdpa(model): ...`` switches a model to it and back (the mask functions are sdpa's).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

NAME = "grouped_sdpa"
# queries per K/V head up to which the fold is used (decoding feeds 1..k tokens; SDPA's kernels take any q)
MAX_FOLDED_QUERIES = 512


def grouped_sdpa_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                         dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
                         **kwargs: Any) -> tuple[Any, None]:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    b, h, q, d = query.shape
    if (groups == 1 or attention_mask is None or attention_mask.dim() != 4 or attention_mask.shape[1] != 1
            or q * groups > MAX_FOLDED_QUERIES or (dropout and module.training)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    hk = key.shape[1]
    # query head n = kv * groups + g (repeat_kv's order) -> row g * q + i of K/V head kv
    folded = query.reshape(b, hk, groups * q, d)
    mask = attention_mask[:, :, :, : key.shape[-2]]
    mask = mask.expand(b, 1, q, mask.shape[-1]).repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register ``grouped_sdpa`` with transformers (attention and mask functions); idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, grouped_sdpa_forward)
    if NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS._global_mapping["sdpa"])
    return NAME


@contextlib.contextmanager
def grouped_sdpa(model: Any) -> Iterator[Any]:
    """The model computes attention with ``grouped_sdpa`` inside the block (when it used sdpa before), and CUDA's
    SDPA leaves out the cuDNN backend there: it builds an execution plan for every new key length, i.e. at every
    decoding step (H200 profile: 1.6 ms of CPU per layer call, the host's largest cost); the memory-efficient
    kernel takes the same masked inputs without it."""
    import torch

    before = getattr(model.config, "_attn_implementation", None)
    if before != "sdpa":
        yield model
        return
    cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    model.set_attn_implementation(register())
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield model
    finally:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        model.set_attn_implementation(before)
