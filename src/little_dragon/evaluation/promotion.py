"""The promotion gate: move ``@champion`` to a candidate version only when it is not worse.

Same protocol or no decision: the champion's and the candidate's per-prompt results must come from the
same sealed protocol (``sealed.protocol`` tag) and attempts sampled alike (``sealed.decoding``: temperature, token
budget, constrained decoding; ``prompts.decoding_protocol``).  Correctness first: the paired bootstrap interval (over
prompts) of the difference in per-attempt correctness decides when it excludes zero; when it does not
(indistinguishable), the candidate also needs a point difference >= 0 and a geomean speedup of at least
``speedup_tolerance`` times the champion's.  With no champion yet, a candidate needs correctness above
``min_correctness`` (an untrained model writes no correct kernel, so it is never the first champion).
Every decision, with its evidence, is tagged on the candidate version and appended to
``<history>.jsonl`` (plus a rendered ``.md`` and a ``.png`` of the champion's correctness over time).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from little_dragon import atomic
from little_dragon.evaluation.bootstrap import paired
from little_dragon.evaluation.eval_config import PromotionConfig
from little_dragon.evaluation.metrics import geomean

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Decision:
    promoted: bool
    reason: str
    candidate: str
    champion: str | None
    evidence: dict[str, Any]


def _per_prompt_of_run(run_id: str) -> pd.DataFrame:
    import mlflow

    p = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="evaluation/per_prompt.parquet")
    return pd.read_parquet(p)


def _stats(pp: pd.DataFrame) -> dict[str, float]:
    w = pp["attempts"].astype(float)
    return {"correct_rate": float((pp["correct_rate"] * w).sum() / w.sum()) if w.sum() else math.nan,
            "geomean_best_speedup": geomean(pp.loc[pp["solved"], "best"]), "prompts": int(len(pp))}


def decide(candidate: pd.DataFrame, champion: pd.DataFrame | None, cfg: PromotionConfig, seed: int = 0
           ) -> tuple[bool, str, dict[str, Any]]:
    """(promote?, reason, evidence) from two per-prompt tables (``prompt_id, correct_rate, solved, best``)."""
    cs = _stats(candidate)
    ev: dict[str, Any] = {"candidate": cs}
    if champion is None:
        ok = cs["correct_rate"] > cfg.min_correctness
        return ok, (f"no champion yet; candidate correctness {cs['correct_rate']:.3f} "
                    f"{'>' if ok else '<='} minimum {cfg.min_correctness}"), ev
    hs = _stats(champion)
    ev["champion"] = hs
    a, b = candidate.set_index("prompt_id"), champion.set_index("prompt_id")
    iv = paired(a["correct_rate"], b["correct_rate"], cfg.bootstrap_samples, cfg.confidence, seed)
    ev["correctness_diff"] = iv.as_dict()
    if iv.n == 0:
        return False, "no prompts in common with the champion's evaluation: not comparable", ev
    ratio = (cs["geomean_best_speedup"] / hs["geomean_best_speedup"]
             if math.isfinite(cs["geomean_best_speedup"]) and math.isfinite(hs["geomean_best_speedup"]) else math.nan)
    ev["speedup_ratio"] = ratio
    ci = f"{cfg.confidence:.0%} CI {iv.low:+.3f}..{iv.high:+.3f}"
    if iv.low > 0:
        return True, f"better correctness: {iv.diff:+.3f} per attempt ({ci}, {iv.n} prompts)", ev
    if iv.high < 0:
        return False, f"worse correctness: {iv.diff:+.3f} per attempt ({ci}, {iv.n} prompts)", ev
    if iv.diff < 0:
        return False, f"correctness not shown worse but lower: {iv.diff:+.3f} ({ci}); a champion is kept on ties", ev
    if math.isfinite(ratio) and ratio < cfg.speedup_tolerance:
        return False, (f"correctness indistinguishable ({iv.diff:+.3f}, {ci}) and geomean speedup lower: "
                       f"x{ratio:.3f} of the champion's (< {cfg.speedup_tolerance})"), ev
    return True, (f"not worse: correctness {iv.diff:+.3f} ({ci}), geomean speedup x"
                  f"{ratio:.3f} of the champion's" if math.isfinite(ratio) else
                  f"not worse: correctness {iv.diff:+.3f} ({ci}); no speedup to compare"), ev


def promote(eval_dir: str | Path, registered_model: str, cfg: PromotionConfig, dry_run: bool = False,
            evaluate_champion: Callable[[str], Any] | None = None) -> Decision:
    """Gate the candidate evaluated in ``eval_dir`` (its summary names the registry version).

    ``evaluate_champion(uri)``, when given, is called for a champion without an evaluation under the
    candidate's protocol (it must run the same evaluation, which tags the version); otherwise that case is
    refused with the command to run."""
    from mlflow import MlflowClient

    from little_dragon import tracking
    from little_dragon.errors import UserError

    eval_dir = Path(eval_dir)
    sp = eval_dir / "summary.json"
    if not sp.is_file():
        raise UserError(f"{sp}: no evaluation summary (run `dragon eval run` first)")
    summary = json.loads(sp.read_text())
    version = summary.get("version")
    if summary.get("registered_model") not in (None, registered_model) or version is None:
        raise UserError(f"{eval_dir}: the evaluated model ({summary.get('model')}) is not a version of "
                        f"{registered_model} in the registry; only registered versions can be promoted")
    tracking.setup("little-dragon/promote")
    client = MlflowClient()
    cand_pp = pd.read_parquet(eval_dir / "per_prompt.parquet")
    champ_v = None
    try:
        champ_v = client.get_model_version_by_alias(registered_model, cfg.alias)
    except Exception:  # noqa: BLE001  no alias yet
        champ_v = None
    champion_label = f"{registered_model}/v{champ_v.version}" if champ_v else None
    cand_label = f"{registered_model}/v{version}"
    if champ_v is not None and int(champ_v.version) == int(version):
        return Decision(False, "candidate is already the champion", cand_label, champion_label, {})
    champ_pp = None
    if champ_v is not None:
        def stale(v: Any) -> bool:
            return (v.tags.get("sealed.protocol") != summary["protocol"] or "sealed.eval_run_id" not in v.tags
                    or v.tags.get("sealed.decoding") != summary.get("decoding_protocol"))

        if stale(champ_v) and evaluate_champion is not None:
            log.info("champion %s has no evaluation under protocol %s and decoding %s: evaluating it now",
                     champion_label, summary["protocol"], summary.get("decoding"))
            evaluate_champion(f"models:/{registered_model}/{champ_v.version}")
            champ_v = client.get_model_version(registered_model, champ_v.version)
        if stale(champ_v):
            reason = (f"champion {champion_label} has no sealed evaluation under protocol {summary['protocol']} "
                      f"and decoding {summary.get('decoding_protocol')} {json.dumps(summary.get('decoding'))} (has "
                      f"{champ_v.tags.get('sealed.protocol')}, decoding {champ_v.tags.get('sealed.decoding')}): "
                      f"evaluate it with `dragon eval run --model models:/{registered_model}@{cfg.alias}` and the "
                      "candidate's generation settings first")
            return _record(Decision(False, reason, cand_label, champion_label, {}), registered_model, version,
                           cfg, client, dry_run)
        champ_pp = _per_prompt_of_run(champ_v.tags["sealed.eval_run_id"])
    ok, reason, evidence = decide(cand_pp, champ_pp, cfg)
    evidence["protocol"] = summary["protocol"]
    d = Decision(ok, reason, cand_label, champion_label, evidence)
    if ok and not dry_run:
        client.set_registered_model_alias(registered_model, cfg.alias, str(version))
    return _record(d, registered_model, version, cfg, client, dry_run)


def _record(d: Decision, name: str, version: Any, cfg: PromotionConfig, client: Any, dry_run: bool) -> Decision:
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "candidate": d.candidate,
             "champion_before": d.champion, "promoted": d.promoted and not dry_run, "reason": d.reason,
             "evidence": d.evidence, "dry_run": dry_run}
    log.info("promotion %s: %s (%s)", d.candidate, "PROMOTED" if entry["promoted"] else "refused", d.reason)
    if dry_run:
        return d
    client.set_model_version_tag(name, str(version), "promotion.decision", "promoted" if d.promoted else "refused")
    client.set_model_version_tag(name, str(version), "promotion.reason", d.reason[:4000])
    client.set_model_version_tag(name, str(version), "promotion.evidence", json.dumps(d.evidence, default=str)[:4000])
    client.set_model_version_tag(name, str(version), "promotion.time", entry["time"])
    write_history(Path(cfg.history), entry)
    return d


def write_history(base: Path, entry: dict[str, Any]) -> None:
    """Append to ``<base>.jsonl``; re-render ``<base>.md`` and ``<base>.png`` from the whole log."""
    jl = base.with_suffix(".jsonl")
    jl.parent.mkdir(parents=True, exist_ok=True)
    atomic.append_jsonl(jl, [json.loads(json.dumps(entry, default=str))])
    rows = atomic.read_jsonl(jl)
    lines = ["# Champion history", "", "Every decision of the promotion gate (`dragon registry promote`), newest last.",
             "", "| time | candidate | champion before | decision | candidate correct/attempt | champion correct/attempt | reason |",
             "|---|---|---|---|---:|---:|---|"]
    for r in rows:
        ev = r.get("evidence") or {}
        c = (ev.get("candidate") or {}).get("correct_rate")
        h = (ev.get("champion") or {}).get("correct_rate")
        lines.append(f"| {r['time']} | {r['candidate']} | {r.get('champion_before') or '–'} | "
                     f"{'**promoted**' if r['promoted'] else 'refused'} | {'' if c is None else f'{c:.3f}'} | "
                     f"{'' if h is None else f'{h:.3f}'} | {r['reason']} |")
    atomic.write_text(base.with_suffix(".md"), "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = list(range(len(rows)))
    cand = [((r.get("evidence") or {}).get("candidate") or {}).get("correct_rate") for r in rows]
    ax.scatter([x for x, r in zip(xs, rows) if r["promoted"]], [c for c, r in zip(cand, rows) if r["promoted"]],
               color="tab:green", label="promoted", zorder=3)
    ax.scatter([x for x, r in zip(xs, rows) if not r["promoted"]], [c for c, r in zip(cand, rows) if not r["promoted"]],
               color="tab:red", marker="x", label="refused", zorder=3)
    champ, cur = [], None
    for r, c in zip(rows, cand):
        if r["promoted"]:
            cur = c
        champ.append(cur)
    ax.step(xs, [math.nan if v is None else v for v in champ], where="post", color="grey", label="champion")
    ax.set_xlabel("decision")
    ax.set_ylabel("per-attempt correctness (sealed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic.atomic_path(base.with_suffix(".png"), suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
