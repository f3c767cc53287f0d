"""The ``validate_codec`` stage: round-trip harvested records (a spread sample per workload, or all), report
sizes, fail on any loss."""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from little_dragon import atomic
from little_dragon.config import field

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CodecConfig:
    structural_check: bool = field(True, help="Also apply each decoded script to a fresh schedule of its "
                                              "workload and compare IRModules with TVM's own trace.")
    derived_post: bool = field(True, help="Also check each record's `post *` form (post-processing re-derived "
                                          "from workload and target at decode time) and report its tokens.")
    bpe_vocab_size: int = field(4096, help="Vocabulary of the byte-level BPE trained on the corpus for the "
                                           "comparison token counts.")
    records_per_workload: int = field(
        4, help="Check this many records per workload, spread evenly over its tuning order, first and last "
                "included (0: every record). The checks cost ~0.2-1 s per record (structural apply and "
                "post-processing on CUDA records most), and the token counts train a BPE on every checked "
                "record: all 1911 records of the embedded default took 5-7 min of the pipeline's 30. Use 0 "
                "after a codec change (`dragon codec validate --set records_per_workload=0`).")
    token_sample: int = field(0, help="Measure tokens on at most this many records (0: all).")
    min_records: int = field(1, help="Fail when the harvest holds fewer records than this (an empty harvest "
                                     "is a pipeline bug, not a pass).")
    max_failures_listed: int = field(200, help="Failures written to the report in full.")


def _target_kind(target_json: str) -> str:
    try:
        return str(json.loads(target_json).get("kind", "?"))
    except (ValueError, AttributeError):
        return "?"


def database_dirs(harvest_dir: Path) -> list[Path]:
    """``<harvest>/db/<workload_id>/`` folders holding a JSON database (docs/data-contracts.md)."""
    db = Path(harvest_dir) / "db"
    if not db.is_dir():
        raise FileNotFoundError(f"{db}: harvest has no db/ folder")
    return sorted(p for p in db.iterdir() if (p / "database_tuning_record.json").is_file())


