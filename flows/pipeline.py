"""The Little Dragon pipeline as a Prefect flow, and its scheduled-retraining deployment.

One implementation per stage: the flow walks ``dvc.yaml``'s stages in file order (no second list here) and
runs each stage's command through the project's CLI entry point *in-process* (``little_dragon.cli.main``),
the very function ``dvc repro`` runs with the very same arguments; then ``dvc commit`` records the stage in
``dvc.lock``, so ``dvc repro`` afterwards has nothing to redo.  A stage DVC reports as up to date is
skipped, which makes the flow incremental (a weekly run harvests only new workloads: the harvest resumes
per workload) and a re-run after a failure resumes at the failed stage.

Flow parameters pick the profile (an overlay from ``configs/profiles/<name>.yaml``), the target and the
model; like ``dvc exp run --set-param`` they are written into ``params.yaml`` (comments kept) before any
stage runs, so the lock records the parameters the run really used.

    python -m flows.pipeline run [--profile smoke] [--stages harvest ...]   # one flow run now
    python -m flows.pipeline serve                                          # the scheduled deployment
    dragon services up                      # Prefect + MLflow UIs and the served deployment (README)
"""
from __future__ import annotations

import argparse
import json
import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

import little_dragon  # noqa: F401  (embedded defaults, e.g. PREFECT_HOME, before Prefect reads settings)
from prefect import flow, get_run_logger, task
from prefect.runtime import deployment as current_deployment
from prefect.runtime import flow_run as current_flow_run

ROOT = Path(__file__).resolve().parents[1]
PROFILES_DIR = ROOT / "configs" / "profiles"

# What a person should do when a stage fails; the flow run's error carries it next to the stage name.
STAGE_HINTS = {
    "harvest": "the harvest keeps finished workloads: fix the cause in the log and re-run (it resumes)",
    "drift": "the newest harvest differs from the training data: read monitoring/drift/README.md; if the change "
             "is intended (new families or shapes on purpose), re-run with drift.enforce=false in params.yaml "
             "(or the profile) to retrain on it, otherwise fix the workload generation / harvest",
    "quality_workloads": "a data-quality gate failed: the failing expectation is named above; Data Docs: "
                         "monitoring/data-docs/",
    "quality_harvest": "a data-quality gate failed: the failing expectation is named above; Data Docs: "
                       "monitoring/data-docs/",
    "quality_examples": "a data-quality gate failed: the failing expectation is named above; Data Docs: "
                        "monitoring/data-docs/",
    "validate_codec": "records do not round-trip through the codec: artifacts/codec/summary.md names them",
}


class StageFailed(RuntimeError):
    """A pipeline stage failed; the message names the stage and what to do."""


def dvc_stages(dvc_yaml: Path | None = None) -> dict[str, dict[str, Any]]:
    """Stages of dvc.yaml in file order (the order we wrote them in is a valid dependency order)."""
    return yaml.safe_load(((dvc_yaml or ROOT / "dvc.yaml")).read_text())["stages"]


def stage_argv(stage: dict[str, Any]) -> list[str]:
    cmd = stage["cmd"] if isinstance(stage["cmd"], str) else " && ".join(stage["cmd"])
    argv = shlex.split(cmd)
    if not argv or argv[0] != "dragon" or "&&" in argv:
        raise ValueError(f"dvc.yaml stage command is not a single `dragon` call: {cmd!r}")
    return argv[1:]


# ------------------------------------------------------------------------------------------ params
def deep_merge(base: Any, overlay: dict[str, Any]) -> bool:
    """Merge ``overlay`` into the (ruamel) mapping ``base`` in place; True when something changed.
    Mappings merge key by key; any other value (lists included) replaces."""
    changed = False
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            changed |= deep_merge(base[key], value)
        elif base.get(key) != value:
            base[key] = value
            changed = True
    return changed


def profile_overlay(profile: str) -> dict[str, Any]:
    if profile in ("", "default"):
        return {}
    path = PROFILES_DIR / f"{profile}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise ValueError(f"profile {profile!r}: {path} not found; known profiles: ['default', *{known}]")
    return yaml.safe_load(path.read_text()) or {}


def target_overlay(target: str) -> dict[str, Any]:
    """``llvm`` / ``cuda`` / a JSON target dict -> the harvest target (the other stages read it there)."""
    if not target:
        return {}
    if target.lstrip().startswith("{"):
        return {"harvest": {"target": json.loads(target)}}
    if target == "llvm":
        import os

        return {"harvest": {"target": {"kind": "llvm", "num-cores": os.cpu_count() or 1}}}
    return {"harvest": {"target": {"kind": target}}}


def model_overlay(model: str, logger: Any, champion_dir: Path | None = None) -> dict[str, Any]:
    """``tiny`` / ``gguf`` / a local HF directory / ``champion`` (warm start from the registry's @champion,
    exported to artifacts/champion; without a champion the params' own model is kept)."""
    if not model:
        return {}
    if model in ("tiny", "gguf"):
        return {"sft": {"model": {"kind": model, "path": ""}}}
    if model == "champion":
        path = export_champion(champion_dir or ROOT / "artifacts" / "champion", logger)
        if path is None:
            logger.info("no @champion in the registry yet: SFT starts from params.yaml's model")
            return {}
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        return {"sft": {"model": {"kind": "local", "path": rel}}}
    if not Path(model).is_dir():
        raise ValueError(f"model {model!r}: expected tiny, gguf, champion or a local model directory")
    return {"sft": {"model": {"kind": "local", "path": model}}}


