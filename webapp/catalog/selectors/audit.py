"""Audit: which pools, mixture versions and runs contain a source, one of its files or
one of its documents. Relational lineage (source -> tokenized sources -> pools ->
versions -> runs); for a file or a document, pools are checked against their Parquet
document lists (rows never store per-document data)."""

from __future__ import annotations

import numpy as np

from webapp.catalog.models import (
    MixtureVersion,
    Pool,
    Source,
    SourceFile,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.pool_documents import pool_documents_hit
from webapp.catalog.selectors.common import NotFound, runs_with_taint

AUDIT_RUNS = 100  # listed; ``num_runs`` counts all


def audit_search(*, source: str, file_path: str = "", document_id: int | None = None) -> dict:
    """Every pool, mixture version and run that contains ``source`` (a name or an id), its
    file ``file_path``, or its document ``document_id``: ``{source, file, document_id,
    tokenized, pools, versions, runs (the newest AUDIT_RUNS, marked ``tainted``),
    num_runs}``. NotFound names a source or file that does not exist."""
    q = Source.objects.all()
    src = (q.filter(pk=int(source)) if source.isdigit() else q.filter(name=source)).first()
    if src is None:
        raise NotFound(f"no source named {source!r}")
    file = None
    if file_path:
        file = src.files.filter(path=file_path).first()
        if file is None:
            raise NotFound(f"source {src.name} has no file {file_path!r}")
    tokenized = list(TokenizedSource.objects.filter(source=src).select_related("tokenizer"))
    pools = list(
        Pool.objects.filter(parents__in=tokenized)
        .distinct()
        .prefetch_related("parents")
        .order_by("-created_at")
    )
    if file is not None or document_id is not None:
        pools = [p for p in pools if _pool_holds(p, src.pk, file, document_id)]
    versions = list(
        MixtureVersion.objects.filter(components__pool__in=pools)
        .select_related("mixture")
        .distinct()
        .order_by("-created_at")
    )
    run_qs = TrainingRun.objects.filter(mixture_version__in=versions)
    runs = runs_with_taint(
        list(run_qs.select_related("mixture_version__mixture").order_by("-created_at")[:AUDIT_RUNS])
    )
    return {
        "source": src,
        "file": file,
        "document_id": document_id,
        "tokenized": tokenized,
        "pools": pools,
        "versions": versions,
        "runs": runs,
        "num_runs": run_qs.count() if len(runs) == AUDIT_RUNS else len(runs),
    }


def _document_ids(
    *, tokenized: TokenizedSource, file_path: str | None = None, document_ids=None
) -> np.ndarray:
    """The documents of ``tokenized`` an audit asks about: ``document_ids``, or the
    documents of the file ``file_path`` (the id range the tokenize stage recorded in
    ``params["file_ranges"]``; empty for a file it did not read)."""
    if file_path is not None:
        start, stop = (tokenized.params.get("file_ranges") or {}).get(file_path, (0, 0))
        return np.arange(int(start), int(stop), dtype=np.int64)
    return np.unique(np.asarray(list(document_ids or ()), dtype=np.int64))


def _pool_holds(
    pool: Pool, source_id: int, file: SourceFile | None, document_id: int | None
) -> bool:
    """Whether the pool holds the document, or any document of the file, read from the
    pool's Parquet document list."""
    for ts in pool.parents.all():
        if ts.source_id != source_id:
            continue
        if document_id is not None:
            ids = _document_ids(tokenized=ts, document_ids=[document_id])
        else:
            ids = _document_ids(tokenized=ts, file_path=file.path)  # type: ignore[union-attr]
        if not ids.size:
            continue
        try:
            if pool_documents_hit(pool=pool, tokenized=ts, doc_ids=ids):
                return True
        except Exception:  # noqa: BLE001
            # An unreadable document list cannot clear the pool: an audit over-reports.
            return True
    return False