def expand_harvest_dirs(paths: list[Path]) -> list[Path]:
    """Accept harvest dirs (``<dir>/db``) and harvest roots (``<root>/<target_key>/db``), e.g. the
    ``artifacts/harvest`` root whose target key depends on the target dict."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "db").is_dir():
            out.append(p)
            continue
        children = sorted(c for c in p.iterdir() if (c / "db").is_dir()) if p.is_dir() else []
        if not children:
            raise FileNotFoundError(f"{p}: neither a harvest dir (db/) nor a root of harvest dirs")
        out.extend(children)
    return out


def validate_codec(harvest_dirs: list[Path], out_dir: Path, cfg: CodecConfig | None = None) -> int:
    """Round-trip every record of every workload under ``harvest_dirs``; write ``metrics.json`` and
    ``summary.md`` to ``out_dir``.  Returns the number of failed records (the CLI exits non-zero if > 0)."""
    from little_dragon.codec.roundtrip import roundtrip_database
    from little_dragon.codec.tokens import count_tokens, json_text, summarize
    from little_dragon.tracking import log_outputs, stage_run

    cfg = cfg or CodecConfig()
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    results = []
    harvest_dirs = expand_harvest_dirs(harvest_dirs)
    with stage_run("validate_codec", params=dataclasses.asdict(cfg),
                   inputs={f"harvest{i}": p for i, p in enumerate(harvest_dirs)}) as mlflow:
        for harvest in harvest_dirs:
            for db_dir in database_dirs(Path(harvest)):
                rs = roundtrip_database(db_dir, structural=cfg.structural_check, derived_post=cfg.derived_post,
                                        per_workload=cfg.records_per_workload)
                for r in rs:
                    r.workload = f"{Path(harvest).name}/{r.workload}"
                results.extend(rs)
                log.info("%s: %d records, %d failed", db_dir, len(rs), sum(not r.ok for r in rs))
        metrics = _metrics(results, cfg, count_tokens, json_text, summarize)
        metrics["wall_s"] = time.perf_counter() - t0
        metrics["harvest_dirs"] = [str(p) for p in harvest_dirs]
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_json(out_dir / "metrics.json", metrics)
        atomic.write_text(out_dir / "summary.md", _summary(metrics))
        if mlflow is not None:
            mlflow.log_metrics({k: float(v) for k, v in metrics["tokens"].items()})
            mlflow.log_metrics({"records": metrics["records"], "failed": metrics["failed"]})
            log_outputs(mlflow, {"report": out_dir})
    return metrics["failed"] + (1 if metrics["records"] < cfg.min_records else 0)


def _metrics(results: list, cfg: CodecConfig, count_tokens: Any, json_text: Any, summarize: Any) -> dict:
    kinds: collections.Counter = collections.Counter()
    by_target: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_target[_target_kind(r.target)]["passed" if r.ok else "failed"] += 1
        if r.trace_json:
            kinds.update(inst[0] for inst in r.trace_json[0])
    measured = [r for r in results if r.ok and r.trace_str]
    if cfg.token_sample:
        measured = measured[:: max(1, len(measured) // cfg.token_sample)][: cfg.token_sample]
    tokens: dict[str, float] = {}
    tokens_by_target: dict[str, dict[str, float]] = {}
    chars: dict[str, float] = {}
    if measured:
        samples = [{"codec": r.text, "json": json_text(r.trace_json), "str": r.trace_str} for r in measured]
        if all(r.text_post for r in measured):
            for s, r in zip(samples, measured):
                s["codec_post"] = r.text_post
        counts = count_tokens(samples, cfg.bpe_vocab_size)
        tokens = summarize(counts)
        # per target too: llvm and CUDA traces differ in size and make-up, and the bar is on both
        for kind in sorted({_target_kind(r.target) for r in measured}):
            idx = [i for i, r in enumerate(measured) if _target_kind(r.target) == kind]
            tokens_by_target[kind] = summarize({k: [v[i] for i in idx] for k, v in counts.items()})
            tokens_by_target[kind]["records"] = float(len(idx))
        for form in samples[0]:
            chars[f"median_chars.{form}"] = float(statistics.median(len(s[form]) for s in samples))
    failures = [{"workload": r.workload, "record": r.record, "error": r.error} for r in results if not r.ok]
    return {
        "records": len(results), "passed": sum(r.ok for r in results), "failed": len(failures),
        "by_target": {k: dict(v) for k, v in sorted(by_target.items())},
        "instruction_kinds": dict(kinds.most_common()), "tokens": tokens, "tokens_by_target": tokens_by_target,
        "chars": chars, "post_derived": sum(r.text_post.endswith("post *\n") for r in results),
        "token_records": len(measured), "records_per_workload": cfg.records_per_workload,
        "failures": failures[: cfg.max_failures_listed],
    }


def _summary(m: dict) -> str:
    per_target = ", ".join(f"{k}: {v.get('passed', 0)}/{sum(v.values())}" for k, v in m["by_target"].items())
    lines = ["# Codec validation", "",
             f"**{m['passed']} passed, {m['failed']} failed** of {m['records']} records ({per_target}; "
             + (f"{m['records_per_workload']} per workload, spread over the tuning order)."
                if m.get("records_per_workload") else "every record)."),
             "", "## Tokens (median over records; ratios: median of per-record ratios)", "",
             f"`post *` (post-processing re-derived at decode) reproduces {m.get('post_derived', 0)} records exactly.",
             "", "| target | tokenizer | form | codec | JSON | str(trace) | codec/JSON | codec/str |",
             "|---|---|---|---|---|---|---|---|"]
    for scope, t in [("all", m["tokens"])] + sorted(m.get("tokens_by_target", {}).items()):
        for tok in ("smollm2", "bpe"):
            for form in ("codec", "codec_post"):
                if f"median_tokens.{tok}.{form}" in t:
                    lines.append(f"| {scope} | {tok} | {form} | {t[f'median_tokens.{tok}.{form}']:.0f} | "
                                 f"{t[f'median_tokens.{tok}.json']:.0f} | {t[f'median_tokens.{tok}.str']:.0f} | "
                                 f"{t[f'ratio.{tok}.{form}_over_json.median']:.3f} | "
                                 f"{t[f'ratio.{tok}.{form}_over_str.median']:.3f} |")
    lines += ["", "## Instruction kinds", "", "| kind | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in m["instruction_kinds"].items()]
    if m["failures"]:
        lines += ["", "## Failures", ""]
        lines += [f"- `{f['workload']}` record {f['record']}: {f['error']}" for f in m["failures"]]
    return "\n".join(lines) + "\n"
