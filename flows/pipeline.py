"""The Little Dragon pipeline as a Prefect flow, and its scheduled-retraining deployment.

One implementation per stage: each task runs the stage's command from ``dvc.yaml`` through the project's
CLI entry point *in-process* (``little_dragon.cli.main``), i.e. the very function ``dvc repro`` runs, with
the very same arguments; then ``dvc commit`` records the stage's outputs in ``dvc.lock`` so artifacts
produced by a Prefect run are DVC-versioned exactly like those of ``dvc repro``.

    python -m flows.pipeline run [--stages harvest ...]      # one flow run now (local Prefect API)
    python -m flows.pipeline serve --cron "0 3 * * 0"         # scheduled retraining (needs a Prefect server)
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import little_dragon  # noqa: F401  (embedded defaults, e.g. PREFECT_HOME, before Prefect reads settings)
from prefect import flow, get_run_logger, task

ROOT = Path(__file__).resolve().parents[1]


def dvc_stages(dvc_yaml: Path = ROOT / "dvc.yaml") -> dict[str, dict[str, Any]]:
    """Stages of dvc.yaml in file order (DVC's own order is the dependency order we wrote them in)."""
    return yaml.safe_load(dvc_yaml.read_text())["stages"]


def stage_argv(stage: dict[str, Any]) -> list[str]:
    cmd = stage["cmd"] if isinstance(stage["cmd"], str) else " && ".join(stage["cmd"])
    argv = shlex.split(cmd)
    if not argv or argv[0] != "dragon" or "&&" in argv:
        raise ValueError(f"dvc.yaml stage command is not a single `dragon` call: {cmd!r}")
    return argv[1:]


@task(name="stage", task_run_name="{name}")
def run_stage(name: str, argv: list[str], dvc_commit: bool) -> int:
    from little_dragon.cli import main as dragon

    logger = get_run_logger()
    logger.info("dragon %s", " ".join(argv))
    rc = dragon(argv)
    if rc != 0:
        raise RuntimeError(f"stage {name}: `dragon {' '.join(argv)}` exited {rc}")
    if dvc_commit:
        # record the outputs in dvc.lock, as `dvc repro` would have
        subprocess.run([sys.executable, "-m", "dvc", "commit", "--force", "--quiet", name], cwd=ROOT, check=True)
    return rc


@flow(name="little-dragon-pipeline", log_prints=True)
def pipeline(stages: list[str] | None = None, dvc_commit: bool = True) -> list[str]:
    """Run the pipeline's stages in order (all, or the named ones)."""
    all_stages = dvc_stages()
    unknown = sorted(set(stages or []) - set(all_stages))
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; dvc.yaml has {list(all_stages)}")
    done = []
    for name, stage in all_stages.items():
        if stages and name not in stages:
            continue
        run_stage(name, stage_argv(stage), dvc_commit)
        done.append(name)
    return done


def retraining_deployment(cron: str, name: str = "scheduled-retraining"):
    return pipeline.to_deployment(name=name, cron=cron, description="Regenerate data and retrain on schedule",
                                  tags=["little-dragon", "retraining"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one flow run now")
    r.add_argument("--stages", nargs="*", help="only these dvc.yaml stages")
    r.add_argument("--no-dvc-commit", action="store_true")
    s = sub.add_parser("serve", help="serve the scheduled-retraining deployment (blocks)")
    s.add_argument("--cron", default="0 3 * * 0", help="schedule (default: Sundays 03:00)")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        pipeline(stages=args.stages, dvc_commit=not args.no_dvc_commit)
    else:
        from prefect import serve

        serve(retraining_deployment(args.cron))
    return 0


if __name__ == "__main__":
    sys.exit(main())
