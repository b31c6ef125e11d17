"""The data migration that forgets a tokenized source's stored statistics listing only
each property's most common values (their page took shares of those alone): they are
asked for again by the next read; statistics with the rest summed, and other facts, stay."""

import pytest

from tests.support.migrations import migrate_to, schema_at

pytestmark = [pytest.mark.services]

BEFORE = [("catalog", "0017_decon")]
AFTER = [("catalog", "0018_source_stats_others")]


@pytest.fixture
def old_schema(transactional_db):
    with schema_at(BEFORE) as apps:
        yield apps


def test_the_migration_forgets_statistics_without_the_rest(old_schema):
    Fact = old_schema.get_model("catalog", "Fact")
    top_only = {"by_property": {"path": {"a.py": {"documents": 1}}}, "edges": [], "counts": []}
    whole = {**top_only, "others": {"path": {"values": 3, "documents": 3}}}
    old = Fact.objects.create(kind="source_stats", object_id=1, state="ready", value=top_only)
    new = Fact.objects.create(kind="source_stats", object_id=2, state="ready", value=whole)
    other = Fact.objects.create(kind="version_epochs", object_id=1, state="ready", value=[])

    apps = migrate_to(AFTER)
    kept = set(apps.get_model("catalog", "Fact").objects.values_list("pk", flat=True))
    assert kept == {new.pk, other.pk} and old.pk not in kept
