"""k attempts per prompt from any model source, batched with a KV cache, timed (attempts/s).

``open_generator(source, cfg)`` gives a ``Generator``; ``generate_attempts(gen, prompts, k)`` returns the
scripts (``scripts[i]`` are prompt ``i``'s k attempts) and the wall time.  Local weights generate through
``training.callbacks.sample_scripts`` (the same sampler as the SFT validity passes); chat endpoints through
``generation.openai_chat``.

Constrained decoding: with ``generation.constrained: true`` the model's sampler gets the logits processor
that ``little_dragon.generation.constrained.logits_processor_factory(tokenizer)`` builds (README.md), on the
shared-prefix engine (``cache_implementation: shared_prefix``, the default) or through ``generate`` (dynamic,
static); continuous batching refuses it.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Protocol

from little_dragon.generation.config import GenerationConfig
from little_dragon.generation.sources import ModelSource, load_weights, resolve
from little_dragon.script_budget import resolve_budget

log = logging.getLogger(__name__)

# (batch_prompts, attempts_per_prompt) -> a transformers LogitsProcessor (or list, or None)
LogitsProcessorFactory = Callable[[list[str], int], Any]


class Generator(Protocol):
    source: ModelSource

    def generate(self, prompts: list[str], k: int) -> list[list[str]]: ...


@dataclasses.dataclass
class GenerationResult:
    scripts: list[list[str]]     # per prompt, its k attempts
    seconds: float
    attempts: int

    @property
    def attempts_per_s(self) -> float:
        return self.attempts / self.seconds if self.seconds > 0 else 0.0


class LocalGenerator:
    """Weights on this machine (registry version, run folder, HF folder)."""

    def __init__(self, source: ModelSource, cfg: GenerationConfig,
                 logits_processor_factory: LogitsProcessorFactory | None = None,
                 model: Any = None, tokenizer: Any = None):
        import torch

        if cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)
        elif cfg.device in ("auto", "cpu") and (cfg.device == "cpu" or not torch.cuda.is_available()):
            from little_dragon.config import free_cpu_cores

            torch.set_num_threads(free_cpu_cores())
        if model is None:
            model, tokenizer = load_weights(source, cfg.device, cfg.dtype)
        # 0: the model's own budget (script_budget), resolved here: what evaluations record as theirs
        cfg = dataclasses.replace(cfg, max_new_tokens=resolve_budget(cfg.max_new_tokens, model))
        self.source, self.cfg = source, cfg
        self.model, self.tokenizer = model, tokenizer
        if logits_processor_factory is None and cfg.constrained:
            try:
                from little_dragon.generation import constrained
            except ImportError as e:
                raise RuntimeError("generation.constrained is true but little_dragon.generation.constrained "
                                   f"is not available: {e}") from None
            from little_dragon.generation.constraint_process import auto_processes

            processes = cfg.constrained_processes
            if processes < 0:
                processes = auto_processes(next(model.parameters()).device)
            logits_processor_factory = constrained.logits_processor_factory(
                tokenizer, line_retries=cfg.constrained_line_retries, finish_back=cfg.constrained_finish_back,
                processes=processes)
        self.logits_processor_factory = logits_processor_factory

    def generate(self, prompts: list[str], k: int) -> list[list[str]]:
        from little_dragon.training.callbacks import sample_scripts

        if self.cfg.constrained and hasattr(self.logits_processor_factory, "stats"):
            # constrained decoding: attempts that failed a line check or the end-of-script check are resampled (counted)
            from little_dragon.generation.constrained import generate_constrained

            # on the shared-prefix engine (AttemptLogitsProcessor) or through generate (dynamic cache)
            return generate_constrained(self.model, self.tokenizer, prompts, k, self.cfg.max_new_tokens,
                                        self.cfg.temperature, batch_size=self.cfg.batch_size,
                                        max_resamples=self.cfg.constrained_resamples,
                                        hook=self.logits_processor_factory,
                                        cache_implementation=self.cfg.cache_implementation).scripts

        engine = self.cfg.cache_implementation
        if engine in ("continuous", "shared_prefix") and self.logits_processor_factory is not None:
            raise ValueError(f"generation.cache_implementation {engine} takes no logits-processor factory "
                             "(a caller's own factory needs dynamic or static; generation.constrained runs on "
                             "shared_prefix too)")
        if engine == "continuous":
            return sample_continuous(self.model, self.tokenizer, prompts, k, self.cfg.max_new_tokens,
                                     self.cfg.temperature)
        if engine == "shared_prefix":
            from little_dragon.generation.shared_prefix import sample_shared_prefix

            return sample_shared_prefix(self.model, self.tokenizer, prompts, k, self.cfg.max_new_tokens,
                                        self.cfg.temperature, prompts_per_chunk=max(1, self.cfg.batch_size // max(k, 1)))
        flat = sample_scripts(self.model, self.tokenizer, prompts, self.cfg.max_new_tokens, self.cfg.temperature,
                              batch_size=self.cfg.batch_size, num_return_sequences=k,
                              logits_processor_factory=self.logits_processor_factory, sort_by_length=True,
                              cache_implementation=self.cfg.cache_implementation)
        return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]


# transformers version -> does its generate_batch fork a request into num_return_sequences (5.17 does not)
_CB_FORKS: dict[str, bool] = {}


def _cb_forks(model: Any, ids: list[list[int]], kw: dict[str, Any]) -> bool:
    """Whether this transformers forks (probed once per version: one prompt, two sequences, one token)."""
    import transformers
    from transformers import GenerationConfig as HFGenerationConfig

    v = transformers.__version__
    if v not in _CB_FORKS:
        probe = HFGenerationConfig(**{**kw, "max_new_tokens": 1, "num_return_sequences": 2})
        _CB_FORKS[v] = len(model.generate_batch(inputs=ids[:1], generation_config=probe, progress_bar=False)) == 2
    return _CB_FORKS[v]


def sample_continuous(model: Any, tokenizer: Any, prompts: list[str], k: int, max_new_tokens: int,
                      temperature: float) -> list[list[str]]:
    """``k`` sampled completions per prompt through transformers' continuous batching (``generate_batch``):
    requests enter a paged KV cache as blocks free up, so there is no left padding and no decoding step is spent
    on an attempt that already ended; the k attempts of a prompt are forks of one request and share its prompt's
    cache blocks (prefill once, not k times), or, on a transformers without forks, the prompt sent k times.
    Greedy decoding (temperature 0) generates once and repeats it, as ``sample_scripts`` does."""
    from transformers import GenerationConfig as HFGenerationConfig

    greedy = temperature <= 0
    n = 1 if greedy else max(1, k)
    ids = list(tokenizer(prompts, add_special_tokens=False)["input_ids"])
    kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "num_return_sequences": n,
                          "eos_token_id": tokenizer.eos_token_id,
                          "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                          else tokenizer.eos_token_id}
    kw.update({"do_sample": True, "temperature": temperature, "top_k": 0} if not greedy else {"do_sample": False})
    was_training = model.training
    model.eval()
    try:
        if n > 1 and not _cb_forks(model, ids, kw):
            kw["num_return_sequences"] = 1
            ids = [i for i in ids for _ in range(n)]
        out = model.generate_batch(inputs=ids, generation_config=HFGenerationConfig(**kw), progress_bar=False)
    finally:
        model.train(was_training)
    # prompt-major: each request's forks (or repeats) come right before the next prompt's
    results = list(out.values())
    if len(results) != len(prompts) * n:
        raise RuntimeError(f"continuous batching returned {len(results)} completions for {len(prompts)} prompts x "
                           f"{n} (a failed request is logged by transformers)")
    texts = [tokenizer.decode(r.generated_tokens, skip_special_tokens=True) for r in results]
    return [[t for t in texts[i * n:(i + 1) * n] for _ in range(k // n)] for i in range(len(prompts))]


def open_generator(spec: str | ModelSource, cfg: GenerationConfig | None = None,
                   logits_processor_factory: LogitsProcessorFactory | None = None) -> Generator:
    cfg = cfg or GenerationConfig()
    src = spec if isinstance(spec, ModelSource) else resolve(spec)
    if src.kind == "openai":
        from little_dragon.generation.openai_chat import ChatGenerator

        return ChatGenerator(src, cfg)
    return LocalGenerator(src, cfg, logits_processor_factory)


def generate_attempts(gen: Generator, prompts: list[str], k: int, seed: int | None = None,
                      chunk: int | None = None) -> GenerationResult:
    """``k`` attempts for each prompt; progress is logged per chunk of prompts.  Sampled with ``seed``, else the
    generator's ``generation.seed`` (``dragon optimize``; the sealed evaluation passes ``evaluation.seed``, part
    of its protocol)."""
    import torch

    if seed is None:
        seed = getattr(getattr(gen, "cfg", None), "seed", 0)
    torch.manual_seed(seed)
    chunk = chunk or max(1, getattr(getattr(gen, "cfg", None), "batch_size", 32) // max(k, 1)) * 4
    t0 = time.perf_counter()
    scripts: list[list[str]] = []
    for i in range(0, len(prompts), chunk):
        scripts.extend(gen.generate(prompts[i:i + chunk], k))
        done = len(scripts)
        dt = time.perf_counter() - t0
        log.info("generated %d/%d prompts x %d attempts (%.1f attempts/s)", done, len(prompts), k,
                 done * k / dt if dt > 0 else 0.0)
    return GenerationResult(scripts, time.perf_counter() - t0, len(prompts) * k)
