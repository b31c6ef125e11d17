"""The catalog's read model: one module per entity, each read returning plain data (dicts
of values and the rows they read) in a fixed number of queries whatever the number of
shards, runs or files (tests assert the counts). No HTTP here: a missing row raises ``NotFound``, which
pages and the API answer with 404; pages turn the data into contexts and charts
(``webapp.dashboard``), the API into JSON (``webapp.api``). Reads never write: the
services are ``webapp.catalog.services``.

The names below are the read model's surface; each module documents the rest."""

from webapp.catalog.selectors.annotations import (
    annotation_columns,
    annotation_detail,
    annotation_known,
    annotation_rows,
    annotation_target,
    annotations_of_job,
    annotator_choices,
    source_annotations,
)
from webapp.catalog.selectors.audit import audit_search
from webapp.catalog.selectors.common import NotFound
from webapp.catalog.selectors.flags import (
    flag_detail,
    flag_documents_page,
    flag_first_sample,
    flag_read_text,
    flag_recent,
    flag_row,
    flag_rows,
    run_flag_reads,
    segment_flagged,
    tainted_runs,
)
from webapp.catalog.selectors.lineage import run_lineage, version_lineage
from webapp.catalog.selectors.mixtures import (
    builder_pools,
    export_file,
    mixture_detail,
    mixture_draft_predict,
    mixture_list,
    mixture_names,
    mixture_rows,
    mixture_version_detail,
    mixture_version_diff,
    mixture_version_document,
    mixture_version_ids,
    mixture_version_row,
    mixture_version_rows,
)
from webapp.catalog.selectors.overview import overview, overview_counts
from webapp.catalog.selectors.pools import (
    pool_detail,
    pool_list,
    pool_planned_by,
    pool_rows,
)
from webapp.catalog.selectors.run_rows import run_row, run_rows
from webapp.catalog.selectors.runs import (
    run_budget,
    run_detail,
    run_list,
    run_loss_marks,
    run_losses,
    run_mixture_proposal,
    run_page,
    run_proposal_draft,
    run_resume_position,
    run_segment_rows,
    run_segments,
    runs_with_val_losses,
    step_of_sample_at,
    steps_of_samples_at,
)
from webapp.catalog.selectors.shards import artifact_shards, shard_totals
from webapp.catalog.selectors.sources import (
    source_detail,
    source_list,
    source_row,
    source_rows,
)

__all__ = [
    "NotFound",
    "annotation_columns",
    "annotation_detail",
    "annotation_known",
    "annotation_rows",
    "annotation_target",
    "annotations_of_job",
    "annotator_choices",
    "artifact_shards",
    "audit_search",
    "builder_pools",
    "pool_planned_by",
    "export_file",
    "flag_detail",
    "flag_documents_page",
    "flag_first_sample",
    "flag_read_text",
    "flag_recent",
    "flag_row",
    "flag_rows",
    "mixture_detail",
    "mixture_draft_predict",
    "mixture_list",
    "mixture_names",
    "mixture_rows",
    "mixture_version_detail",
    "mixture_version_diff",
    "mixture_version_document",
    "mixture_version_ids",
    "mixture_version_row",
    "mixture_version_rows",
    "overview",
    "overview_counts",
    "pool_detail",
    "pool_list",
    "pool_rows",
    "run_budget",
    "run_detail",
    "run_flag_reads",
    "run_lineage",
    "run_list",
    "run_loss_marks",
    "run_losses",
    "run_mixture_proposal",
    "run_proposal_draft",
    "run_page",
    "run_resume_position",
    "run_row",
    "run_rows",
    "run_segment_rows",
    "run_segments",
    "runs_with_val_losses",
    "shard_totals",
    "step_of_sample_at",
    "steps_of_samples_at",
    "source_annotations",
    "source_detail",
    "segment_flagged",
    "source_list",
    "source_row",
    "source_rows",
    "tainted_runs",
    "version_lineage",
]
