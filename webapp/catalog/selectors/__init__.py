"""The catalog's read model: one module per entity, each read returning plain data (dicts
and dataclasses of rows) in a fixed number of queries whatever the number of shards, runs
or files (tests assert the counts). No HTTP here: a missing row raises ``NotFound``, which
pages and the API answer with 404; pages turn the data into contexts and charts
(``webapp.dashboard``), the API into JSON (``webapp.api``). Reads never write: the
services are ``webapp.catalog.services``."""

from webapp.catalog.selectors.audit import (
    AUDIT_RUNS,
    audit_document_ids,
    audit_search,
)
from webapp.catalog.selectors.common import (
    NotFound,
    runs_with_taint,
)
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
from webapp.catalog.selectors.lineage import (
    run_lineage,
    version_lineage,
)
from webapp.catalog.selectors.mixtures import (
    BUILDER_POOLS,
    builder_pools,
    export_file,
    mixture_detail,
    mixture_draft_predict,
    mixture_list,
    mixture_names,
    mixture_version_detail,
    mixture_version_diff,
    mixture_version_document,
    version_schedule,
)
from webapp.catalog.selectors.overview import (
    overview,
    overview_counts,
)
from webapp.catalog.selectors.pools import (
    QUALITY_MAX_DOCUMENTS,
    SHARDS_SHOWN,
    SHUFFLES_COMPARED,
    pool_detail,
    pool_list,
    pool_properties,
    pool_quality,
)
from webapp.catalog.selectors.runs import (
    LOSS_POINTS,
    OVERLAY_RUNS,
    PROGRESS_POINTS,
    progress_reports,
    run_detail,
    run_list,
    run_loss_marks,
    run_losses,
    run_page,
    run_progress_reports,
    run_segment_rows,
    run_segments,
    run_stages,
    runs_segments,
)
from webapp.catalog.selectors.shards import (
    artifact_shards,
    shard_totals,
)
from webapp.catalog.selectors.sources import (
    FILES_SHOWN,
    source_detail,
    source_list,
    source_runs,
    source_stats,
)

__all__ = [
    "AUDIT_RUNS",
    "BUILDER_POOLS",
    "FILES_SHOWN",
    "LOSS_POINTS",
    "NotFound",
    "OVERLAY_RUNS",
    "PROGRESS_POINTS",
    "QUALITY_MAX_DOCUMENTS",
    "SHARDS_SHOWN",
    "SHUFFLES_COMPARED",
    "TAINT_TARGETS",
    "artifact_shards",
    "audit_document_ids",
    "audit_search",
    "builder_pools",
    "export_file",
    "flag_detail",
    "flag_first_sample",
    "flag_read",
    "flag_read_text",
    "flag_recent",
    "flag_run_reads",
    "mixture_detail",
    "mixture_draft_predict",
    "mixture_list",
    "mixture_names",
    "mixture_version_detail",
    "mixture_version_diff",
    "mixture_version_document",
    "overview",
    "overview_counts",
    "pool_detail",
    "pool_list",
    "pool_properties",
    "pool_quality",
    "progress_reports",
    "run_detail",
    "run_flag_reads",
    "run_lineage",
    "run_list",
    "run_losses",
    "run_page",
    "run_loss_marks",
    "run_progress_reports",
    "run_segment_rows",
    "run_segments",
    "run_stages",
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
    "version_lineage",
    "version_schedule",
]
