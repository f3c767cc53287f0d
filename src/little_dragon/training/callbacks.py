"""Trainer callbacks: per-step metrics to MLflow, and the per-attempt validity rate at each evaluation."""
from __future__ import annotations

import functools
import logging
import random
import time
from typing import Any, Protocol

from transformers import TrainerCallback

from little_dragon.training.data import TASKS
from little_dragon.datasets.validity import check_script

log = logging.getLogger(__name__)


def _dist() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def sample_scripts(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, temperature: float,
                   batch_size: int = 16, num_return_sequences: int = 1,
                   logits_processor_factory: Any = None, sort_by_length: bool = False,
                   cache_implementation: str = "dynamic") -> list[str]:
    """``num_return_sequences`` sampled completions per prompt, prompt-major (left-padded batches, KV cache;
    stops at EOS).  ``batch_size`` counts sequences, so a batch holds ``batch_size // num_return_sequences``
    prompts.  ``logits_processor_factory(batch_prompts, num_return_sequences)``, when given, returns a
    transformers ``LogitsProcessor`` (or list) for that batch: row ``i`` of its ``input_ids`` belongs to
    ``batch_prompts[i // num_return_sequences]`` (little_dragon.generation uses it for constrained decoding).
    ``sort_by_length`` batches prompts of similar length together (less left padding; the output keeps the
    prompts' order); ``cache_implementation="static"`` preallocates the KV cache, which makes transformers
    compile the decoding step on a GPU (a one-off compile per batch shape)."""
    import torch
    from transformers import LogitsProcessorList

    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    out: list[str] = []
    order = list(range(len(prompts)))
    if sort_by_length:
        n_tok = [len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
        order.sort(key=lambda i: -n_tok[i])
        prompts = [prompts[i] for i in order]
    try:
        device = next(model.parameters()).device
        n_seq = max(1, num_return_sequences)
        # greedy decoding gives one answer per prompt: generate it once and repeat it
        gen_seq = n_seq if temperature > 0 else 1
        step = max(1, batch_size // gen_seq)
        for i in range(0, len(prompts), step):
            batch = prompts[i:i + step]
            enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items()}
            kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id,
                                  "eos_token_id": tokenizer.eos_token_id, "num_return_sequences": gen_seq,
                                  "use_cache": True}
            if cache_implementation != "dynamic":
                kw["cache_implementation"] = cache_implementation
            kw.update({"do_sample": True, "temperature": temperature, "top_k": 0} if temperature > 0
                      else {"do_sample": False})
            if logits_processor_factory is not None:
                proc = logits_processor_factory(batch, gen_seq)
                if proc is not None:
                    kw["logits_processor"] = LogitsProcessorList(proc if isinstance(proc, (list, tuple)) else [proc])
            with torch.no_grad():
                gen = model.generate(**enc, **kw)
            new = gen[:, enc["input_ids"].shape[1]:]
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)
            out.extend(t for t in texts for _ in range(n_seq // gen_seq))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    if sort_by_length:
        per = max(1, num_return_sequences)
        unsorted: list[str] = [""] * len(out)
        for j, i in enumerate(order):
            unsorted[i * per:(i + 1) * per] = out[j * per:(j + 1) * per]
        out = unsorted
    return out


class ValiditySampler(Protocol):
    """Writes one script per prompt for a validity pass instead of ``sample_scripts``: how a layer above
    training (which training must not import) gives the SFT validity passes another decoder.  The SFT CLI
    (``dragon train sft``, also what the Prefect flow runs) injects ``generation.validity``'s constrained
    sampler when ``generation.constrained`` is true.  ``name`` ends every metric name of such a pass
    (``validity_rate_constrained``), so its rates are never compared with free ones by mistake."""

    name: str

    def __call__(self, model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, temperature: float,
                 batch_size: int) -> list[str]: ...


def validity_key(key: str, sampler: ValiditySampler | None = None) -> str:
    """The metric name of a validity pass's ``key``: as is for the free sampler, else ``key_<sampler.name>``."""
    return key if sampler is None else f"{key}_{sampler.name}"


def validity_rate(model: Any, tokenizer: Any, rows: list[dict[str, Any]], max_new_tokens: int,
                  temperature: float, batch_size: int = 16,
                  sampler: ValiditySampler | None = None) -> dict[str, float]:
    """Per-attempt rates over ``rows`` (one attempt each), overall and per task, split over ranks and summed.

    A task without rows in the draw reports no rate for it (absent, not 0).  ``sampler`` (None: free sampling,
    ``sample_scripts``) writes the scripts instead; every key then ends with ``_<sampler.name>``."""
    import torch

    rank, world = _dist()
    mine = rows[rank::world]
    t0 = time.perf_counter()
    prompts = [r["prompt"] for r in mine]
    if not mine:
        scripts: list[str] = []
    elif sampler is None:
        scripts = sample_scripts(model, tokenizer, prompts, max_new_tokens, temperature, batch_size,
                                 sort_by_length=True)
    else:
        scripts = sampler(model, tokenizer, prompts, max_new_tokens, temperature, batch_size)
        if len(scripts) != len(mine):
            raise RuntimeError(f"validity sampler {sampler.name!r}: {len(scripts)} scripts for {len(mine)} prompts")
    verdicts = [check_script(s, r) for s, r in zip(scripts, mine)]
    per_task = [x for t in TASKS for x in (sum(r.get("task") == t for r in mine),
                                           sum(v.valid for v, r in zip(verdicts, mine) if r.get("task") == t))]
    counts = torch.tensor([len(verdicts), sum(v.decoded for v in verdicts), sum(v.valid for v in verdicts),
                           *per_task], dtype=torch.float64)
    if world > 1:
        import torch.distributed as dist

        counts = counts.to(next(model.parameters()).device)
        dist.all_reduce(counts)
        counts = counts.cpu()
    n, dec, ok, *task_counts = counts.tolist()
    if verdicts and not verdicts[0].valid:
        log.debug("first sampled script invalid: %s", verdicts[0].error)
    out = {"validity_rate": ok / max(n, 1), "decode_rate": dec / max(n, 1), "validity_attempts": n,
           "validity_seconds": time.perf_counter() - t0}
    for i, t in enumerate(TASKS):
        if task_counts[2 * i]:
            out[f"validity_rate_{t}"] = task_counts[2 * i + 1] / task_counts[2 * i]
    return {validity_key(k, sampler): v for k, v in out.items()}


class MLflowMetricsCallback(TrainerCallback):
    """Every logged number (loss, learning rate, grad norm, eval loss) as an MLflow metric at its step."""

    def __init__(self, mlflow: Any):
        self.mlflow = mlflow

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if self.mlflow is None or not state.is_world_process_zero or not logs:
            return
        nums = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if nums:
            self.mlflow.log_metrics(nums, step=state.global_step)


class ValidityCallback(TrainerCallback):
    """At each evaluation, sample scripts for a fixed draw of validation prompts and check them with TVM."""

    def __init__(self, val_rows: list[dict[str, Any]], tokenizer: Any, samples: int, max_new_tokens: int,
                 temperature: float, seed: int, mlflow: Any = None, batch_size: int = 16,
                 sampler: ValiditySampler | None = None):
        rng = random.Random(seed)
        self.rows = rng.sample(val_rows, min(samples, len(val_rows)))  # same prompts at every eval: comparable
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.mlflow = mlflow
        self.batch_size = batch_size
        self.sampler = sampler  # None: free sampling; else its metrics carry its name (validity_key)
        self.history: list[dict[str, float]] = []

    def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if model is None or not self.rows:
            return
        if self.history and self.history[-1]["step"] == state.global_step:
            return  # the trainer evaluates the last step, then the stage's own evaluate(): one pass is enough
        rates = validity_rate(model, self.tokenizer, self.rows, self.max_new_tokens, self.temperature,
                              self.batch_size, self.sampler)
        entry = {"step": state.global_step, **{f"eval_{k}": v for k, v in rates.items()}}
        self.history.append(entry)
        state.log_history.append(entry)
        if state.is_world_process_zero:
            key = functools.partial(validity_key, sampler=self.sampler)
            log.info("step %d: validity %.3f decode %.3f (%d attempts%s)", state.global_step,
                     rates[key("validity_rate")], rates[key("decode_rate")], rates[key("validity_attempts")],
                     f", {self.sampler.name}" if self.sampler is not None else "")
            if self.mlflow is not None:
                self.mlflow.log_metrics({f"eval_{k}": v for k, v in rates.items()}, step=state.global_step)
