"""The RL stage: GRPO on the evaluator's measured, shaped reward, after prompt screening, with dynamic
retention, ten-rollout probe curves, per-step MLflow metrics, resumable checkpoints and a registry version.

``train_rl`` is the plain stage function (the CLI, DVC and Prefect call it).  Order of work:

1. the prompt pool: unique (workload, task, start script) rows of the training set on the RL target;
2. the start model (the SFT stage's ``model/`` or a registry version ``models:/NAME/VERSION``);
3. one Evaluator (pool, cache, device lock) behind ``KernelReward``, shared by screening, GRPO and probes;
4. screening (K rollouts per prompt; kept: rewards that differ) -> ``screen.json`` + MLflow;
5. GRPO (``RetentionGRPOTrainer``), probes every N steps, checkpoints every M (a killed run resumes);
6. ``model/``, ``metrics.json``, probe curves (PNG + DVC plot JSON), registry version (stage=rl, parent).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from little_dragon import atomic
from little_dragon.config import flat_params
from little_dragon.script_budget import resolve_budget
from little_dragon.training import data as sft_data
from little_dragon.training.rl_config import RLConfig

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- prompts
def target_kind(row: dict[str, Any]) -> str:
    t = row.get("target")
    if isinstance(t, str):
        t = json.loads(t) if t.strip().startswith("{") else {"kind": t}
    return (t or {}).get("kind", "")


def prompt_pool(rows: list[dict[str, Any]], kind: str, max_prompts: int, seed: int) -> list[dict[str, Any]]:
    """Unique (workload, task, start script) prompts on ``kind``, ids in first-seen order; a deterministic,
    task-balanced draw of ``max_prompts`` (0: all)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if target_kind(r) != kind:
            continue
        for col in ("tvmscript",):
            if not r.get(col):
                raise ValueError(f"training row of workload {r['workload_id']} has no {col!r} column: the RL "
                                 f"reward rebuilds the workload from it")
        key = (r["workload_id"], r["task"], r.get("start_script") or "")
        if key not in seen:
            seen[key] = {"prompt_id": len(seen), "prompt": r["prompt"], "workload_id": r["workload_id"],
                         "task": r["task"], "start_script": r.get("start_script") or "", "tvmscript": r["tvmscript"],
                         "name": r.get("name") or r.get("family") or ""}
    pool = list(seen.values())
    if not max_prompts or len(pool) <= max_prompts:
        return pool
    rng = random.Random(seed)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for p in pool:
        by_task.setdefault(p["task"], []).append(p)
    for ps in by_task.values():
        rng.shuffle(ps)
    out: list[dict[str, Any]] = []
    while len(out) < max_prompts:  # round robin over tasks: both tasks present whenever both exist
        for t in sorted(by_task):
            if by_task[t] and len(out) < max_prompts:
                out.append(by_task[t].pop())
    return sorted(out, key=lambda p: p["prompt_id"])


def pick_probe_prompts(screened: list[dict[str, Any]], pool: dict[int, dict[str, Any]], n: int,
                       seed: int) -> list[dict[str, Any]]:
    """A fixed probe set of retained prompts: genuinely kept before filled ones, tasks alternating."""
    kept = [r for r in screened if r["kept"]]
    rng = random.Random(seed + 7)
    rng.shuffle(kept)
    kept.sort(key=lambda r: r["filled"])
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in kept:
        by_task.setdefault(r["task"], []).append(r)
    out: list[dict[str, Any]] = []
    while len(out) < min(n, len(kept)):
        for t in sorted(by_task):
            if by_task[t] and len(out) < n:
                out.append(pool[by_task[t].pop(0)["prompt_id"]])
    return out


