import zlib

import django.db.models.deletion
import numpy as np
from django.db import migrations, models

RUN = 1 << 16


def _to_runs(apps, schema_editor):
    """Each flag's JSON list of document indices becomes its runs (the encoding of
    webapp.catalog.flag_documents, spelled here as it is at this migration)."""
    Flag = apps.get_model("catalog", "Flag")
    FlagDocuments = apps.get_model("catalog", "FlagDocuments")
    for flag in Flag.objects.exclude(document_ids=[]).iterator(chunk_size=16):
        ids = np.unique(np.asarray(flag.document_ids, dtype=np.int64))
        for a in range(0, int(ids.size), RUN):
            part = ids[a : a + RUN]
            deltas = np.diff(part, prepend=part[:1]).astype("<u8")
            FlagDocuments.objects.create(
                flag=flag,
                first=int(part[0]),
                last=int(part[-1]),
                count=int(part.size),
                data=zlib.compress(deltas.tobytes(), 1),
            )
        flag.num_documents = int(ids.size)
        flag.save(update_fields=["num_documents"])


def _to_lists(apps, schema_editor):
    Flag = apps.get_model("catalog", "Flag")
    FlagDocuments = apps.get_model("catalog", "FlagDocuments")
    for flag in Flag.objects.filter(num_documents__isnull=False).iterator(chunk_size=16):
        ids: list[int] = []
        for run in FlagDocuments.objects.filter(flag=flag).order_by("first"):
            deltas = np.frombuffer(zlib.decompress(bytes(run.data)), dtype="<u8")
            ids += (np.cumsum(deltas.astype(np.int64)) + run.first).tolist()
        flag.document_ids = ids
        flag.save(update_fields=["document_ids"])


class Migration(migrations.Migration):
    """A flag's document indices move from one JSON list on its row to FlagDocuments, a
    compressed run of up to 65,536 a row; the row keeps their count."""

    dependencies = [
        ("catalog", "0014_flag_where"),
    ]

    operations = [
        migrations.CreateModel(
            name="FlagDocuments",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("first", models.BigIntegerField()),
                ("last", models.BigIntegerField()),
                ("count", models.IntegerField()),
                ("data", models.BinaryField()),
                (
                    "flag",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="document_runs",
                        to="catalog.flag",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("flag", "first"), name="flag_documents_unique")
                ],
                "indexes": [models.Index(fields=["flag", "last"], name="flag_documents_last")],
            },
        ),
        migrations.AddField(
            model_name="flag",
            name="num_documents",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(_to_runs, _to_lists),
        migrations.RemoveField(model_name="flag", name="document_ids"),
    ]