def export_champion(dest: Path, logger: Any) -> Path | None:
    """Save the registry's ``@champion`` version as a plain HF directory (model + tokenizer) at ``dest``."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from little_dragon import tracking
    from little_dragon.config import load_section
    from little_dragon.training.registry import load_registered

    name = load_section("project").model_name
    tracking.setup("little-dragon/retraining")
    try:
        version = MlflowClient().get_model_version_by_alias(name, "champion")
    except MlflowException:
        return None
    stamp = dest / "VERSION"
    if stamp.exists() and stamp.read_text().strip() == f"{name}/{version.version}":
        return dest
    logger.info("warm start: exporting %s@champion (version %s) to %s", name, version.version, dest)
    model, tok = load_registered(f"models:/{name}/{version.version}")
    import shutil

    staging = dest.with_name(dest.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tok.save_pretrained(staging)
    (staging / "VERSION").write_text(f"{name}/{version.version}\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def apply_params(overlay: dict[str, Any], params_path: Path | None = None) -> bool:
    """Write ``overlay`` into params.yaml (comments and order kept); True when the file changed."""
    from ruamel.yaml import YAML

    from little_dragon import atomic

    path = params_path or ROOT / "params.yaml"
    ry = YAML()
    ry.preserve_quotes = True
    ry.width = 4096
    data = ry.load(path.read_text())
    if not deep_merge(data, overlay):
        return False
    import io

    buf = io.StringIO()
    ry.dump(data, buf)
    atomic.write_text(path, buf.getvalue())
    return True


# ------------------------------------------------------------------------------------------ stages
def stage_up_to_date(name: str) -> bool:
    """DVC's own verdict: deps, params and outs unchanged since the lock was written."""
    out = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", name], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        return False
    try:
        return json.loads(out.stdout or "{}") == {}
    except json.JSONDecodeError:
        return False


@task(name="stage", task_run_name="{name}", retries=0)
def run_stage(name: str, argv: list[str], dvc_commit: bool, force: bool) -> str:
    from little_dragon.cli import main as dragon

    logger = get_run_logger()
    if not force and stage_up_to_date(name):
        logger.info("stage %s: up to date in dvc.lock, skipped", name)
        return "skipped"
    logger.info("stage %s: dragon %s", name, " ".join(argv))
    t0 = time.perf_counter()
    try:
        rc = dragon(argv)
    except SystemExit as e:  # argparse errors
        rc = e.code if isinstance(e.code, int) else 2
    except Exception as e:
        raise StageFailed(_failure(name, f"{type(e).__name__}: {e}")) from e
    if rc != 0:
        raise StageFailed(_failure(name, f"`dragon {' '.join(argv)}` exited {rc}"))
    if dvc_commit:
        # record the outputs in dvc.lock, exactly as `dvc repro` would have
        res = subprocess.run([sys.executable, "-m", "dvc", "commit", "--force", name], cwd=ROOT,
                             capture_output=True, text=True)
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip()[-800:]
            raise StageFailed(f"stage {name!r} ran, but `dvc commit {name}` failed: {why}. What to do: a dependency or "
                              f"output dvc.yaml declares for it is missing (named above); fix that and re-run")
    logger.info("stage %s: done in %.1f s", name, time.perf_counter() - t0)
    return "ran"


def _failure(name: str, why: str) -> str:
    hint = STAGE_HINTS.get(name, "fix the cause in the log above and re-run: finished stages are skipped")
    return f"stage {name!r} failed: {why}. What to do: {hint}"


def _record_in_mlflow(t0: float, summary: dict[str, Any], status: str) -> str | None:
    """One MLflow run per flow run (experiment little-dragon/retraining), tagged with the Prefect flow run
    and listing the stage runs it caused, so the MLflow UI shows what a scheduled run did."""
    import os

    if os.environ.get("DRAGON_NO_MLFLOW") == "1":
        return None
    from little_dragon import tracking

    mlflow = tracking.setup("little-dragon/retraining")
    stage_runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                    filter_string=f"attributes.start_time >= {int(t0 * 1000)}")
    with mlflow.start_run(run_name=f"retraining-{time.strftime('%Y%m%d-%H%M%S')}") as run:
        mlflow.set_tags({"prefect.flow_run_id": str(current_flow_run.id or ""),
                         "prefect.flow_run_name": str(current_flow_run.name or ""),
                         "prefect.deployment": str(current_deployment.id or ""),
                         "git_commit": tracking.git_commit(), "status": status,
                         "stage_runs": ",".join(r.info.run_id for r in stage_runs)})
        mlflow.log_params({k: json.dumps(v) if not isinstance(v, str) else v
                           for k, v in summary.items() if k in ("profile", "target", "model", "stages")})
        mlflow.log_metrics({"wall_time_s": time.time() - t0, "stages_ran": len(summary.get("ran", [])),
                            "stages_skipped": len(summary.get("skipped", []))})
        if summary.get("failed"):
            mlflow.set_tag("failed_stage", summary["failed"])
    if status != "completed":
        mlflow.MlflowClient().set_terminated(run.info.run_id, "FAILED")
    return run.info.run_id


