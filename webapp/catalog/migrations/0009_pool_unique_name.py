"""A pool's name names one pool of its split (failed and cancelled builds free theirs).
Pools built before under a name another pool already had keep the first (lowest id) as it
is; each later one is renamed ``<name>-<id>`` (its held-out slice ``<name>-<id>-val``), so
every existing pool stays reachable under a name of its own."""

from django.db import migrations, models
from django.db.models import Count, Q

DEAD = ["failed", "cancelled"]


def rename_duplicates(apps, schema_editor):
    Pool = apps.get_model("catalog", "Pool")
    live = Pool.objects.exclude(status__in=DEAD)
    taken = set(live.values_list("name", "split"))

    def free(name: str, split: str) -> str:
        candidate, n = name, 1
        while (candidate, split) in taken:
            n += 1
            candidate = f"{name}-{n}"
        taken.add((candidate, split))
        return candidate

    doubled = (
        live.filter(split="train").values("name").annotate(n=Count("id")).filter(n__gt=1)
    ).order_by()
    for row in doubled:
        pools = list(live.filter(name=row["name"], split="train").order_by("pk"))
        for pool in pools[1:]:
            name = free(f"{pool.name}-{pool.pk}", "train")
            Pool.objects.filter(pk=pool.pk).update(name=name)
            Pool.objects.filter(train_pool_id=pool.pk).update(name=free(f"{name}-val", "val"))
    # Held-out slices whose names still collide (a train pool named like another's slice).
    doubled = (
        live.filter(split="val").values("name").annotate(n=Count("id")).filter(n__gt=1)
    ).order_by()
    for row in doubled:
        for pool in list(live.filter(name=row["name"], split="val").order_by("pk"))[1:]:
            Pool.objects.filter(pk=pool.pk).update(name=free(f"{pool.name}-{pool.pk}", "val"))


class Migration(migrations.Migration):
    dependencies = [("catalog", "0008_run_progress_once_per_step")]

    operations = [
        migrations.RunPython(rename_duplicates, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="pool",
            constraint=models.UniqueConstraint(
                condition=~Q(status__in=DEAD),
                fields=("name", "split"),
                name="pool_unique_name",
            ),
        ),
    ]
