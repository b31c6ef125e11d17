"""Jobs name their recorder by dotted path; the catalog's services are one module per
entity, so the recorders of jobs recorded before have new paths."""

from django.db import migrations

MOVED = {
    "webapp.catalog.services.tokenized_source_record": (
        "webapp.catalog.services.tokenized.tokenized_source_record"
    ),
    "webapp.catalog.services.pool_record": "webapp.catalog.services.pools.pool_record",
    "webapp.catalog.services.mixture_materialized_record": (
        "webapp.catalog.services.exports.mixture_materialized_record"
    ),
}


def forward(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    for old, new in MOVED.items():
        Job.objects.filter(recorder=old).update(recorder=new)


def backward(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    for old, new in MOVED.items():
        Job.objects.filter(recorder=new).update(recorder=old)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0005_run_losses"), ("jobs", "0002_unit_heartbeat")]
    operations = [migrations.RunPython(forward, backward)]
