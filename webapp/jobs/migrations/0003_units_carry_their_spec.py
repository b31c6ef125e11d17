"""Each unit row carries its spec and its position in the plan; the Job row keeps only the
plan's header and counts the units left in its phase (schema, step 1 of 3)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0002_unit_heartbeat"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="phase_left",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobunit",
            name="index",
            field=models.PositiveIntegerField(null=True),
        ),
        migrations.AddField(
            model_name="jobunit",
            name="spec",
            field=models.JSONField(default=dict),
        ),
        migrations.AddField(
            model_name="jobunit",
            name="bad_lines",
            field=models.BigIntegerField(default=0),
        ),
    ]
