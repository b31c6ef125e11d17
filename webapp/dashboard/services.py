"""Writes of the dashboard's own: users, roles and API tokens. Catalog and job writes are
the services of webapp.catalog and webapp.jobs; the views call those directly."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from webapp.roles import ROLES


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


# --- shuffle quality --------------------------------------------------------------------

QUALITY_MAX_DOCUMENTS = 1_000_000  # beyond this the page shows the build's report only
SHUFFLES_COMPARED = ("exact", "grid", "local", "buffer")


def pool_quality_compute(*, pool, by: str = "") -> dict:
    """The shuffle-quality report of a built pool, from its files: the pool's own order
    (per record, ``shardcore.quality.report``), and every registered shuffle run on the
    same documents in the same input order, measured per document. Labels: the tokenized
    source when the pool has several, else the document-length bin (log2 tokens).
    Cached by fingerprint (a built pool never changes). Empty when the files are absent."""
    from django.core.cache import cache

    from webapp.catalog.models import TokenizedSource

    key = f"dash:pool-quality:v4:{pool.pk}:{pool.fingerprint}:{by}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    # Label documents by their source's name, in the pool manifest's source order.
    names = dict(TokenizedSource.objects.filter(pools=pool).values_list("path", "source__name"))
    try:
        report = _pool_quality(pool.path, source_names=names, by=by)
    except Exception as e:  # noqa: BLE001 - a pool without readable files has no report
        import logging

        logging.getLogger(__name__).info("no quality for pool %s: %s", pool.pk, e)
        report = {}
    cache.set(key, report, timeout=7 * 24 * 3600)
    return report


def version_quality_compute(*, version) -> dict:
    """A built version's schedule quality measured from its files (for versions whose
    build did not record one), cached by fingerprint."""
    from django.core.cache import cache

    from webapp.catalog.services.mixtures import schedule_quality

    key = f"dash:version-quality:v1:{version.pk}:{version.fingerprint}"
    cached = cache.get(key)
    if cached is None:
        cached = schedule_quality(path=version.path)
        cache.set(key, cached, timeout=7 * 24 * 3600)
    return cached


def _pool_quality(path: str, *, source_names: dict[str, str] | None = None, by: str = "") -> dict:
    import numpy as np

    from shardcore import quality
    from shardcore.pool import PoolReader
    from shardcore.shuffle import SHUFFLES

    reader = PoolReader(path)
    docs = reader.documents
    if docs.num_rows > QUALITY_MAX_DOCUMENTS or docs.num_rows < 8:
        return {}
    source = docs.column("source").to_numpy(zero_copy_only=False)
    n_tokens = docs.column("n_tokens").to_numpy(zero_copy_only=False)
    by_source = len(np.unique(source)) > 1
    paths = [s["path"] for s in reader.manifest.get("sources", [])]
    names = np.array([(source_names or {}).get(p, str(k)) for k, p in enumerate(paths)])
    if by and by != "length":
        values = reader.document_values(by)  # InputError names an unknown property
        doc_labels = np.array(["(absent)" if v is None else str(v) for v in values.tolist()])
        label = by
    elif by_source and by != "length":
        doc_labels = names[source] if len(names) > int(source.max()) else source.astype(str)
        label = "tokenized source"
    else:
        bins = np.floor(np.log2(np.maximum(n_tokens, 1))).astype(int)
        doc_labels = np.array([f"{2**b:,}-{2 ** (b + 1) - 1:,} tokens" for b in bins.tolist()])
        label = "document length (tokens)"
    record_docs = reader.main_documents()
    report = quality.report(doc_labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = label
    # The reference: uniform random permutations of the same documents, packed alike.
    windows = report["windows"]
    bos = int(bool(reader.manifest.get("params", {}).get("bos")))
    ref = quality.document_shuffle_reference(
        doc_labels, n_tokens.astype(np.int64) + bos, int(reader.manifest["seq_len"]),
        windows["window_sizes"], trials=8, seed=1234,
    )  # fmt: skip
    report["reference"] = ref
    report["verdict"] = quality.verdict(windows["window_sizes"], windows["max_all"], ref["mean"])
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