# ---------------------------------------------------------------------------------------------- model
def load_start_model(model: str, dtype: Any = None, local_copy: Path | None = None) -> tuple[Any, Any, str, str | None]:
    """(model, tokenizer, source, parent registry URI) of a model dir or a ``models:/NAME/VERSION`` URI.

    A model dir written by the SFT stage names its registry version in the ``metrics.json`` beside it.  A
    registry version is saved to ``local_copy`` and loaded from there: TRL builds the KL reference model
    from the policy's ``name_or_path``, which must stay a readable directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parent = None
    if model.startswith("models:/"):
        from little_dragon.training.registry import load_registered

        m, tok = load_registered(model)
        if local_copy is None:
            return (m.to(dtype) if dtype is not None else m), tok, model, model
        with atomic.atomic_path(local_copy) as tmp:
            m.save_pretrained(str(tmp))
            tok.save_pretrained(str(tmp))
        parent, source_name = model, model
        path = local_copy
    else:
        path = Path(model)
        source_name = f"local:{path}"
    if not path.is_dir():
        raise FileNotFoundError(f"{model}: start model not found (run the sft stage, or give models:/NAME/VERSION)")
    tok = AutoTokenizer.from_pretrained(str(path))
    m = AutoModelForCausalLM.from_pretrained(str(path), **({"dtype": dtype} if dtype is not None else {}))
    sft_metrics = path.parent / "metrics.json"
    if parent is None and sft_metrics.is_file():
        parent = (json.loads(sft_metrics.read_text()).get("registry") or {}).get("registry_uri")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return m, tok, source_name, parent


def _precision(cfg: RLConfig) -> str:
    if cfg.precision != "auto":
        return cfg.precision
    import torch

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def grpo_arguments(cfg: RLConfig, out_dir: Path, precision: str) -> Any:
    from trl import GRPOConfig

    from little_dragon.training.deepspeed_setup import gpu_count

    return GRPOConfig(
        output_dir=str(out_dir / "checkpoints"),
        use_cpu=gpu_count() == 0,
        bf16=precision == "bf16",  # TRL resolves bf16=True even on CPU (rl-notes §1): always explicit
        fp16=False,
        gradient_checkpointing=cfg.gradient_checkpointing,
        per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
        gradient_accumulation_steps=1,
        num_generations=cfg.num_generations,
        num_iterations=1,                      # on-policy: one update per generation batch
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=0,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        scale_rewards=cfg.scale_rewards,
        temperature=cfg.temperature,
        top_k=0,
        max_completion_length=cfg.max_completion_length,
        mask_truncated_completions=False,      # a cut script fails to decode: itself the signal
        remove_unused_columns=False,           # the reward needs tvmscript / task / start_script
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        ignore_data_skip=True,                 # the retention sampler resumes from its saved state instead
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=True,
        dataloader_num_workers=0,              # the lazy sampler must see retention updates in this process
    )


# ---------------------------------------------------------------------------------------------- evaluator
def reward_timing(cfg: RLConfig) -> Any:
    from little_dragon.config import load_section

    base = load_section("timing")
    over = {k: v for k, v in dataclasses.asdict(cfg.reward_timing).items() if v is not None}
    return dataclasses.replace(base, **over)


def make_evaluator_factory(cfg: RLConfig, evaluator_cfg: Any = None, timing_cfg: Any = None) -> Any:
    """A factory of the one Evaluator: the ``evaluator`` section with the RL pool size, RL reward timing."""
    from little_dragon.config import load_section
    from little_dragon.evaluator.pool import Evaluator

    ecfg = evaluator_cfg or load_section("evaluator")
    ecfg = dataclasses.replace(ecfg, pool_size=cfg.eval_pool_size)
    tcfg = timing_cfg or reward_timing(cfg)

    def make() -> Any:
        return Evaluator(cfg.target, ecfg, tcfg)  # Evaluator normalises a target name or dict

    return make, ecfg, tcfg


def place_reward_devices(devices: str) -> None:
    """Evaluator workers see only ``devices`` (the trainer keeps the GPUs it initialised first).

    CUDA is initialised in this process before the variable changes (torch reads it once, at init), and the
    variable stays set so that workers spawned later (recycled, or replacing a crashed one) see the same GPU."""
    if not devices:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    log.info("evaluator workers time on CUDA_VISIBLE_DEVICES=%s; the policy stays on the trainer's GPU", devices)


# ---------------------------------------------------------------------------------------------- stage
def _model_identity(model: str) -> str:
    """What the start model *is*, not only where: a local model folder by the content of its files (the SFT
    stage rewrites artifacts/sft/model in place, so the path alone let a stale checkpoint of the previous SFT
    model be resumed: 'size mismatch for model.embed_tokens.weight' when the tiny tokenizer changed, silently
    the wrong weights when it did not); a registry URI or a name by itself."""
    root = Path(model)
    if not root.is_dir():
        return model
    h = hashlib.sha1()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return f"{model}#{h.hexdigest()[:16]}"


def _fingerprint(cfg: RLConfig, model: str, prompts: list[dict[str, Any]]) -> str:
    keys = [cfg.target, cfg.screen_rollouts, cfg.screen_min_distinct, cfg.min_active_prompts, cfg.temperature,
            cfg.max_completion_length, cfg.seed, cfg.reward_quantum, dataclasses.asdict(cfg.reward_timing),
            _model_identity(model), [(p["workload_id"], p["task"], p["start_script"]) for p in prompts]]
    return hashlib.sha1(json.dumps(keys, sort_keys=True, default=str).encode()).hexdigest()[:16]


def train_rl(cfg: RLConfig, train_path: str | os.PathLike, model: str, out_dir: str | os.PathLike,
             model_name: str | None = None, plot_png: str | os.PathLike | None = None,
             plot_json: str | os.PathLike | None = None, evaluator_cfg: Any = None,
             timing_cfg: Any = None) -> dict[str, Any]:
    """Screen, train, probe, save ``out_dir/{model,screen.json,metrics.json}``, log and register."""
    import torch

    from little_dragon.training.callbacks import MLflowMetricsCallback
    from little_dragon.training.reward import KernelReward
    from little_dragon.training.rl_callbacks import ProbeCallback, WallClockStop, plot_probe_curves
    from little_dragon.training.rl_trainer import Retention, RetentionGRPOTrainer
    from little_dragon.training.screen import screen_prompts

    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from little_dragon.tvmx import target as tgt

    target = tgt.normalize(cfg.target)
    kind = target["kind"]
    rows = sft_data.read_rows(train_path)  # refuses the sealed set
    pool_list = prompt_pool(rows, kind, cfg.max_prompts, cfg.seed)
    if not pool_list:
        raise ValueError(f"{train_path}: no training prompts on target kind {kind!r} (rl.target)")

    if torch.cuda.device_count() == 0 and cfg.cpu_threads > 0:
        torch.set_num_threads(cfg.cpu_threads)
    precision = _precision(cfg)
    args = grpo_arguments(cfg, out_dir, precision)
    policy, tok, source, parent = load_start_model(model, torch.bfloat16 if precision == "bf16" else None,
                                                   local_copy=out_dir / "start_model")
    # 0: the start model's own budget (script_budget), for every rollout
    cfg = dataclasses.replace(cfg, max_completion_length=resolve_budget(cfg.max_completion_length, policy))
    args.max_completion_length = cfg.max_completion_length
    if torch.cuda.is_available():
        policy.to("cuda:0")
    place_reward_devices(cfg.reward_devices)
    too_long = [p for p in pool_list if len(tok(p["prompt"], add_special_tokens=False)["input_ids"])
                > cfg.max_prompt_length]
    pool_list = [p for p in pool_list if p not in too_long]
    if not pool_list:
        raise ValueError(f"{train_path}: every prompt is longer than rl.max_prompt_length={cfg.max_prompt_length}")
    pool = {p["prompt_id"]: p for p in pool_list}

    from transformers.trainer_utils import get_last_checkpoint

    # everything a resumed run needs lives in checkpoints/ (a DVC `persist` out: DVC deletes the other outs,
    # screen.json among them, before it reruns the stage): the checkpoints, the screen, the probe history
    ckpt_dir = out_dir / "checkpoints"
    last_ckpt = get_last_checkpoint(str(ckpt_dir)) if cfg.resume and ckpt_dir.is_dir() else None
    fingerprint = _fingerprint(cfg, model, pool_list)
    screen_path, saved_screen = out_dir / "screen.json", ckpt_dir / "screen.json"
    probe_hist = ckpt_dir / "probe_history.json"
    old_screen = json.loads(saved_screen.read_text()) if saved_screen.exists() else None
    if last_ckpt and (old_screen is None or old_screen.get("fingerprint") != fingerprint):
        log.warning("checkpoint %s belongs to another configuration or screen: starting afresh", last_ckpt)
        last_ckpt = None
    if not last_ckpt:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    make_eval, ecfg, tcfg = make_evaluator_factory(cfg, evaluator_cfg, timing_cfg)
    reward = KernelReward(make_eval, ecfg.reward, float(cfg.reward_quantum.get(kind, 0.0)))
    model_name = model_name or _project_model_name()
    params = {**flat_params(cfg), "model": model, "model_source": source, "parent_model": parent or "none",
              "precision": precision, "timing_protocol": json.dumps(dataclasses.asdict(tcfg)),
              "candidate_prompts": len(pool_list), "prompts_too_long": len(too_long),
              "resumed_from": Path(last_ckpt).name if last_ckpt else "none"}
    inputs = {"train": train_path}
    if Path(model).exists():
        inputs["start_model"] = model
    with _stage_run(params, inputs, {"parent_model": parent or "none"}) as mlflow, reward:
        # ---- screening (reused as is by a resumed run: the kept set defines the dataset)
        if last_ckpt and old_screen is not None:
            screen = old_screen
            log.info("resuming from %s: screen reused (%d kept)", last_ckpt, screen["summary"]["kept"])
        else:
            screen = screen_prompts(policy, tok, pool_list, reward, cfg.screen_rollouts, cfg.screen_min_distinct,
                                    cfg.min_active_prompts, cfg.max_completion_length, cfg.temperature,
                                    cfg.generation_batch_size)
            screen["fingerprint"] = fingerprint
            screen["summary"]["evaluator"] = dict(reward.last)
            atomic.write_json(saved_screen, screen)
        atomic.write_json(screen_path, screen)
        if mlflow is not None:
            mlflow.log_artifact(str(screen_path), artifact_path="rl")
            mlflow.log_metrics({f"screen/{k}": float(v) for k, v in screen["summary"].items()
                                if isinstance(v, (int, float)) and v is not None})
        kept = [r for r in screen["prompts"] if r["kept"]]
        if not kept:
            raise ValueError("screening kept no prompt (every candidate gave no reward): see " + str(screen_path))
        train_prompts = [pool[r["prompt_id"]] for r in kept]
        from datasets import Dataset

        dataset = Dataset.from_dict({c: [p[c] for p in train_prompts]
                                     for c in ("prompt", "prompt_id", "tvmscript", "task", "start_script",
                                               "workload_id")})
        retention = Retention([p["prompt_id"] for p in train_prompts], cfg.retire_after, cfg.reprobe_every,
                              min_active=min(cfg.prompts_per_step, len(train_prompts)), seed=cfg.seed)
        probe_cb = ProbeCallback(pick_probe_prompts(screen["prompts"], pool, cfg.probe_prompts, cfg.seed), tok,
                                 reward, cfg.probe_rollouts, cfg.probe_every, cfg.max_completion_length,
                                 cfg.temperature, cfg.generation_batch_size, probe_hist, mlflow)
        wall = WallClockStop(cfg.max_wall_s, t_start)
        trainer = RetentionGRPOTrainer(model=policy, reward_funcs=[reward], args=args, train_dataset=dataset,
                                       processing_class=tok, retention=retention,
                                       callbacks=[MLflowMetricsCallback(mlflow), probe_cb, wall])
        t_train = time.perf_counter()
        train_out = trainer.train(resume_from_checkpoint=last_ckpt)
        train_s = time.perf_counter() - t_train
        if trainer.state.global_step % max(cfg.save_steps, 1):  # the last steps are checkpointed too
            trainer._save_checkpoint(trainer.model, None)

        staging = out_dir / ".model.staging"
        shutil.rmtree(staging, ignore_errors=True)
        trainer.save_model(str(staging))
        tok.save_pretrained(str(staging))
        with atomic.atomic_path(out_dir / "model") as tmp:
            shutil.move(str(staging), str(tmp))

        hist = trainer.state.log_history
        split = {k: sum(h.get(f"time/{k}", 0.0) for h in hist) for k in ("generation_s", "reward_s", "update_s")}
        step_total = sum(split.values())
        metrics: dict[str, Any] = {
            "steps": trainer.state.global_step, "train_runtime_s": train_out.metrics.get("train_runtime"),
            "train_loss": train_out.training_loss, "resumed_from": Path(last_ckpt).name if last_ckpt else None,
            "stopped_by_wall_clock": wall.stopped_at is not None,
            "screen": screen["summary"], "time_split_s": split,
            "reward_share": split["reward_s"] / step_total if step_total else None,
            "evaluator": {"scripts": reward.n_scripts, "cached": reward.n_cached, "seconds": reward.seconds,
                          "cache_hit_rate": reward.n_cached / reward.n_scripts if reward.n_scripts else None,
                          "uncached_scripts_per_s": (reward.n_scripts - reward.n_cached) / reward.seconds
                          if reward.seconds else None, "restarts": reward.restarts,
                          "device": getattr(reward.evaluator, "device", None),
                          "timing": dataclasses.asdict(tcfg), "reward_devices": cfg.reward_devices or None},
            "retention": {"active_end": len(retention.active), "retired_end": len(retention.retired),
                          "events": retention.events},
            "probe": probe_cb.history, "model_source": source, "parent_model": parent, "precision": precision,
            "per_step": [{k: v for k, v in h.items() if isinstance(v, (int, float))} for h in hist if "reward" in h],
            # the whole run's steps: a resumed run's log history starts with its checkpoint's
            "wall_s": time.perf_counter() - t_start, "train_wall_s": train_s,
        }
        if probe_cb.history:
            first, last = probe_cb.history[0], probe_cb.history[-1]
            metrics.update({"probe_utility_start": first["utility"], "probe_utility_end": last["utility"],
                            "probe_correctness_start": first["correctness"],
                            "probe_correctness_end": last["correctness"]})
            curves = [{"step": h["step"], "utility": h["utility"], "correctness": h["correctness"],
                       **{k: h[k] for k in h if k.startswith(("utility_", "correctness_"))}}
                      for h in probe_cb.history]
            if plot_json:
                atomic.write_json(plot_json, curves)
            if plot_png:
                plot_probe_curves(probe_cb.history, Path(plot_png), f"RL probe ({source})")
        if mlflow is not None:
            for k in ("probe_utility_start", "probe_utility_end", "probe_correctness_start", "probe_correctness_end",
                      "reward_share"):
                if metrics.get(k) is not None:
                    mlflow.log_metric(k, float(metrics[k]))
            mlflow.log_metrics({f"evaluator_{k}": float(v) for k, v in metrics["evaluator"].items()
                                if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None})
            if plot_png and Path(plot_png).exists():
                mlflow.log_artifact(str(plot_png), artifact_path="rl")
            if cfg.register:
                metrics["registry"] = register_rl(mlflow, out_dir / "model", model_name, parent)
            metrics["mlflow_run_id"] = mlflow.active_run().info.run_id
        atomic.write_json(out_dir / "metrics.json", metrics)
        log.info("rl: %d steps in %.0f s; probe utility %s -> %s; evaluator %.2f uncached scripts/s, %.0f%% of step "
                 "time in rewards", metrics["steps"], train_s, metrics.get("probe_utility_start"),
                 metrics.get("probe_utility_end"), metrics["evaluator"]["uncached_scripts_per_s"] or 0.0,
                 100 * (metrics["reward_share"] or 0.0))
        return metrics


def register_rl(mlflow: Any, model_dir: Path, model_name: str, parent: str | None) -> dict[str, Any]:
    """A new version of the project model, tagged stage=rl with its SFT parent."""
    from little_dragon.training.registry import log_and_register

    reg = log_and_register(mlflow, model_dir, model_name)
    client = mlflow.MlflowClient()
    tags = {"stage": "rl", "parent_model": parent or "none"}
    if parent and parent.startswith("models:/"):
        tags["parent_version"] = parent.rsplit("/", 1)[-1]
    for k, v in tags.items():
        client.set_model_version_tag(model_name, str(reg["version"]), k, v)
    reg["tags"] = tags
    return reg


def _project_model_name() -> str:
    from little_dragon.config import load_section

    return load_section("project").model_name


def _stage_run(params: dict[str, Any], inputs: dict[str, Any], tags: dict[str, str]) -> Any:
    from little_dragon.tracking import stage_run

    return stage_run("rl", params=params, inputs=inputs, tags=tags)
