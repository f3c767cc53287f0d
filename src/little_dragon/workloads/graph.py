"""Fused workloads extracted from real model graphs.

Small models are built from configs with random weights (no downloads), exported with ``torch.export``,
imported with TVM's Relax frontend, legalised and fused by Relax's zero pipeline, and their tuning tasks
extracted with MetaSchedule's Relax integration: the fused kernels a real compiler would tune.  Tasks that
only move data (reshape, transpose, take, index) or only build masks are dropped as trivial.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable

log = logging.getLogger(__name__)

SEQ = 16  # tokens per example input


def _transformer(kind: str) -> tuple[Any, tuple[Any, ...]]:
    import torch
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=128, bos_token_id=0, eos_token_id=0, pad_token_id=0, use_cache=False)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, n_positions=64, **common)
        inner = transformers.GPT2Model(cfg)
    elif kind == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=176,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                       **common)
        inner = transformers.LlamaModel(cfg)
    elif kind == "bert":
        cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=256,
                                      num_attention_heads=2, max_position_embeddings=64, **common)
        inner = transformers.BertModel(cfg, add_pooling_layer=False)
    else:
        raise ValueError(kind)

    class LastHidden(torch.nn.Module):
        """Return a plain tensor: torch.export cannot trace the models' cache/output objects."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).last_hidden_state if kind != "bert" else \
                self.model(input_ids=input_ids).last_hidden_state

    return LastHidden(inner).eval(), (torch.randint(1, 128, (1, SEQ)),)


def _resnet_block() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    torch.manual_seed(0)

    class BasicBlock(nn.Module):
        """ResNet basic block with a strided 1x1 projection shortcut (batch norm folds at inference)."""

        def __init__(self, cin=16, cout=32):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.proj, self.bnp = nn.Conv2d(cin, cout, 1, 2, 0, bias=False), nn.BatchNorm2d(cout)
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.pool(torch.relu(y + self.bnp(self.proj(x))))

    return BasicBlock().eval(), (torch.randn(1, 16, 16, 16),)


GRAPH_MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "gpt2-tiny": lambda: _transformer("gpt2"),
    "llama-tiny": lambda: _transformer("llama"),
    "bert-tiny": lambda: _transformer("bert"),
    "resnet-block": _resnet_block,
}

# Task names made only of these ops move or mask data: not worth tuning.
COMPUTE_OPS = re.compile(r"matmul|conv|softmax|norm|mean|tanh|sigmoid|exp|erf|rsqrt|pool|sum|dense|gelu|silu")


MASK_OPS = re.compile(r"equal|bitwise|logical|index_tensor|cumsum|arange")


def is_trivial(task_name: str, flops: float, out_elems: int) -> bool:
    if flops <= 0:
        return True
    if COMPUTE_OPS.search(task_name):
        return False
    if MASK_OPS.search(task_name):
        return True
    return flops <= out_elems  # at most one operation per output element: a residual add or a mask


def extract_model_tasks(model_name: str, target_spec: dict[str, Any] | None = None) -> list[tuple[str, Any, float]]:
    """Non-trivial tuning tasks of one model graph as ``(task_name, IRModule, flops)``, in extraction order."""
    import torch
    import tvm
    import tvm.relax.frontend.torch  # noqa: F401  (registers the frontend submodule)
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    if model_name not in GRAPH_MODELS:
        raise ValueError(f"graph model {model_name!r} unknown; known: {sorted(GRAPH_MODELS)}")
    model, inputs = GRAPH_MODELS[model_name]()
    with torch.no_grad():
        ep = torch.export.export(model, inputs)
    mod = relax.frontend.torch.from_exported_program(ep, keep_params_as_input=True, unwrap_unit_return_tuple=True)
    mod, _params = relax.frontend.detach_params(mod)
    target = tvm.target.Target(target_spec or {"kind": "llvm", "num-cores": 1})
    with target:
        mod = tvm.ir.transform.Sequential([
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            relax.pipeline.zero_pipeline(),
        ])(mod)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    out = []
    for task in tasks:
        task_mod = task.dispatched[0]
        flops = float(estimate_tir_flops(task_mod))
        out_elems = 1
        for d in ms.arg_info.ArgInfo.from_prim_func(task_mod["main"])[-1].shape:
            out_elems *= int(d)
        if is_trivial(task.task_name, flops, out_elems):
            log.debug("%s: dropping trivial task %s", model_name, task.task_name)
            continue
        out.append((task.task_name, task_mod, flops))
    log.info("%s: %d tasks, %d kept", model_name, len(tasks), len(out))
    return out
