"""Writes of the dashboard's own: users, roles and API tokens. Catalog and job writes are
the services of webapp.catalog and webapp.jobs; the views call those directly."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from webapp.dashboard.permissions import ROLES


def _role_group(role: str) -> Group:
    if role not in ROLES:
        raise ValidationError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    return Group.objects.get_or_create(name=role)[0]


@transaction.atomic
def user_create(*, username: str, password: str, role: str, email: str = ""):
    """A new user holding exactly one role."""
    User = get_user_model()
    group = _role_group(role)
    if User.objects.filter(username=username).exists():
        raise ValidationError(f"a user named {username!r} exists already")
    user = User.objects.create_user(username=username, password=password, email=email)
    user.groups.add(group)
    return user


@transaction.atomic
def user_role_set(*, user, role: str) -> None:
    """Replace the user's role; other (non-role) groups stay."""
    group = _role_group(role)
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(pk=group.pk))
    user.groups.add(group)
    user.__dict__.pop("_shardyard_role", None)


@transaction.atomic
def token_issue(*, user) -> Token:
    """A fresh API token for ``user``; any previous token stops working."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)


def token_revoke(*, user) -> bool:
    """Delete the user's token. Returns whether there was one."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0


# --- training runs ----------------------------------------------------------------------


def run_progress_report(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None = None,
    consumed_tokens: int | None = None,
):
    """A trainer's report (``POST /api/runs/{id}/progress/``): the contract of
    ``webapp.catalog.services.run_progress_record`` (one row per step, a retried step
    records nothing, the run never moves backwards, a registered run becomes running) in
    two statements, as every training step calls it. Samples, or only tokens: one sample
    is one record of ``seq_len`` trained tokens. Raises TrainingRun.DoesNotExist."""
    from django.db import connection
    from django.utils import timezone

    from webapp.catalog.models import MixtureComponent, Pool, RunProgress, TrainingRun
    from webapp.catalog.services import CatalogError

    if consumed_samples is None and consumed_tokens is None:
        raise CatalogError("give consumed_samples or consumed_tokens")
    if step < 0 or min(consumed_samples or 0, consumed_tokens or 0) < 0:
        raise CatalogError("step and consumed samples must be >= 0")
    run_t, prog_t = TrainingRun._meta.db_table, RunProgress._meta.db_table
    comp_t, pool_t = MixtureComponent._meta.db_table, Pool._meta.db_table
    fields = [f.attname for f in TrainingRun._meta.concrete_fields]
    cols = ", ".join(f"r.{connection.ops.quote_name(f)}" for f in fields)
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cur:
        # 1. Lock the run: reports of one run are serialized, so the "step recorded?" test
        #    below sees every committed report (RunProgress has no unique (run, step) key).
        cur.execute(
            f"SELECT {cols}, (SELECT max(p.seq_len) FROM {comp_t} c JOIN {pool_t} p"
            f" ON p.id = c.pool_id WHERE c.version_id = r.mixture_version_id)"
            f" FROM {run_t} r WHERE r.id = %s FOR UPDATE OF r",
            [run_id],
        )
        row = cur.fetchone()
        if row is None:
            raise TrainingRun.DoesNotExist(f"no run {run_id}")
        run = TrainingRun.from_db(connection.alias, fields, row[:-1])
        seq_len = row[-1] or 0
        if consumed_samples is None:
            if not seq_len:
                raise CatalogError("the run's mixture has no seq_len: report consumed_samples")
            consumed_samples = consumed_tokens // seq_len
        elif consumed_tokens is None:
            consumed_tokens = consumed_samples * seq_len
        # 2. Insert the report unless its step is recorded; move the run forward only for a
        #    new report at or after its last step. One round trip.
        insert = (
            f"INSERT INTO {prog_t} (run_id, step, consumed_samples, consumed_tokens,"
            f" reported_at) SELECT %s, %s, %s, %s, %s WHERE NOT EXISTS"
            f" (SELECT 1 FROM {prog_t} WHERE run_id = %s AND step = %s) RETURNING 1"
        )
        params = [run_id, step, consumed_samples, consumed_tokens, now, run_id, step]
        forward = step >= run.last_step
        state = TrainingRun.State.RUNNING if run.state == "registered" else run.state
        if forward:
            cur.execute(
                f"WITH ins AS ({insert}) UPDATE {run_t} SET last_step = %s,"
                f" consumed_samples = %s, consumed_tokens = %s, last_reported_at = %s,"
                f" state = %s WHERE id = %s AND EXISTS (SELECT 1 FROM ins)",
                [*params, step, consumed_samples, consumed_tokens, now, state, run_id],
            )
        else:
            cur.execute(insert, params)
        if forward and cur.rowcount == 1:
            run.last_step, run.last_reported_at, run.state = step, now, state
            run.consumed_samples, run.consumed_tokens = consumed_samples, consumed_tokens
    return run


