"""Agreement with MetaSchedule: every schedule a harvest measured as valid must be judged ``correct``.

The evaluator is the judge of rewards, the sealed evaluation, promotion and ``dragon optimize``, so it is
held to MetaSchedule's own verdicts: each record that a harvest built, ran and timed with a finite latency
is encoded as the model would write it (``post *`` form: the sampled part, then ``post *``; or the
self-contained form with the post-processing section written out), evaluated, and compared: its category
must be ``correct`` and its latency should match the harvest's (same timing protocol; the ratio
distribution is reported).

Sources: consolidated harvests (``<root>/<target_key>/records.parquet`` + ``workloads.parquet``, the
harvest stage's layout) and raw MetaSchedule JSON databases (``database_tuning_record.json`` +
``database_workload.json``, e.g. a harvest's ``db/<id>/`` or a database from elsewhere).

Without the target's device (CUDA on a CPU machine) the check stops after code generation
(``stop_after="build"``): decode, apply, post-process, verify, build; category ``built``.

On disk (``--out DIR``): ``agreement.json`` / ``agreement.md``, the report, rewritten after every batch, and
``records.jsonl``, one line per judged record, appended after every batch::

    {"key": [source, workload_id, trial], "family", "target_key", "form", "device", "stop_after",
     "evaluator_version",
     "category", "latency_us", "harvest_latency_us", "layout_rewritten", "message", "wall_s"}

A run given the same ``--out`` resumes: records already judged there with the same form, checking depth and
evaluator version are not evaluated again (a killed or time-boxed run loses at most one batch).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMS = ("post", "full")
MS_INVALID_SECS = 1e9   # MetaSchedule writes 1e10 s for a candidate that failed to build or run


@dataclasses.dataclass
class ValidRecord:
    source: str            # harvest folder or database file
    workload_id: str
    family: str
    mod: Any               # the workload IRModule
    target: dict
    trial: int
    trace_json: list       # the full trace, post-processing section included (database form)
    latency_us: float      # MetaSchedule's measurement (median of run_secs)


def _finite_secs(run_secs: Any) -> list[float] | None:
    try:
        secs = [float(x) for x in run_secs]
    except (TypeError, ValueError):
        return None
    if not secs or any(not math.isfinite(s) or s <= 0 or s >= MS_INVALID_SECS for s in secs):
        return None
    return secs


def _from_consolidated(root: Path) -> list[ValidRecord]:
    import pandas as pd

    from little_dragon.workloads.store import module_from_script

    meta = json.loads((root / "meta.json").read_text())
    recs = pd.read_parquet(root / "records.parquet")
    wls = pd.read_parquet(root / "workloads.parquet").set_index("workload_id")
    recs = recs[recs["valid"] & recs["latency_us"].map(lambda x: x is not None and math.isfinite(x) and x > 0)]
    mods: dict[str, Any] = {}
    out = []
    for r in recs.itertuples():
        wid = r.workload_id
        if wid not in mods:
            row = wls.loc[wid]
            mods[wid] = module_from_script(row["tvmscript"], row["structural_hash"], where=f"{root}/workloads.parquet:{wid}")
        fam = str(wls.loc[wid].get("family", "")) if wid in wls.index else ""
        out.append(ValidRecord(str(root), wid, fam, mods[wid], meta["target"], int(r.trial), json.loads(r.trace_json),
                               float(r.latency_us)))
    return out


def _from_database(rec_file: Path) -> list[ValidRecord]:
    from tvm.s_tir import meta_schedule as ms

    from little_dragon.workloads.store import workload_id_of

    wl_file = rec_file.with_name("database_workload.json")
    mods = [ms.database.Workload.from_json(json.loads(line)).mod
            for line in wl_file.read_text().splitlines() if line.strip()]
    out = []
    for trial, line in enumerate(rec_file.read_text().splitlines()):
        if not line.strip():
            continue
        idx, (trace_json, run_secs, target, _args) = json.loads(line)
        secs = _finite_secs(run_secs)
        if secs is None:
            continue
        # the database spells out defaults ("keys", "tag", the host's "mtriple"): keep what the harvest set
        target = {k: v for k, v in target.items() if k not in ("keys", "tag", "mtriple")}
        mod = mods[idx]
        out.append(ValidRecord(str(rec_file.parent), workload_id_of(mod), "", mod, target, trial, trace_json,
                               statistics.median(secs) * 1e6))
    return out


def find_valid_records(roots: list[str | Path]) -> list[ValidRecord]:
    """Every measured-valid record under ``roots`` (consolidated harvests first; a database inside a
    consolidated harvest is not read twice)."""
    out: list[ValidRecord] = []
    seen: set[Path] = set()
    for root in map(Path, roots):
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such harvest folder or database")
        for meta in sorted(root.rglob("meta.json")):
            h = meta.parent
            if (h / "records.parquet").exists() and (h / "workloads.parquet").exists():
                out += _from_consolidated(h)
                seen.add(h)
        for rec in sorted(root.rglob("database_tuning_record.json")):
            if any(p in seen for p in rec.parents):
                continue
            out += _from_database(rec)
    return out


def sample_records(records: list[ValidRecord], per_workload: int, seed: int = 0) -> list[ValidRecord]:
    """``per_workload`` records per workload: the fastest two, then random others (0: all)."""
    if per_workload <= 0:
        return records
    by_wl: dict[tuple, list[ValidRecord]] = defaultdict(list)
    for r in records:
        by_wl[(r.source, r.workload_id)].append(r)
    rng = random.Random(seed)
    out = []
    for key in sorted(by_wl):
        rs = sorted(by_wl[key], key=lambda r: r.latency_us)
        best, rest = rs[:min(2, per_workload)], rs[min(2, per_workload):]
        out += best + rng.sample(rest, min(len(rest), per_workload - len(best)))
    return out


def script_for(rec: ValidRecord, form: str) -> str:
    """The record as the model writes it: ``post`` = the sampled part + ``post *`` (the evaluator derives
    the rest, as tuning did); ``full`` = self-contained, the post-processing section written out."""
    from little_dragon import codec
    from little_dragon.tvmx.postprocs import split_postproc

    if form == "full":
        return codec.encode(rec.trace_json)
    pre, _ = split_postproc(rec.trace_json)
    return codec.encode(pre) + "post *\n"


@dataclasses.dataclass
class AgreementReport:
    target_key: str
    form: str
    stop_after: str
    device: str
    records: int = 0
    workloads: int = 0
    agreed: int = 0
    categories: dict[str, int] = dataclasses.field(default_factory=dict)
    disagreements: list[dict] = dataclasses.field(default_factory=list)
    latency_ratio: dict[str, float] = dataclasses.field(default_factory=dict)   # evaluator / harvest
    layout_rewrite: int = 0
    wall_s: float = 0.0

    @property
    def agreement(self) -> float:
        return self.agreed / self.records if self.records else float("nan")


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    xs = sorted(xs)

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, max(0, round(p * (len(xs) - 1))))]

    return {"n": len(xs), "p10": q(0.10), "median": statistics.median(xs), "p90": q(0.90),
            "min": xs[0], "max": xs[-1]}


def _has_device(target: dict) -> bool:
    if target.get("kind") != "cuda":
        return True
    import tvm

    return bool(tvm.cuda(0).exist)


def _record_key(r: ValidRecord) -> list:
    return [r.source, r.workload_id, r.trial]


def ends_inside_a_line(path: Path) -> bool:
    """Does ``path`` end in a torn line (a kill mid-write)?  Reads its last byte only; False when it is
    missing or empty."""
    if not path.exists() or not path.stat().st_size:
        return False
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def read_journal(path: Path, form: str) -> dict[tuple, dict]:
    """Judged records of an earlier run (``records.jsonl``) for ``form`` and this evaluator version, by
    record key; a torn last line (killed mid-write) is ignored."""
    from little_dragon.evaluator.pool import EVALUATOR_VERSION

    done: dict[tuple, dict] = {}
    if not path.exists():
        return done
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("form") == form and row.get("evaluator_version") == EVALUATOR_VERSION:
            done[(row["stop_after"], *row["key"])] = row
    return done


def _count(rep: AgreementReport, row: dict, passed: str, ratios: list[float]) -> None:
    rep.records += 1
    rep.device = rep.device or row.get("device", "")
    rep.wall_s += row.get("wall_s", 0.0)
    rep.categories[row["category"]] = rep.categories.get(row["category"], 0) + 1
    rep.layout_rewrite += bool(row.get("layout_rewritten"))
    if row["category"] == passed:
        rep.agreed += 1
        if row.get("latency_us"):
            ratios.append(row["latency_us"] / row["harvest_latency_us"])
    else:
        source, wid, trial = row["key"]
        rep.disagreements.append({"source": source, "workload_id": wid, "family": row.get("family", ""),
                                  "trial": trial, "category": row["category"],
                                  "harvest_latency_us": row["harvest_latency_us"], "message": row["message"]})


def check_agreement(records: list[ValidRecord], *, form: str = "post", stop_after: str = "auto",
                    cfg: Any = None, timing_cfg: Any = None, batch: int = 32,
                    progress: Any = None, journal: str | Path | None = None) -> list[AgreementReport]:
    """Evaluate every record (one Evaluator per target) and compare with MetaSchedule's verdict;
    ``progress(reports)`` after every batch (a killed run keeps what it measured). With ``journal`` (a
    ``records.jsonl``), every judged record is appended there and records it already holds are not
    evaluated again (resume)."""
    from little_dragon.evaluator.config import EvaluatorConfig
    from little_dragon.evaluator.outcome import CHECKED_ONLY
    from little_dragon.evaluator.pool import EVALUATOR_VERSION, EvalRequest, Evaluator
    from little_dragon.tvmx import target as tgt
    from little_dragon.tvmx.timing import TimingConfig

    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, not {form!r}")
    cfg = cfg or EvaluatorConfig(cache_path="")
    timing_cfg = timing_cfg or TimingConfig()
    by_target: dict[str, list[ValidRecord]] = defaultdict(list)
    for r in records:
        by_target[json.dumps(r.target, sort_keys=True)].append(r)
    journal = Path(journal) if journal else None
    done = read_journal(journal, form) if journal else {}
    reports = []
    for tkey, recs in by_target.items():
        target = json.loads(tkey)
        mode = stop_after if stop_after != "auto" else ("time" if _has_device(target) else "build")
        passed = "correct" if mode == "time" else CHECKED_ONLY[mode]
        rep = AgreementReport(tgt.key(target), form, mode, "")
        ratios: list[float] = []
        todo = []
        judged_wl: set[tuple] = set()
        for r in recs:
            row = done.get((mode, *_record_key(r)))
            if row is None:
                todo.append(r)
            else:
                _count(rep, row, passed, ratios)
                judged_wl.add((r.source, r.workload_id))
        if rep.records:
            log.info("%s: resuming, %d of %d records already judged in %s", rep.target_key, rep.records,
                     len(recs), journal)
        rep.workloads = len(judged_wl)
        rep.latency_ratio = _quantiles(ratios)
        if not todo:
            reports.append(rep)
            continue
        with Evaluator(target, cfg, timing_cfg, stop_after=mode) as ev:
            rep.device = ev.device
            for i in range(0, len(todo), batch):
                t0 = time.perf_counter()
                chunk = todo[i:i + batch]
                reqs = []
                for r in chunk:
                    try:
                        reqs.append(EvalRequest(r.mod, script_for(r, form)))
                    except Exception as e:  # noqa: BLE001  the codec refuses it: a disagreement with a cause
                        reqs.append(EvalRequest(r.mod, f"# encode failed: {type(e).__name__}: {e}"))
                results = ev.evaluate_batch(reqs)
                share = (time.perf_counter() - t0) / len(chunk)
                rows = [{"key": _record_key(r), "family": r.family, "target_key": rep.target_key, "form": form,
                         "device": ev.device, "stop_after": mode, "evaluator_version": EVALUATOR_VERSION, "category": res.category,
                         "latency_us": res.latency_us, "harvest_latency_us": r.latency_us,
                         "layout_rewritten": "layout-rewritten" in (res.message or ""),
                         "message": (res.message or "")[:600], "wall_s": share}
                        for r, res in zip(chunk, results)]
                for row in rows:
                    _count(rep, row, passed, ratios)
                if journal is not None:
                    journal.parent.mkdir(parents=True, exist_ok=True)
                    torn = ends_inside_a_line(journal)
                    with journal.open("a") as f:        # whole lines, flushed: a kill tears at most the last
                        f.write("\n" if torn else "")
                        f.write("".join(json.dumps(row, default=str) + "\n" for row in rows))
                        f.flush()
                        os.fsync(f.fileno())
                log.info("%s: %d/%d records, %d agree", rep.target_key, rep.records, len(recs), rep.agreed)
                judged_wl.update((r.source, r.workload_id) for r in chunk)
                rep.workloads = len(judged_wl)
                rep.latency_ratio = _quantiles(ratios)
                if progress is not None:
                    progress(reports + [rep])
        reports.append(rep)
    return reports


def disagreement_causes(rep: AgreementReport) -> Counter:
    """Disagreements grouped by category and the first words of their message (the TVM cause)."""
    c: Counter = Counter()
    for d in rep.disagreements:
        c[f"{d['category']}: {d['message'][:90]}"] += 1
    return c


def render_markdown(reports: list[AgreementReport]) -> str:
    lines = ["| target | form | checked up to | device | workloads | valid records | judged as MetaSchedule did | "
             "agreement | latency ratio p10 / median / p90 (evaluator / harvest) | layout-rewritten |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        lr = r.latency_ratio
        ratio = f"{lr['p10']:.3f} / {lr['median']:.3f} / {lr['p90']:.3f} (n={lr['n']})" if lr else "-"
        lines.append(f"| {r.target_key} | {r.form} | {r.stop_after} | {r.device} | {r.workloads} | {r.records} | "
                     f"{r.agreed} | {r.agreement:.4f} | {ratio} | {r.layout_rewrite} |")
    for r in reports:
        causes = disagreement_causes(r)
        if causes:
            lines += ["", f"Disagreements, {r.target_key} ({r.form} form): category and cause", ""]
            lines += [f"- {n} x {cause}" for cause, n in causes.most_common()]
    return "\n".join(lines) + "\n"


def write_report(reports: list[AgreementReport], out_dir: str | Path) -> Path:
    from little_dragon import atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = [dict(dataclasses.asdict(r), agreement=r.agreement) for r in reports]
    atomic.write_text(out / "agreement.json", json.dumps(data, indent=2, default=str) + "\n")
    atomic.write_text(out / "agreement.md", render_markdown(reports))
    return out


def plot_latency(journal: str | Path, out_png: str | Path) -> Path:
    """Evaluator vs harvest latency of every record judged correct in ``journal`` (log-log, one point per
    record, by family), with the ratio's histogram beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in Path(journal).read_text().splitlines() if x.strip().endswith("}")]
    rows = [r for r in rows if r.get("latency_us") and r["category"] == "correct"]
    if not rows:
        raise ValueError(f"{journal}: no timed record judged correct to plot")
    fig, (ax, hx) = plt.subplots(1, 2, figsize=(12, 5))
    by_family: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_family[r.get("family") or "?"].append(r)
    colors = plt.get_cmap("tab20").colors
    for i, (fam, rs) in enumerate(sorted(by_family.items())):
        ax.scatter([r["harvest_latency_us"] for r in rs], [r["latency_us"] for r in rs], s=8, label=fam,
                   color=colors[i % len(colors)])
    lo = min(min(r["harvest_latency_us"], r["latency_us"]) for r in rows)
    hi = max(max(r["harvest_latency_us"], r["latency_us"]) for r in rows)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="MetaSchedule harvest latency (us)", ylabel="evaluator latency (us)",
           title=f"{rows[0].get('target_key', '')}: {len(rows)} records judged correct")
    ax.legend(fontsize=6, ncol=2)
    ratios = [r["latency_us"] / r["harvest_latency_us"] for r in rows]
    hx.hist(ratios, bins=60, range=(0.5, 1.5))
    hx.axvline(statistics.median(ratios), color="k", ls="--", lw=0.8)
    hx.set(xlabel="evaluator / harvest latency", ylabel="records", title=f"median {statistics.median(ratios):.3f}")
    fig.tight_layout()
    out = Path(out_png)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("roots", nargs="+", help="harvest folders (data/harvest, artifacts/harvest) or MetaSchedule "
                                            "JSON database folders")
    p.add_argument("--form", choices=FORMS, default="post", help="how records are written: post (`post *`, "
                                                                 "the model's form) or full (self-contained)")
    p.add_argument("--per-workload", type=int, default=0, help="records per workload: the 2 fastest, then "
                                                               "random (0: every valid record)")
    p.add_argument("--stop-after", choices=("auto", "time", "build", "verify"), default="auto",
                   help="auto: time where the target's device exists, else stop after code generation")
    p.add_argument("--pool-size", type=int, default=0, help="evaluator workers (0: one per core)")
    p.add_argument("--out", help="write agreement.json, agreement.md and records.jsonl here; a run with the same "
                                 "--out resumes (records already judged there are not evaluated again)")
    p.add_argument("--fresh", action="store_true", help="with --out: forget the records judged there, start over")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> list[AgreementReport]:
    from little_dragon.config import load_section

    cfg = dataclasses.replace(load_section("evaluator"), cache_path="", pool_size=args.pool_size)
    records = sample_records(find_valid_records(args.roots), args.per_workload, args.seed)
    if not records:
        raise FileNotFoundError(f"no measured-valid records under {', '.join(args.roots)}")
    journal = None
    if args.out:
        journal = Path(args.out) / "records.jsonl"
        if args.fresh and journal.exists():
            journal.unlink()
    reports = check_agreement(records, form=args.form, stop_after=args.stop_after, cfg=cfg,
                              timing_cfg=load_section("timing"), journal=journal,
                              progress=(lambda reps: write_report(reps, args.out)) if args.out else None)
    print(render_markdown(reports))
    if args.out:
        write_report(reports, args.out)
        if any(r.latency_ratio for r in reports):
            plot_latency(journal, Path(args.out) / "latency.png")
    return reports


def add_parser(sub: Any) -> None:
    p = sub.add_parser("agreement", help="check the evaluator against MetaSchedule on every measured-valid "
                                         "harvest record (exit 1 on any disagreement)")
    add_arguments(p)
    p.set_defaults(func=lambda args: 0 if all(r.agreed == r.records for r in run(args)) else 1)


def main(argv: list[str] | None = None) -> int:
    """``dragon agreement ROOT...`` (or ``python -m little_dragon.evaluator.agreement``): exit 1 when any
    measured-valid record is misjudged."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    reports = run(args)
    return 0 if all(r.agreed == r.records for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
