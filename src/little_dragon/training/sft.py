"""The SFT stage: TRL SFTTrainer on the mixed construction/refinement set, DeepSpeed on GPUs, all in MLflow.

``train_sft`` is the plain stage function (the CLI, DVC and Prefect call it).  Under a multi-process
launcher (``accelerate launch`` / ``deepspeed``) every rank runs it; only rank 0 talks to MLflow and writes
the outputs.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from little_dragon import atomic
from little_dragon.config import flat_params
from little_dragon.script_budget import script_budget
from little_dragon.training import data as sft_data
from little_dragon.training.augment import with_renamed_copies
from little_dragon.training.config import SFTConfig
from little_dragon.training.deepspeed_setup import (deepspeed_config_path, describe, ensure_launch_env, gpu_count,
                                                    process_rank, use_deepspeed)

if TYPE_CHECKING:
    from little_dragon.training.callbacks import ValiditySampler

log = logging.getLogger(__name__)


def _precision(cfg: SFTConfig) -> str:
    if cfg.precision != "auto":
        return cfg.precision
    import torch

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def training_arguments(cfg: SFTConfig, out_dir: Path, ds_path: Path | None, precision: str) -> Any:
    """TRL's SFTConfig from ours; TRL's GPU-centric defaults (bf16, gradient checkpointing) made explicit."""
    from trl import SFTConfig as TRLSFTConfig

    return TRLSFTConfig(
        output_dir=str(out_dir / "checkpoints"),
        use_cpu=gpu_count() == 0,
        bf16=precision == "bf16",
        fp16=False,
        gradient_checkpointing=cfg.gradient_checkpointing,
        completion_only_loss=True,
        max_length=cfg.max_length,
        packing=cfg.batching == "packing",
        train_sampling_strategy="group_by_length" if cfg.batching == "bucketing" else "random",
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_ratio,
        weight_decay=cfg.weight_decay,
        lr_scheduler_type=cfg.lr_scheduler,
        logging_steps=cfg.logging_steps,
        eval_strategy="steps",
        eval_steps=cfg.eval_steps,
        save_strategy="no",
        report_to="none",
        include_num_input_tokens_seen="non_padding",
        deepspeed=str(ds_path) if ds_path else None,
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _fits(rows: list[dict[str, Any]], tokenizer: Any, max_length: int) -> tuple[list[dict[str, Any]], int]:
    """Rows whose prompt + completion + EOS fit ``max_length``; a cut script would teach stopping mid-script."""
    keep = []
    for r in rows:
        n = len(tokenizer(r["prompt"] + r["completion"], add_special_tokens=False)["input_ids"]) + 1
        if n <= max_length:
            keep.append(r)
    return keep, len(rows) - len(keep)


def train_sft(cfg: SFTConfig, train_path: str | os.PathLike, val_path: str | os.PathLike,
              out_dir: str | os.PathLike, model_name: str | None = None,
              validity_sampler: ValiditySampler | None = None) -> dict[str, Any]:
    """Train, evaluate (loss + validity), save ``out_dir/model`` and ``out_dir/metrics.json``, log, register.

    ``validity_sampler`` (None: free sampling) writes the scripts of every validity pass (untrained, periodic,
    final, greedy): the SFT CLI passes ``generation.validity``'s constrained sampler when
    ``generation.constrained`` is true (training cannot import generation).  Its metrics then end with
    ``_<name>`` (``validity_rate_constrained``) and the MLflow param ``validity_sampler`` names it."""
    from trl import SFTTrainer

    from little_dragon.training.callbacks import (MLflowMetricsCallback, ValidityCallback, validity_key,
                                                  validity_rate)
    from little_dragon.training.models import load_model

    out_dir = Path(out_dir)
    t_start = time.perf_counter()
    all_train = sft_data.read_rows(train_path)  # both reads refuse the sealed set
    val_rows = sft_data.read_rows(val_path)
    train_rows = sft_data.mix_tasks(all_train, cfg.construction_fraction, cfg.seed)
    if cfg.max_train_rows is not None:
        train_rows = train_rows[: cfg.max_train_rows]
    train_rows = with_renamed_copies(train_rows, cfg.rename_copies, cfg.seed)

    ds_path = deepspeed_config_path(cfg) if use_deepspeed(cfg) else None
    if ds_path is not None:
        ensure_launch_env()
    precision = _precision(cfg)
    import torch

    threads_cb = None
    if gpu_count() == 0:
        if cfg.cpu_threads > 0:
            torch.set_num_threads(cfg.cpu_threads)
        else:
            threads_cb = free_cores_callback()
    args = training_arguments(cfg, out_dir, ds_path, precision)  # before the model: ZeRO-3 loads partitioned

    loaded = load_model(cfg.model, cfg.tiny, train_rows, cfg.seed,
                        dtype=torch.bfloat16 if precision == "bf16" and cfg.model.kind == "local" else None)
    tok = loaded.tokenizer
    train_rows, dropped_train = _fits(train_rows, tok, cfg.max_length)
    val_rows, dropped_val = _fits(val_rows, tok, cfg.max_length)
    if not train_rows or not val_rows:
        raise ValueError(f"{train_path}, {val_path}: no rows fit sft.max_length={cfg.max_length} tokens")
    eval_rows = val_rows[: cfg.max_eval_rows] if cfg.max_eval_rows else val_rows

    is_main = process_rank() == 0
    model_name = model_name or _project_model_name()
    params = {**flat_params(cfg), "validity_sampler": validity_sampler.name if validity_sampler else "free",
              "model_source": loaded.source, "precision": precision,
              "deepspeed_config": str(ds_path.name) if ds_path else "none", **describe(cfg),
              "train_rows": len(train_rows), "train_rows_dropped_too_long": dropped_train,
              "val_rows": len(val_rows), "val_rows_dropped_too_long": dropped_val,
              "added_tokens": loaded.added_tokens, "n_params": sum(p.numel() for p in loaded.model.parameters()),
              **{f"train_{k}": v for k, v in sft_data.task_counts(train_rows).items()}}
    run_ctx = _stage_run(params, {"train": train_path, "validation": val_path}) if is_main \
        else contextlib.nullcontext(None)
    with run_ctx as mlflow:
        if mlflow is not None and ds_path is not None:
            mlflow.log_artifact(str(ds_path), artifact_path="deepspeed")
        validity_cb = ValidityCallback(val_rows, tok, cfg.validity_samples, cfg.validity_max_new_tokens,
                                       cfg.validity_temperature, cfg.seed, mlflow, cfg.validity_batch_size,
                                       validity_sampler)
        if torch.cuda.is_available():  # the untrained baseline generates before the trainer places the model
            loaded.model.to(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
        untrained = validity_rate(loaded.model, tok, validity_cb.rows, cfg.validity_max_new_tokens,
                                  cfg.validity_temperature, cfg.validity_batch_size, validity_sampler)
        trainer = SFTTrainer(model=loaded.model, args=args, train_dataset=sft_data.to_dataset(train_rows),
                             eval_dataset=sft_data.to_dataset(eval_rows), processing_class=tok,
                             callbacks=[MLflowMetricsCallback(mlflow), validity_cb]
                             + ([threads_cb] if threads_cb is not None else []))
        train_out = trainer.train()
        final_eval = trainer.evaluate()  # eval loss + validity on the fixed draw (logged by the callbacks)
        final_rows = sft_data.mix_tasks(val_rows, None, cfg.seed + 1)[: cfg.final_validity_samples]
        final = validity_rate(trainer.model, tok, final_rows, cfg.validity_max_new_tokens, cfg.validity_temperature,
                              cfg.validity_batch_size, validity_sampler)
        greedy: dict[str, Any] = {}
        if cfg.final_greedy_validity:  # sampling at temperature 0 already was greedy: no second pass
            greedy = final if cfg.validity_temperature <= 0 else validity_rate(
                trainer.model, tok, final_rows, cfg.validity_max_new_tokens, 0.0, cfg.validity_batch_size,
                validity_sampler)

        def key(name: str) -> str:  # a pass through an injected sampler carries its name in every metric
            return validity_key(name, validity_sampler)

        staging = out_dir / ".model.staging"
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        # the budget the model's scripts need, saved with it (generation_config.json: ``script_budget``)
        budget = script_budget(len(tok(r["completion"], add_special_tokens=False)["input_ids"])
                               for r in train_rows + val_rows)
        trainer.model.generation_config.max_new_tokens = budget
        trainer.save_model(str(staging))  # every rank: ZeRO-3 gathers the shards here
        metrics: dict[str, Any] = {
            "train_rows": len(train_rows), "train_tasks": sft_data.task_counts(train_rows),
            "val_rows": len(val_rows), "steps": trainer.state.global_step,
            "train_loss": train_out.training_loss, "train_runtime_s": train_out.metrics["train_runtime"],
            "tokens_seen": int(trainer.state.num_input_tokens_seen),
            "tokens_per_s": trainer.state.num_input_tokens_seen / max(train_out.metrics["train_runtime"], 1e-9),
            "eval_loss": final_eval.get("eval_loss"),
            **{key(k): final[key(k)] for k in ("validity_rate", "decode_rate", "validity_attempts")},
            **{key(k): final[key(k)] for k in ("validity_rate_construction", "validity_rate_refinement")
               if key(k) in final},
            **{key(f"{k}_greedy"): greedy[key(k)] for k in ("validity_rate", "decode_rate",
                                                            "validity_rate_construction",
                                                            "validity_rate_refinement") if key(k) in greedy},
            key("validity_rate_untrained"): untrained[key("validity_rate")],
            "validity_history": validity_cb.history,
            "cpu_threads_steps": threads_cb.steps if threads_cb is not None else None,
            "model_source": loaded.source, "precision": precision, **describe(cfg),
            "deepspeed_config": ds_path.name if ds_path else None, "wall_s": time.perf_counter() - t_start,
            "max_new_tokens": budget,
        }
        if not is_main:
            return metrics
        tok.save_pretrained(str(staging))
        model_dir = out_dir / "model"
        with atomic.atomic_path(model_dir) as tmp:
            shutil.move(str(staging), str(tmp))
        if mlflow is not None:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and (
                k.startswith(("validity_rate", "decode_rate")) or k in ("tokens_per_s", "train_loss",
                                                                          "train_runtime_s"))})
            if final_eval.get("eval_loss") is not None:
                mlflow.log_metric("final_eval_loss", float(final_eval["eval_loss"]))
            mlflow.log_param("max_new_tokens", budget)  # the budget saved with the model (script_budget)
            if cfg.register:
                from little_dragon.training.registry import log_and_register

                metrics["registry"] = log_and_register(mlflow, model_dir, model_name)
            metrics["mlflow_run_id"] = mlflow.active_run().info.run_id
        atomic.write_json(out_dir / "metrics.json", metrics)
        log.info("sft: %d steps, %.0f tokens/s, validity %.3f (greedy %s, untrained %.3f; %s decoding)",
                 metrics["steps"], metrics["tokens_per_s"], metrics[key("validity_rate")],
                 metrics.get(key("validity_rate_greedy")), metrics[key("validity_rate_untrained")],
                 params["validity_sampler"])
        return metrics


def free_cores_callback(every_s: float = 15.0) -> Any:
    """``sft.cpu_threads: 0`` on CPU: torch threads = the cores other processes leave free
    (``config.FreeCores``), decided now over one second and again every ``every_s`` seconds of training;
    ``steps`` counts optimizer steps per thread count (metrics ``cpu_threads_steps``)."""
    import torch
    from transformers import TrainerCallback

    from little_dragon.config import FreeCores

    class FreeCoresCallback(TrainerCallback):
        def __init__(self) -> None:
            self.steps: dict[str, int] = {}
            self.probe = FreeCores()
            time.sleep(1.0)
            self.decide()

        def decide(self) -> None:
            threads, others = self.probe.measure()
            if threads != torch.get_num_threads():
                log.info("sft: %d torch threads (other processes use %.2f of %d cores)", threads, others,
                         self.probe.cores)
                torch.set_num_threads(threads)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            key = str(torch.get_num_threads())
            self.steps[key] = self.steps.get(key, 0) + 1
            if self.probe.seconds() >= every_s:
                self.decide()

    return FreeCoresCallback()


def _project_model_name() -> str:
    from little_dragon.config import load_section

    return load_section("project").model_name


def _stage_run(params: dict[str, Any], inputs: dict[str, Any]) -> Any:
    from little_dragon.tracking import stage_run

    return stage_run("sft", params=params, inputs=inputs)