# --- mixtures ---------------------------------------------------------------------------


def mixture_version_save(*, name: str, description: str, spec: dict, created_by=None):
    """Save the builder's spec (``builder.spec_from_rows``) as the next immutable version of
    mixture ``name`` (created when new), through the catalog's services: every stage with
    its token count, the ordering and its options, and the repetition cap go into the
    version's schedule."""
    from webapp.catalog.models import Mixture
    from webapp.catalog.services import mixture_create, mixture_version_create
    from webapp.dashboard.builder import version_components

    with transaction.atomic():
        mixture = Mixture.objects.filter(name=name).first() or mixture_create(
            name=name, description=description, created_by=created_by
        )
        return mixture_version_create(
            mixture_id=mixture.pk,
            components=version_components(spec),
            token_budget=int(spec["tokens"]),
            seed=int(spec.get("seed", 0)),
            stages=[
                {"name": st["name"], "tokens": int(st["tokens"])} for st in spec.get("stages") or []
            ],
            order=str(spec.get("order", "blend")),
            order_options=dict(spec.get("order_options") or {}),
            max_repetitions=float(spec.get("max_repetitions", 4.0)),
            note=description,
            created_by=created_by,
        )


# --- shuffle quality --------------------------------------------------------------------

QUALITY_MAX_DOCUMENTS = 1_000_000  # beyond this the page shows the build's report only
SHUFFLES_COMPARED = ("exact", "grid", "local", "buffer")


def pool_quality_compute(*, pool) -> dict:
    """The shuffle-quality report of a built pool, from its files: the pool's own order
    (per record, ``shardcore.quality.report``), and every registered shuffle run on the
    same documents in the same input order, measured per document. Labels: the tokenized
    source when the pool has several, else the document-length bin (log2 tokens).
    Cached by fingerprint (a built pool never changes). Empty when the files are absent."""
    from django.core.cache import cache

    key = f"dash:pool-quality:{pool.pk}:{pool.fingerprint}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    try:
        report = _pool_quality(pool.path)
    except Exception as e:  # noqa: BLE001 - a pool without readable files has no report
        import logging

        logging.getLogger(__name__).info("no quality for pool %s: %s", pool.pk, e)
        report = {}
    cache.set(key, report, timeout=7 * 24 * 3600)
    return report


def _pool_quality(path: str) -> dict:
    import numpy as np

    from shardcore import quality
    from shardcore.pool import Pool as PoolReader
    from shardcore.shuffle import SHUFFLES

    reader = PoolReader(path)
    docs = reader.documents
    if docs.num_rows > QUALITY_MAX_DOCUMENTS or docs.num_rows < 8:
        return {}
    source = docs.column("source").to_numpy(zero_copy_only=False)
    n_tokens = docs.column("n_tokens").to_numpy(zero_copy_only=False)
    by_source = len(np.unique(source)) > 1
    doc_labels = (
        source.astype(str)
        if by_source
        else np.char.add("2^", np.floor(np.log2(np.maximum(n_tokens, 1))).astype(int).astype(str))
    )
    record_docs = reader.main_documents()
    report = quality.report(doc_labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = "tokenized source" if by_source else "document length (tokens)"
    # The same documents in input order (source, input shard, row): what every shuffle
    # reads; input shards give the per-shard counts the shuffles plan with.
    shard = docs.column("source_shard").to_numpy(zero_copy_only=False)
    row = docs.column("source_row").to_numpy(zero_copy_only=False)
    order = np.lexsort((row, shard, source))
    labels_in = doc_labels[order]
    pairs = np.stack([source[order], shard[order]], axis=1)
    change = np.concatenate([[True], np.any(pairs[1:] != pairs[:-1], axis=1)])
    counts = np.diff(np.concatenate([np.flatnonzero(change), [len(order)]]))
    by_shuffle = {}
    for name in SHUFFLES_COMPARED:
        module = SHUFFLES[name]
        buckets = module.num_buckets(counts, max(2, len(counts)))
        perm = module.permutation(counts, 1234, buckets)
        by_shuffle[name] = {"windows": quality.window_deviation(labels_in[perm])}
    report["by_shuffle"] = by_shuffle
    return report
