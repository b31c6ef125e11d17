"""Migration 0007 gives stored jobs their recorder's name for the dotted path they held,
whichever path it was (before or after the catalog's services were split by entity);
backwards, each name becomes its function's path. A job without a recorder keeps none."""

from __future__ import annotations

import pytest

from tests.support.migrations import migrate_to, schema_at

pytestmark = [pytest.mark.services]

BEFORE = [("jobs", "0006_dispatch_and_sweep_turns")]
AFTER = [("jobs", "0007_recorder_names")]

STORED = {
    "webapp.catalog.services.tokenized_source_record": "tokenized",
    "webapp.catalog.services.tokenized.tokenized_source_record": "tokenized",
    "webapp.catalog.services.pool_record": "pool",
    "webapp.catalog.services.pools.pool_record": "pool",
    "webapp.catalog.services.pools.pool_planned": "pool.planned",
    "webapp.catalog.services.mixtures.mixture_version_record": "mixture.version",
    "webapp.catalog.services.mixture_materialized_record": "mixture.materialized",
    "webapp.catalog.services.exports.mixture_materialized_record": "mixture.materialized",
    "webapp.catalog.services.annotations.annotation_record": "annotation",
    "webapp.catalog.services.annotation_groups.annotation_group_record": "annotation.groups",
    "webapp.catalog.scrub.scrub_record": "scrub",
    "": "",
}
CURRENT = {
    "tokenized": "webapp.catalog.services.tokenized.tokenized_source_record",
    "pool": "webapp.catalog.services.pools.pool_record",
    "pool.planned": "webapp.catalog.services.pools.pool_planned",
    "mixture.version": "webapp.catalog.services.mixtures.mixture_version_record",
    "mixture.materialized": "webapp.catalog.services.exports.mixture_materialized_record",
    "annotation": "webapp.catalog.services.annotations.annotation_record",
    "annotation.groups": "webapp.catalog.services.annotation_groups.annotation_group_record",
    "scrub": "webapp.catalog.scrub.scrub_record",
    "": "",
}


@pytest.fixture
def old_schema(transactional_db):
    with schema_at(BEFORE) as apps:
        yield apps


def test_it_names_every_stored_recorder_path_and_back(postgres, old_schema):
    Job = old_schema.get_model("jobs", "Job")
    jobs = {
        path: Job.objects.create(kind="tokenize", plan={}, output_dir=f"/out/{i}", recorder=path).pk
        for i, path in enumerate(STORED)
    }

    apps = migrate_to(AFTER)
    stored = dict(apps.get_model("jobs", "Job").objects.values_list("pk", "recorder"))
    assert {path: stored[pk] for path, pk in jobs.items()} == STORED
    assert not any(value.startswith("webapp.") for value in stored.values())

    apps = migrate_to(BEFORE)
    stored = dict(apps.get_model("jobs", "Job").objects.values_list("pk", "recorder"))
    assert {path: stored[pk] for path, pk in jobs.items()} == {
        path: CURRENT[name] for path, name in STORED.items()
    }
