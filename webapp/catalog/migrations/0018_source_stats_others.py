from django.db import migrations


def _forget_stats_without_others(apps, schema_editor):
    """A tokenized source's stored statistics listed each property's 30 most common values
    only, so its page took shares of those 30: they are measured again (asked for by the
    next read of the page) with the rest summed in ``others``."""
    Fact = apps.get_model("catalog", "Fact")
    stale = [
        pk
        for pk, value in Fact.objects.filter(kind="source_stats").values_list("pk", "value")
        if not isinstance(value, dict) or "others" not in value
    ]
    Fact.objects.filter(pk__in=stale).delete()


class Migration(migrations.Migration):
    dependencies = [("catalog", "0017_decon")]

    operations = [migrations.RunPython(_forget_stats_without_others, migrations.RunPython.noop)]
