from django.db import migrations


class Migration(migrations.Migration):
    """Joins three independent 0011 migrations (annotations, export choices, facts)."""

    dependencies = [
        ("catalog", "0011_annotation"),
        ("catalog", "0011_export_choices"),
        ("catalog", "0011_facts"),
    ]

    operations = []
