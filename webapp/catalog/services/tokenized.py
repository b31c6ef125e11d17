"""Writes for tokenizers and tokenized sources: the tokenize job and its recorder."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from shardcore import storage
from shardcore.encoders import DEFAULT_TOKENIZER, load_tokenizer
from shardcore.errors import InputError
from shardcore.manifest import MANIFEST_NAME
from shardcore.tokenize import plan_tokenize
from shardcore.units import Plan
from webapp.catalog import guards
from webapp.catalog.errors import CatalogError, boundary, refused
from webapp.catalog.models import (
    ArtifactStatus,
    Source,
    SourceFile,
    TokenizedSource,
    Tokenizer,
)
from webapp.catalog.services.common import (
    artifact_dir,
    artifact_unbuilt,
    limited,
    shards_record,
)
from webapp.catalog.services.facts import artifact_facts_request
from webapp.catalog.services.flags import taint_refresh
from webapp.catalog.services.launch import launch
from webapp.catalog.services.sources import source_file_urls
from webapp.jobs import recorders
from webapp.jobs.models import ACTIVE_JOB_STATES


def _tokenizer_facts(spec: str) -> dict[str, Any]:

    tok = load_tokenizer(spec, "reference")  # the facts only: the fast engine is not needed
    return {"fingerprint": tok.fingerprint, "vocab_size": tok.vocab_size, "eos_id": tok.eos_id}


def tokenizer_spec_check(*, spec: str) -> str:
    try:
        return guards.tokenizer_spec_check(spec)
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def tokenizer_ensure(*, spec: str) -> Tokenizer:
    """The catalog row of a tokenizer spec, loading it once (in a limited child process)
    to learn its fingerprint. hf: paths only from ``settings.TOKENIZER_ROOTS``."""

    spec = tokenizer_spec_check(spec=spec)
    existing = Tokenizer.objects.filter(spec=spec).first()
    if existing is not None:
        return existing
    try:
        facts = limited(_tokenizer_facts, spec, what=f"loading tokenizer {spec!r}")
    except (InputError, ValueError, OSError) as exc:
        # The library's refusals name the tokenizer already: said once.
        said = str(exc)
        prefix = f"tokenizer {spec!r}"
        raise CatalogError(said if said.startswith(prefix) else f"{prefix}: {said}") from exc
    row, _ = Tokenizer.objects.get_or_create(spec=spec, defaults=facts)
    return row


@boundary
def tokenized_source_build(
    *,
    source_id: int,
    tokenizer: str | None = None,
    engine: str = "auto",
    shard_size: int = 256 << 20,
    unit_bytes: int = 64 << 20,
    created_by=None,
) -> TokenizedSource:
    """Start a tokenize job over the source's files; returns the BUILDING artifact row
    (its ``job`` shows progress). The job's recorder fills it in when the manifest exists."""

    source = Source.objects.get(pk=source_id)
    tok = tokenizer_ensure(spec=tokenizer or DEFAULT_TOKENIZER)
    out = ""

    def plan() -> Plan:
        nonlocal out
        files = source_file_urls(source=source)  # checks the roots again: files may move
        if not files:
            raise CatalogError(f"source {source.name} has no readable files")
        out = artifact_dir("tokenized", source.name)
        with refused(f"cannot tokenize {source.name}"):
            return limited(
                plan_tokenize,
                [url for _rel, url, _size in files],
                out,
                tokenizer=tok.spec,
                engine=engine,
                text_field=source.text_field,
                shard_size=shard_size,
                unit_bytes=unit_bytes,
                what=f"planning the tokenization of {source.name}",
            )

    return launch(
        # Launches of one source are serialized: the second of two concurrent ones sees
        # the first's row and answers it.
        lock=lambda: Source.objects.select_for_update().get(pk=source.pk),
        running=lambda: _tokenizing(source, tok),
        plan=plan,
        create=lambda job, plan: TokenizedSource.objects.create(
            source=source,
            tokenizer=tok,
            params=plan.params,
            path=out,
            job=job,
            created_by=created_by,
        ),
        title=f"tokenize {source.name} with {tok.spec}",
        recorder="tokenized",
        created_by=created_by,
    )


def _tokenizing(source: Source, tok: Tokenizer) -> TokenizedSource | None:
    """The source's tokenization with ``tok`` whose job is still queued or running."""

    return (
        TokenizedSource.objects.filter(
            source=source,
            tokenizer=tok,
            status=ArtifactStatus.BUILDING,
            job__state__in=ACTIVE_JOB_STATES,
        )
        .order_by("-pk")
        .first()
    )


@recorders.register("tokenized")
def tokenized_source_record(*, job, manifest: dict | None) -> None:
    """Recorder of tokenize jobs: the manifest becomes the artifact row, its shards, and the
    per-file bad-input counts of the source. Runs inside the job's final transaction."""
    ts = TokenizedSource.objects.select_for_update().select_related("source").get(job=job)
    if manifest is None:
        artifact_unbuilt(ts, job=job)
        return
    source = ts.source
    files = source_file_urls(source=source)
    rel_of = {url: rel for rel, url, _size in files}
    file_ranges: dict[str, list[int]] = {}
    first = 0
    for entry in manifest["inputs"]:  # in source order: document ids are consecutive
        rel = rel_of.get(entry["file"], entry["file"])
        file_ranges[rel] = [first, first + entry["documents"]]
        first += entry["documents"]
    out = ts.path
    # One sequence per document: a tokenized shard's records are its documents.
    shards_record(
        owner={"tokenized_source": ts},
        out=out,
        manifest=manifest,
        shards=({**sh, "records": sh["documents"]} for sh in manifest["shards"]),
    )
    bad = manifest.get("bad_input") or {}
    per_file = {e["file"]: e for e in manifest["inputs"]}
    for sf in SourceFile.objects.filter(source=source):
        url = next((u for u, r in rel_of.items() if r == sf.path), None)
        if url is None or url not in per_file:
            continue
        report = bad.get(url, {})
        sf.num_documents = per_file[url]["documents"]
        sf.bad_lines = sum(r["count"] for r in report.values())
        sf.bad_input = {
            reason: {
                "count": r["count"],
                "samples": [
                    f"{sf.path}:{s.get('line')}: {reason}: {s.get('message')}"
                    for s in r.get("samples", [])
                ],
            }
            for reason, r in report.items()
        }
        sf.save(update_fields=["num_documents", "bad_lines", "bad_input"])
    totals = manifest["totals"]
    ts.fingerprint = manifest["fingerprint"]
    ts.params = {**ts.params, "file_ranges": file_ranges, "dtype": manifest.get("dtype")}
    ts.num_documents = totals["documents"]
    ts.num_tokens = totals["tokens"]
    ts.num_bytes = sum(s.num_bytes for s in ts.shards.all())
    ts.manifest_path = storage.join(out, MANIFEST_NAME)
    ts.supersedes = (
        TokenizedSource.objects.filter(
            source=source, tokenizer=ts.tokenizer, status=ArtifactStatus.READY
        )
        .order_by("-created_at")
        .first()
    )
    ts.num_shards = len(manifest["shards"])
    ts.status = ArtifactStatus.READY
    ts.finished_at = timezone.now()
    ts.save()
    artifact_facts_request(ts)  # its statistics, measured by a task, not by its page
    taint_refresh(source_ids=[source.pk])