@flow(name="little-dragon-pipeline", log_prints=True)
def pipeline(profile: str = "default", target: str = "", model: str = "", stages: list[str] | None = None,
             dvc_commit: bool = True, force: bool = False) -> dict[str, Any]:
    """Run dvc.yaml's stages in order (all, or the named ones), skipping those DVC reports up to date.

    profile: configs/profiles/<name>.yaml overlay on params.yaml ("default": params.yaml as is);
    target: llvm, cuda or a JSON TVM target (harvest.target); model: tiny, gguf, champion (warm start from
    the registry's @champion) or a local HF directory ("": params.yaml's sft.model)."""
    import os

    logger = get_run_logger()
    os.chdir(ROOT)  # stage commands use paths relative to the project, as under `dvc repro`
    t0 = time.time()
    overlay: dict[str, Any] = {}
    for part in (profile_overlay(profile), target_overlay(target), model_overlay(model, logger)):
        deep_merge_plain(overlay, part)
    if overlay and apply_params(overlay):
        logger.info("params.yaml updated for this run: %s", json.dumps(overlay, sort_keys=True))
    all_stages = dvc_stages()
    unknown = sorted(set(stages or []) - set(all_stages))
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; dvc.yaml has {list(all_stages)}")
    summary: dict[str, Any] = {"profile": profile, "target": target, "model": model,
                               "stages": list(stages or all_stages), "ran": [], "skipped": []}
    try:
        for name, stage in all_stages.items():
            if stages and name not in stages:
                continue
            summary["failed"] = name
            state = run_stage.with_options(name=name)(name, stage_argv(stage), dvc_commit, force)
            summary["ran" if state == "ran" else "skipped"].append(name)
            summary.pop("failed")
    except BaseException:
        try:  # never let the bookkeeping hide the stage's own error
            _record_in_mlflow(t0, summary, "failed")
        except Exception as e:
            logger.warning("could not record the failed run in MLflow: %s", e)
        raise
    summary["mlflow_run_id"] = _record_in_mlflow(t0, summary, "completed")
    logger.info("pipeline: ran %s, skipped %s", summary["ran"], summary["skipped"])
    return summary


def deep_merge_plain(base: dict[str, Any], overlay: dict[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge_plain(base[key], value)
        else:
            base[key] = value


# ------------------------------------------------------------------------------------------ deployment
def retraining_deployment(cron: str | None = None, name: str | None = None, profile: str | None = None):
    """The ``scheduled-retraining`` deployment: cron and default parameters from params.yaml's
    ``retraining`` section."""
    from little_dragon.config import load_section

    cfg = load_section("retraining")
    return pipeline.to_deployment(
        name=name or cfg.deployment, cron=cron or cfg.cron,
        description="Weekly retraining: new workloads -> harvest what is new -> codec validation -> datasets "
                    "-> drift check -> SFT warm-started from @champion -> evaluation -> gated promotion "
                    "(the stages of dvc.yaml, each skipped when DVC says it is up to date)",
        tags=["little-dragon", "retraining"],
        parameters={"profile": profile or cfg.profile, "target": cfg.target, "model": cfg.model})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one flow run now")
    r.add_argument("--profile", default="default", help="configs/profiles/<name>.yaml overlay")
    r.add_argument("--target", default="", help="llvm, cuda or a JSON target")
    r.add_argument("--model", default="", help="tiny, gguf, champion or a local model directory")
    r.add_argument("--stages", nargs="*", help="only these dvc.yaml stages")
    r.add_argument("--force", action="store_true", help="run stages even when DVC says they are up to date")
    r.add_argument("--no-dvc-commit", action="store_true")
    s = sub.add_parser("serve", help="serve the scheduled-retraining deployment (blocks; needs a Prefect server)")
    s.add_argument("--cron", help="schedule (default: params.yaml retraining.cron)")
    s.add_argument("--name", help="deployment name (default: params.yaml retraining.deployment)")
    s.add_argument("--profile", help="default profile parameter of the deployment")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.cmd == "run":
        from little_dragon.prefect_api import prefect_api

        with prefect_api():
            pipeline(profile=args.profile, target=args.target, model=args.model, stages=args.stages,
                     dvc_commit=not args.no_dvc_commit, force=args.force)
    else:
        from prefect import serve

        from little_dragon.prefect_api import configured_api_url

        if not configured_api_url():
            print("flows.pipeline serve: no PREFECT_API_URL; start the services with `dragon services up` "
                  "(or `prefect server start` and set PREFECT_API_URL)", file=sys.stderr)
            return 2
        serve(retraining_deployment(args.cron, args.name, args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
