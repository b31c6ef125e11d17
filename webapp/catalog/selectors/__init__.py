"""The catalog's read model: one module per entity, each read returning plain data (dicts
and dataclasses of rows) in a fixed number of queries whatever the number of shards, runs
or files (tests assert the counts). No HTTP here: a missing row raises ``NotFound``, which
pages and the API answer with 404; pages turn the data into contexts and charts
(``webapp.dashboard``), the API into JSON (``webapp.api``). Reads never write: the
services are ``webapp.catalog.services``."""

from webapp.catalog.selectors.audit import AUDIT_RUNS, audit_search
from webapp.catalog.selectors.common import NotFound, page_of, paged, runs_with_taint
from webapp.catalog.selectors.flags import (
    TAINT_TARGETS,
    flag_detail,
    flag_first_sample,
    flag_read,
    flag_read_text,
    flag_recent,
    flag_run_reads,
    run_flag_reads,
    segment_flagged,
    taint_describe,
    tainted_runs,
)
from webapp.catalog.selectors.mixtures import builder_pools, mixture_draft_predict, mixture_names
from webapp.catalog.selectors.overview import overview_counts
from webapp.catalog.selectors.pools import pool_detail, pool_list, pool_properties, pool_quality
from webapp.catalog.selectors.runs import (
    RunLineage,
    progress_reports,
    run_lineage,
    run_list,
    run_loss_marks,
    run_progress_reports,
    run_segment_rows,
    run_segments,
    runs_segments,
)
from webapp.catalog.selectors.shards import artifact_shards, shard_totals
from webapp.catalog.selectors.sources import source_detail, source_list, source_runs, source_stats

__all__ = [
    "AUDIT_RUNS",
    "TAINT_TARGETS",
    "NotFound",
    "RunLineage",
    "artifact_shards",
    "audit_search",
    "builder_pools",
    "flag_detail",
    "flag_first_sample",
    "flag_read",
    "flag_read_text",
    "flag_recent",
    "flag_run_reads",
    "mixture_draft_predict",
    "mixture_names",
    "overview_counts",
    "page_of",
    "paged",
    "pool_detail",
    "pool_list",
    "pool_properties",
    "pool_quality",
    "progress_reports",
    "run_flag_reads",
    "run_lineage",
    "run_list",
    "run_loss_marks",
    "run_progress_reports",
    "run_segment_rows",
    "run_segments",
    "runs_segments",
    "runs_with_taint",
    "segment_flagged",
    "shard_totals",
    "source_detail",
    "source_list",
    "source_runs",
    "source_stats",
    "taint_describe",
    "tainted_runs",
]
