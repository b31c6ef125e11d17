"""The trainer role: a training job's token registers runs and reports progress."""

from django.db import migrations


def create_role(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="trainer")


def delete_role(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="trainer", user__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0001_roles")]
    operations = [migrations.RunPython(create_role, delete_role)]
