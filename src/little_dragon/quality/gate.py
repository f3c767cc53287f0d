"""Run a suite's GX checkpoints, build its Data Docs site, and fail with the offending rows named.

The GX project is file-mode under ``<gx_root>/gx`` (suites, validation definitions and checkpoints are
rewritten from code on every run with ``add_or_update``, so code stays the single source of truth);
each CLI suite has its own Data Docs site at ``<data_docs_dir>/<suite>/index.html``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd

from little_dragon.config import PROJECT_ROOT
from little_dragon.datasets.config import DatasetsConfig
from little_dragon.quality.config import QualityConfig
from little_dragon.quality.suites import EXPECTATIONS, SUITES

log = logging.getLogger(__name__)

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
DATASOURCE = "little_dragon"
ROW_ID = "row_id"


class QualityGateError(Exception):
    """A failed expectation: the message names the suite, the expectation and the offending rows."""


@dataclasses.dataclass
class ExpectationOutcome:
    table: str
    expectation: str
    kwargs: dict[str, Any]
    success: bool
    element_count: int | None
    unexpected_count: int | None
    offending: list[str]
    error: str = ""

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items() if k not in ("batch_id",))
        head = f"{self.table}: {self.expectation}({args})"
        if self.error:
            return f"{head}: raised {self.error}"
        if self.unexpected_count is None:
            return f"{head}: failed"
        return f"{head}: {self.unexpected_count} of {self.element_count} rows unexpected"


@dataclasses.dataclass
class SuiteResult:
    suite: str
    success: bool
    outcomes: list[ExpectationOutcome]
    rows: dict[str, int]
    docs_index: Path

    def metrics(self) -> dict[str, Any]:
        return {"suite": self.suite, "success": self.success, "rows": self.rows,
                "expectations": len(self.outcomes), "failed": sum(not o.success for o in self.outcomes),
                "results": [{"table": o.table, "expectation": o.expectation, "success": o.success,
                             "column": o.kwargs.get("column"), "unexpected_count": o.unexpected_count,
                             "element_count": o.element_count} for o in self.outcomes]}

    def failure_message(self, max_rows: int) -> str:
        lines = [f"quality gate {self.suite!r} failed ({sum(not o.success for o in self.outcomes)} of "
                 f"{len(self.outcomes)} expectations; Data Docs: {self.docs_index}):"]
        for o in self.outcomes:
            if o.success:
                continue
            lines.append(f"  - {o.describe()}")
            for r in o.offending[:max_rows]:
                lines.append(f"      {r}")
            if len(o.offending) > max_rows:
                lines.append(f"      ... and {len(o.offending) - max_rows} more")
        return "\n".join(lines)


def _resolve(p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else PROJECT_ROOT / q


def get_context(qc: QualityConfig) -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root = _resolve(qc.gx_root)
    root.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(root))
    bars = ctx.variables.progress_bars  # a ProgressBarsConfig when set now, a dict when read from the yml
    if (bars.get("globally") if isinstance(bars, dict) else getattr(bars, "globally", None)) is not False:
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        ctx.variables.save()
    return ctx


def _ensure_site(ctx: Any, qc: QualityConfig, suite: str) -> Path:
    """A Data Docs site per CLI suite (base_directory is relative to the context's ``gx`` folder)."""
    docs = _resolve(qc.data_docs_dir) / suite
    base = os.path.relpath(docs, ctx.root_directory)
    config = {"class_name": "SiteBuilder", "show_how_to_buttons": False,
              "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": base + "/"},
              "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}
    sites = ctx.list_data_docs_sites()
    if suite not in sites:
        ctx.add_data_docs_site(site_name=suite, site_config=config)
    elif sites[suite] != config:
        ctx.update_data_docs_site(site_name=suite, site_config=config)
    return docs / "index.html"


def _batch_definition(ctx: Any, table: str) -> Any:
    source = ctx.data_sources.add_or_update_pandas(DATASOURCE) if DATASOURCE not in \
        [d.name for d in ctx.data_sources.all().values()] else ctx.data_sources.get(DATASOURCE)
    try:
        asset = source.get_asset(table)
    except LookupError:
        asset = source.add_dataframe_asset(table)
    try:
        return asset.get_batch_definition("whole")
    except (KeyError, LookupError):
        return asset.add_batch_definition_whole_dataframe("whole")


def outcomes_of(table: str, results: list) -> list[ExpectationOutcome]:
    """One ``ExpectationOutcome`` per GX expectation result of ``table``, offending rows named by ``row_id``."""
    out = []
    for r in results:
        res = r.result or {}
        cfg = r.expectation_config
        idx = res.get("unexpected_index_list") or []
        offending = [str(i.get(ROW_ID, i)) + "  " + ", ".join(f"{k}={v!r}" for k, v in i.items() if k != ROW_ID)
                     if isinstance(i, dict) else str(i) for i in idx]
        error = ""
        if r.exception_info and r.exception_info.get("raised_exception"):
            error = str(r.exception_info.get("exception_message"))
        out.append(ExpectationOutcome(table, cfg.type, dict(cfg.kwargs), bool(r.success), res.get("element_count"),
                                      res.get("unexpected_count"), offending, error))
    return out


def open_site(qc: QualityConfig, site: str) -> tuple[Any, Path]:
    """The GX context and the index page of Data Docs site ``site`` (created or updated)."""
    ctx = get_context(qc)
    return ctx, _ensure_site(ctx, qc, site)


def run_checkpoint(ctx: Any, site: str, table: str, expectations: list[Any], df: pd.DataFrame) -> list:
    """Validate ``df`` as ``table`` against ``expectations`` through the GX checkpoint ``<site>-<table>``
    (suite, validation definition and checkpoint rewritten from code), which updates Data Docs site
    ``site``; GX's expectation results, in order."""
    import great_expectations as gx

    gsuite = gx.ExpectationSuite(name=table)
    for exp in expectations:
        gsuite.add_expectation(exp)
    gsuite = ctx.suites.add_or_update(gsuite)
    vd = ctx.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=table, data=_batch_definition(ctx, table), suite=gsuite))
    checkpoint = ctx.checkpoints.add_or_update(gx.Checkpoint(
        name=f"{site}-{table}", validation_definitions=[vd],
        actions=[gx.checkpoint.UpdateDataDocsAction(name="data-docs", site_names=[site])],
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": [ROW_ID]}))
    result = checkpoint.run(batch_parameters={"dataframe": df.reset_index(drop=True)})
    return [r for validation in result.run_results.values() for r in validation.results]


def run_suite(suite: str, frames: dict[str, pd.DataFrame], ds: DatasetsConfig, qc: QualityConfig) -> SuiteResult:
    """Validate each table of ``suite`` with its expectations; Data Docs are rebuilt in any case."""
    if suite not in SUITES:
        raise ValueError(f"unknown quality suite {suite!r}; known: {sorted(SUITES)}")
    ctx, docs_index = open_site(qc, suite)
    outcomes: list[ExpectationOutcome] = []
    for table in SUITES[suite]:
        outcomes.extend(outcomes_of(table, run_checkpoint(ctx, suite, table, EXPECTATIONS[table](ds, qc),
                                                          frames[table])))
    rows = {t: len(frames[t]) for t in SUITES[suite]}
    return SuiteResult(suite, all(o.success for o in outcomes), outcomes, rows, docs_index)


def build_frames(suite: str, ds: DatasetsConfig, qc: QualityConfig) -> dict[str, pd.DataFrame]:
    from little_dragon.quality import frames

    if suite == "workloads":
        return {"workloads": frames.workloads_frame(ds, qc)}
    if suite == "harvest":
        return frames.harvest_frames(ds)
    if suite == "examples":
        return frames.examples_frames(ds, qc)
    raise ValueError(f"unknown quality suite {suite!r}; known: {sorted(SUITES)}")


def check(suite: str, ds: DatasetsConfig, qc: QualityConfig, frames: dict[str, pd.DataFrame] | None = None
          ) -> SuiteResult:
    """Run ``suite``; raise ``QualityGateError`` naming failed expectations and offending rows."""
    result = run_suite(suite, frames if frames is not None else build_frames(suite, ds, qc), ds, qc)
    if not result.success:
        raise QualityGateError(result.failure_message(qc.max_reported_rows))
    return result
