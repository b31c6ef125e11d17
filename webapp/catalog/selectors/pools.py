"""Pools: a page of pools, a pool with its shards, parents, versions and taints, and its
shuffle quality measured from its files."""

from __future__ import annotations

import logging

import numpy as np
from django.db.models import Count, Prefetch

from shardcore import manifest as mf
from shardcore import props, quality, storage
from shardcore.errors import ShardcoreError
from shardcore.pool import PoolReader
from shardcore.shuffle import SHUFFLES
from webapp.catalog import facts
from webapp.catalog.models import (
    ArtifactStatus,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors.common import get_or_not_found
from webapp.catalog.selectors.shards import artifact_shards
from webapp.jobs.models import Job
from webapp.paging import page_of

log = logging.getLogger(__name__)

SHARDS_SHOWN = 50


def pool_list(*, page=1) -> dict:
    """A page of pools, newest first (``common.paged``)."""
    return page_of(Pool.objects.order_by("-created_at").defer("params"), page)


def pool_detail(*, pool_id: int, by: str = "") -> dict:
    """A pool: its first shards and its totals (kept on its row), its parents, the
    versions using it, its taints, the properties its documents can be labelled by, and
    its shuffle quality (``pool_quality``) labelled by ``by`` (kept only when it is one of
    them, ``length`` or ``_doc.source``). Reads rows only: what is measured from the
    pool's files is stored by a task (``webapp.catalog.facts``)."""
    pool = get_or_not_found(Pool.objects.all(), "pool", pk=pool_id)
    parents = list(pool.parents.select_related("source", "tokenizer").defer("params"))
    versions = list(
        MixtureVersion.objects.filter(components__pool=pool)
        .select_related("mixture")
        .distinct()
        .order_by("-created_at")[:20]
    )
    properties = pool_properties(pool=pool)
    by = by if by in properties or by in ("length", "_doc.source") else ""
    return {
        "pool": pool,
        "by": by,
        "properties": properties,
        # The (pool, index) index serves the first page of shards.
        "shards": list(artifact_shards(pool_id=pool.pk, limit=SHARDS_SHOWN)),
        "totals": {
            "shards": pool.num_shards,
            "records": pool.num_records,
            "tokens": pool.num_tokens,
            "bytes": pool.num_bytes,
        },
        "parents": parents,
        "versions": versions,
        "taints": list(pool.taints.select_related("flag")[:20]),
        "quality": pool_quality(pool=pool, by=by),
        "training": pool_training(pool=pool),
    }


TRAINING_RUNS = 6
TRAINING_POINTS = 5000


def pool_planned_by(*, job_id: int) -> Pool | None:
    """The train pool a planning job (``shardcore.planning``) planned: the one at the
    output its plan names (its own job is the pool's job once planned)."""
    target = (
        Job.objects.filter(pk=job_id, kind="planning")
        .values_list("plan__params__target", flat=True)
        .first()
    )
    if not target:
        return None
    return Pool.objects.filter(path=target, split=Pool.Split.TRAIN).first()


def pool_training(*, pool: Pool) -> list[dict]:
    """Training loss of the runs that read this pool, or another pool of the same
    documents (the same tokenized sources, filter and seq_len: another shuffle), alone and in
    pool order (their version's only component; the newest TRAINING_RUNS): per run its
    pool, its training loss per step and where each shard of its pool starts, in steps
    (records / samples per step, from the run's latest progress report). The loss bumps
    of a shard-local shuffle show against the exact shuffle. A bounded number of queries."""
    parents = sorted(pool.parents.values_list("pk", flat=True))
    # The candidates' parents in one query (not one per candidate pool).
    siblings = [
        p
        for p in Pool.objects.filter(
            parents__in=parents, seq_len=pool.seq_len, filter=pool.filter, split=Pool.Split.TRAIN
        )
        .distinct()
        .defer("params")
        .prefetch_related(Prefetch("parents", queryset=TokenizedSource.objects.only("id")))
        if sorted(t.pk for t in p.parents.all()) == parents
    ]
    alone = (
        MixtureComponent.objects.filter(pool__in=siblings)
        .values("version_id")
        .annotate(n=Count("id"))
    )
    single = {
        c.version_id: c.pool
        for c in MixtureComponent.objects.filter(
            version_id__in=[v["version_id"] for v in alone if v["n"] == 1]
        ).select_related("pool")
    }
    runs = list(
        TrainingRun.objects.filter(mixture_version_id__in=list(single), losses__split="train")
        .distinct()
        .order_by("-created_at")[:TRAINING_RUNS]
    )
    losses: dict[int, list[tuple[int, float]]] = {}
    for run_id, step, loss in (
        RunLoss.objects.filter(run__in=runs, split="train")
        .order_by("run_id", "step")
        .values_list("run_id", "step", "loss")[: TRAINING_POINTS * max(len(runs), 1)]
    ):
        losses.setdefault(run_id, []).append((step, loss))
    out = []
    for run in runs:
        p = single[run.mixture_version_id]
        per_step = run.consumed_samples / run.last_step if run.last_step else 0
        try:
            cumulative = mf.read_manifest(p.path)["cumulative_records"]
        except (ShardcoreError, OSError, KeyError):
            cumulative = []
        out.append(
            {
                "run": run,
                "pool": p,
                "steps": [s for s, _ in losses.get(run.pk, [])],
                "loss": [x for _, x in losses.get(run.pk, [])],
                "shard_steps": [c / per_step for c in cumulative[1:-1]] if per_step else [],
            }
        )
    return out


def pool_properties(*, pool: Pool) -> list[str]:
    """What the quality charts can label documents by: the pool's properties (nested ones
    as dotted paths), measured from its documents table's schema by a task
    (``pool_properties_measure``) and stored; none while being measured."""
    return (facts.fact_read("pool_properties", pool.pk).get("value")) or []


def pools_properties(pools: list[Pool]) -> dict[int, list[str]]:
    """``pool_properties`` of many pools in one query."""
    stored = facts.facts_read("pool_properties", [p.pk for p in pools])
    return {p.pk: stored.get(p.pk) or [] for p in pools}


def pool_properties_measure(*, pool: Pool) -> list[str]:
    """The pool's properties read from its documents table's schema (``documents.parquet``
    or, for a pool of many buckets, its first shard's sidecar; on object storage the
    footer by checked byte ranges); empty when it cannot be read."""
    try:
        schema = PoolReader(pool.path, ranged=True).document_schema
    except (OSError, ShardcoreError, ValueError):
        return []
    return props.names(props.props_type(schema))[:50]


# --- shuffle quality --------------------------------------------------------------------

# A pool's quality is measured on the first this many records of its order (every record
# of a smaller pool): the same cost for every pool size, like a version's per stage.
QUALITY_RECORDS = 1 << 16
SHUFFLES_COMPARED = tuple(SHUFFLES)


def pool_quality(*, pool, by: str = "") -> dict:
    """The shuffle-quality report of a built pool (``pool_quality_measure``): the pool's
    own order (per record, ``shardcore.quality.report``), and every registered shuffle run
    on the same documents in the same input order, measured per document. Labels: the
    property ``by`` (or ``length``), else the tokenized source when the pool has several,
    else the document-length bin (log2 tokens). The default labels' report is the one
    its build recorded (``params["quality"]``); any other is measured by a task the first
    time it is asked for and stored (``webapp.catalog.facts``): until then
    ``{"computing": {state, progress, since}}``. Empty when the files are absent."""
    recorded = None if by else (pool.params or {}).get("quality")
    if recorded and "label_verdicts" in recorded:
        return recorded
    if pool.status != ArtifactStatus.READY:
        return recorded or {}
    stored = facts.fact_read("pool_quality", pool.pk, by)
    if "value" in stored:
        return stored["value"] or recorded or {}
    if "computing" in stored:
        return {"computing": stored["computing"]}
    return recorded or {"error": stored.get("error", "")}


def pool_quality_measure(*, pool, by: str = "") -> dict:
    """``pool_quality`` measured from the pool's files now (no cache); empty when the files
    cannot be read."""
    # Label documents by their source's name, in the pool manifest's source order.
    names = dict(TokenizedSource.objects.filter(pools=pool).values_list("path", "source__name"))
    try:
        report = _measure(pool.path, source_names=names, by=by)
    except Exception as e:  # noqa: BLE001 - a pool without readable files has no report
        if storage.is_store_error(e):
            raise  # the object store did not answer: say so (a 503), not "no report"
        log.info("no quality for pool %s: %s", pool.pk, e)
        return {}
    (report.get("batches") or {}).pop("per_batch", None)  # one number per batch: not kept
    return report


_QUALITY_COLUMNS = ("source", "n_tokens", "source_shard", "source_row")


def _document_columns(reader: PoolReader) -> dict[str, np.ndarray]:
    """The columns of the pool's documents table the quality report reads, as arrays (no
    Arrow table is kept beside them; on object storage read by checked ranges)."""
    return reader.document_columns(list(_QUALITY_COLUMNS))[1]


def _coded(codes: np.ndarray, names: list[str]) -> quality.Coded:
    """Per document ``names[codes]`` as ``quality.Coded`` (codes in the names' sort order,
    equal names one label), without a string per document."""
    unique = sorted(set(names))
    rank = np.array([unique.index(n) for n in names], dtype=np.int32)
    return quality.Coded(rank[np.asarray(codes)], unique)


def _plain(labels: np.ndarray | quality.Coded) -> np.ndarray:
    if isinstance(labels, quality.Coded):
        return np.array(labels.names)[labels.codes]
    return labels


def _measure(path: str, *, source_names: dict[str, str] | None = None, by: str = "") -> dict:

    reader = PoolReader(path, ranged=True)  # on object storage: the columns, not a copy
    docs = _document_columns(reader)
    num_docs = len(docs["source"])
    if num_docs < 8:
        return {}
    # The first QUALITY_RECORDS records, and the documents packed into them: pool documents
    # are numbered in record order, so they are the first ``n_docs``.
    record_docs = reader.main_documents(limit=QUALITY_RECORDS)
    n_docs = int(record_docs.max()) + 1 if len(record_docs) < reader.num_records else num_docs
    source, n_tokens = docs["source"], docs["n_tokens"]
    by_source = len(np.unique(source)) > 1
    paths = [s["path"] for s in reader.manifest.get("sources", [])]
    names = np.array([(source_names or {}).get(p, str(k)) for k, p in enumerate(paths)])
    # Labels as integer codes (quality.Coded): 4 bytes a document, not a string each.
    doc_labels: np.ndarray | quality.Coded
    if by and by != "length":
        values = reader.document_values(by)  # InputError names an unknown property
        doc_labels = np.array(["(absent)" if v is None else str(v) for v in values.tolist()])
        label = by
    elif by_source and by != "length":
        known = len(names) > int(source.max())
        doc_labels = _coded(
            source, names.tolist() if known else [str(k) for k in range(int(source.max()) + 1)]
        )
        label = "tokenized source"
    else:
        bins, inverse = np.unique(
            np.floor(np.log2(np.maximum(n_tokens, 1))).astype(int), return_inverse=True
        )
        doc_labels = _coded(
            inverse, [f"{2**b:,}-{2 ** (b + 1) - 1:,} tokens" for b in bins.tolist()]
        )
        label = "document length (tokens)"
    report = quality.report(doc_labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = label
    report["records"], report["measured"] = reader.num_records, len(record_docs)
    # The reference: uniform random permutations of the same documents, packed alike.
    windows = report["windows"]
    bos = int(bool(reader.manifest.get("params", {}).get("bos")))
    ref = quality.document_shuffle_reference(
        _plain(doc_labels[:n_docs]), n_tokens[:n_docs].astype(np.int64) + bos,
        int(reader.manifest["seq_len"]),
        windows["window_sizes"], trials=8, seed=1234,
    )  # fmt: skip
    report["reference"] = ref
    report["verdict"] = quality.verdict(windows["window_sizes"], windows["max_all"], ref["mean"])
    # Each label's own verdict too: the worst label's alone hides a label that mixes well.
    report["label_verdicts"] = quality.label_verdicts(windows, ref)
    # The same documents in input order (source, input shard, row): what every shuffle
    # reads; input shards give the per-shard counts the shuffles plan with. Each is
    # measured on as many documents as the pool's measured records hold: its first.
    shard, row = docs.pop("source_shard"), docs.pop("source_row")
    order = np.lexsort((row, shard, source))
    del row
    labels_in = doc_labels[order]
    change = np.ones(len(order), dtype=bool)  # where a (source, input shard) starts
    in_order = source[order]
    change[1:] = in_order[1:] != in_order[:-1]
    in_order = shard[order]
    change[1:] |= in_order[1:] != in_order[:-1]
    del in_order, shard
    counts = np.diff(np.concatenate([np.flatnonzero(change), [len(order)]]))
    del order, change
    by_shuffle = {}
    for name in SHUFFLES_COMPARED:
        module = SHUFFLES[name]
        buckets = module.num_buckets(counts, max(2, len(counts)))
        perm = module.permutation(counts, 1234, buckets)
        by_shuffle[name] = {"windows": quality.window_deviation(labels_in[perm[:n_docs]])}
    report["by_shuffle"] = by_shuffle
    return report
