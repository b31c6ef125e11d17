"""The demo: the local CPython standard library as four sources, tokenized, pooled and
mixed by the real job engine, so that a newcomer's first ``make run`` shows every page
with real data. Every step is idempotent: a rerun resumes where the last one stopped."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from shardcore.demo import build_demo_corpus
from webapp.catalog.models import (
    ArtifactStatus,
    Mixture,
    MixtureVersion,
    Pool,
    Source,
    TokenizedSource,
)
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build

PREFIX = "demo-"
# source -> (pool name, mixture weight in the main stage, weight in the annealing stage)
MIX = {
    "stdlib-code": ("demo-code", 0.45, 0.0),
    "stdlib-tests": ("demo-tests", 0.15, 0.0),
    "docstrings": ("demo-docstrings", 0.25, 0.6),
    "reference": ("demo-reference", 0.15, 0.4),
}
PROPERTIES = ["kind", "lang", "package", "license", "path"]


class DemoError(RuntimeError):
    pass


def demo_load(
    *,
    max_bytes_per_source: int | None = 4_000_000,
    seq_len: int = 512,
    token_budget: int = 2_000_000,
    wait: float = 1800.0,
    log: Callable[[str], None] = print,
) -> Mixture:
    """Register, tokenize, pool and mix the demo corpus; returns the demo mixture."""

    root = next(Path(r) for r in settings.SOURCE_ROOTS if not isinstance(r, str)) / "demo"
    if not (root / "reference" / "reference.parquet").exists():
        log(f"writing the demo corpus (the CPython standard library) to {root} ...")
        build_demo_corpus(root, max_bytes_per_source=max_bytes_per_source)

    sources = {}
    for name in MIX:
        source = Source.objects.filter(name=PREFIX + name).first()
        if source is None:
            log(f"registering source {PREFIX + name}")
            source = source_register(
                name=PREFIX + name,
                uri=str(root / name),
                metadata_fields=PROPERTIES,
                description=f"Demo: {name} of the local CPython standard library",
            )
        sources[name] = source

    tokenized = {}
    for name, source in sources.items():
        ts = _usable(TokenizedSource.objects.filter(source=source))
        if ts is None:
            log(f"tokenizing {source.name}")
            ts = tokenized_source_build(source_id=source.pk)
        tokenized[name] = ts
    _wait_ready(TokenizedSource, [t.pk for t in tokenized.values()], wait, log)

    pools = {}
    for name, (pool_name, _w, _a) in MIX.items():
        pool = _usable(Pool.objects.filter(name=pool_name))
        if pool is None:
            log(f"building pool {pool_name}")
            pool = pool_build(
                name=pool_name,
                tokenized_ids=[tokenized[name].pk],
                seq_len=seq_len,
                shuffle="exact",
                seed=1,
                val_fraction=0.02,
                memory=64 << 20,
                shard_size=4 << 20,
            )
        pools[name] = pool
    _wait_ready(Pool, [p.pk for p in pools.values()], wait, log)

    mixture = mixture_get_or_create(
        name="demo", description="Code, tests, docstrings and the language reference"
    )
    if not mixture.versions.exists():
        # A small demo corpus cannot fill the default budget: cap it at the pools' tokens so
        # that no pool repeats more than a few times (the repetition guard stays on).
        for pool in pools.values():
            pool.refresh_from_db()
        available = sum(p.num_tokens for p in pools.values())
        token_budget = max(seq_len * 64, min(token_budget, available))
        log(f"creating mixture demo v1 ({token_budget:,} tokens)")
        components = [{"pool": pools[n].pk, "weight": w} for n, (_p, w, _a) in MIX.items()]
        components += [
            {"pool": pools[n].pk, "weight": a, "stage": "anneal"}
            for n, (_p, _w, a) in MIX.items()
            if a > 0
        ]
        version = mixture_version_create(
            mixture_id=mixture.pk,
            components=components,
            token_budget=token_budget,
            seed=7,
            stages=[{"name": "anneal", "tokens": token_budget // 10}],
            order="blend",
            note="The demo mixture: a main stage and a final annealing stage on prose.",
        )
        _wait_ready(MixtureVersion, [version.pk], wait, log)
    log("demo ready")
    return mixture


def _usable(queryset):
    """The newest artifact that is ready or still building; failed ones are rebuilt."""
    return (
        queryset.filter(status__in=[ArtifactStatus.READY, ArtifactStatus.BUILDING])
        .order_by("-pk")
        .first()
    )


def _wait_ready(model, pks: list[int], wait: float, log: Callable[[str], None]) -> None:
    deadline = time.monotonic() + wait
    announced = False
    while True:
        rows = list(model.objects.filter(pk__in=pks).values_list("pk", "status"))
        failed = [
            pk for pk, status in rows if status in (ArtifactStatus.FAILED, ArtifactStatus.CANCELLED)
        ]
        if failed:
            raise DemoError(f"{model.__name__} {failed} failed: see the job pages")
        if all(status == ArtifactStatus.READY for _pk, status in rows):
            return
        if time.monotonic() > deadline:
            raise DemoError(
                f"{model.__name__} {pks} not ready after {wait:g}s: is a worker running?"
            )
        if not announced:
            log(
                f"waiting for {len(pks)} {model._meta.verbose_name_plural} to be built by the worker ..."
            )
            announced = True
        time.sleep(1.0)
