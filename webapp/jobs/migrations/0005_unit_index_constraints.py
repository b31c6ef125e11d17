"""Units are listed by their position in the plan (step 3 of 3)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0004_split_plans"),
    ]

    operations = [
        migrations.AlterField(
            model_name="jobunit",
            name="index",
            field=models.PositiveIntegerField(),
        ),
        migrations.AlterModelOptions(
            name="jobunit",
            options={"ordering": ["job", "index"]},
        ),
        migrations.AddConstraint(
            model_name="jobunit",
            constraint=models.UniqueConstraint(
                fields=("job", "index"), name="jobunit_index_per_job"
            ),
        ),
        migrations.AddIndex(
            model_name="jobunit",
            index=models.Index(
                condition=models.Q(("state", "running")), fields=["job"], name="jobunit_running"
            ),
        ),
        migrations.AddIndex(
            model_name="jobunit",
            index=models.Index(
                condition=models.Q(("bad_lines__gt", 0)), fields=["job"], name="jobunit_bad_input"
            ),
        ),
    ]
