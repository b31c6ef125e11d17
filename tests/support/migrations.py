"""Migrating the test database to a named state and back, for tests of a data migration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(targets):
    """The database migrated to ``targets`` ([(app, migration)]); the apps of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@contextmanager
def schema_at(targets) -> Iterator:
    """The apps of the state ``targets``, the database migrated there; back to the latest
    after."""
    try:
        yield migrate_to(targets)
    finally:
        migrate_to(MigrationExecutor(connection).loader.graph.leaf_nodes())
