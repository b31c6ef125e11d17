"""One progress report per (run, step), enforced by the database. Concurrent reports of one
step could each record a row before; the first row of each step (the lowest id: the first
inserted) is kept, the others are deleted, and a run whose latest step lost rows reads that
step's kept counts."""

from django.db import migrations, models
from django.db.models import Count, Min


def keep_first_report(apps, schema_editor):
    RunProgress = apps.get_model("catalog", "RunProgress")
    TrainingRun = apps.get_model("catalog", "TrainingRun")
    doubled = (
        RunProgress.objects.values("run_id", "step")
        .annotate(n=Count("id"), first=Min("id"))
        .filter(n__gt=1)
        .order_by()
    )
    for row in doubled.iterator():
        RunProgress.objects.filter(run_id=row["run_id"], step=row["step"]).exclude(
            pk=row["first"]
        ).delete()
        kept = RunProgress.objects.get(pk=row["first"])
        TrainingRun.objects.filter(pk=row["run_id"], last_step=row["step"]).update(
            consumed_samples=kept.consumed_samples, consumed_tokens=kept.consumed_tokens
        )


class Migration(migrations.Migration):
    dependencies = [("catalog", "0007_run_segments")]

    operations = [
        migrations.RunPython(keep_first_report, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="runprogress",
            constraint=models.UniqueConstraint(
                fields=("run", "step"), name="run_progress_once_per_step"
            ),
        ),
    ]
