"""Sources: a source with its files, tokenized versions and flags; the runs that used it."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet, Sum

from webapp.catalog.models import Flag, Source, SourceFile, TokenizedSource, TrainingRun


@dataclass
class SourceDetail:
    source: Source
    files: list[SourceFile]
    file_totals: dict[str, int]
    tokenized: list[TokenizedSource]
    flags: list[Flag]


def source_detail(*, source_id: int, files_limit: int = 200) -> SourceDetail:
    """Five queries: the source, its first files, file totals, tokenized versions, flags."""
    source = Source.objects.get(pk=source_id)
    files = list(SourceFile.objects.filter(source=source).order_by("path")[:files_limit])
    totals = SourceFile.objects.filter(source=source).aggregate(
        files=Count("id"), documents=Sum("num_documents"), bad_lines=Sum("bad_lines")
    )
    tokenized = list(
        TokenizedSource.objects.filter(source=source)
        .select_related("tokenizer")
        .annotate(num_shards=Count("shards"))
        .order_by("-created_at")
    )
    flags = list(Flag.objects.filter(source=source).order_by("-created_at"))
    return SourceDetail(
        source=source,
        files=files,
        file_totals={k: v or 0 for k, v in totals.items()},
        tokenized=tokenized,
        flags=flags,
    )


def source_runs(*, source_id: int) -> QuerySet[TrainingRun]:
    """Which runs used this source (through any tokenized source, pool and version)."""
    return (
        TrainingRun.objects.filter(mixture_version__components__pool__parents__source_id=source_id)
        .select_related("mixture_version__mixture")
        .distinct()
        .order_by("-created_at")
    )
