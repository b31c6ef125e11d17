"""Jobs name their recorder by its registered name (``webapp.jobs.recorders``) instead of
the dotted import path of its function: every path ever stored becomes its name, the ones
from before the catalog's services were split by entity (catalog 0006 moved those) too.
Backwards, a name becomes the path its function has now.

The table is written out here, not read from the registry: a migration must mean the same
whatever the code around it becomes."""

from django.db import migrations

# Dotted path once stored -> name.
NAMES = {
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
}

# Name -> the path of its function when the names came in.
PATHS = {
    "tokenized": "webapp.catalog.services.tokenized.tokenized_source_record",
    "pool": "webapp.catalog.services.pools.pool_record",
    "pool.planned": "webapp.catalog.services.pools.pool_planned",
    "mixture.version": "webapp.catalog.services.mixtures.mixture_version_record",
    "mixture.materialized": "webapp.catalog.services.exports.mixture_materialized_record",
    "annotation": "webapp.catalog.services.annotations.annotation_record",
    "annotation.groups": "webapp.catalog.services.annotation_groups.annotation_group_record",
    "scrub": "webapp.catalog.scrub.scrub_record",
}


def _rename(apps, table: dict[str, str]) -> None:
    Job = apps.get_model("jobs", "Job")
    for old, new in table.items():
        Job.objects.filter(recorder=old).update(recorder=new)


def forward(apps, schema_editor):
    _rename(apps, NAMES)


def backward(apps, schema_editor):
    _rename(apps, PATHS)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_dispatch_and_sweep_turns")]
    operations = [migrations.RunPython(forward, backward)]
