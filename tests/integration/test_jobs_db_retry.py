"""A dropped database connection is retried wherever it surfaces: as Django's error, or as
the driver's own where Django lets it through unwrapped (closing the server-side cursor of
``.iterator()`` after the server terminated the session)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError

from webapp.jobs.common import transient_errors, with_db_retry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.OperationalError("the connection is lost"),
        OperationalError("server closed the connection unexpectedly"),
    ],
)
def test_a_dropped_connection_is_retried_whoever_raises_it(error, settings):
    settings.SHARDYARD_DB_RETRIES = 3
    calls: list[list[str]] = []

    def read(errors: list[str]) -> str:
        calls.append(list(errors))
        if len(calls) == 1:
            raise error
        return "read"

    assert with_db_retry("reading", read) == "read"
    assert len(calls) == 2 and calls[1][0].startswith(type(error).__name__)
    assert isinstance(error, transient_errors())


def test_another_error_is_not_retried():
    def read(errors: list[str]) -> str:
        raise psycopg.errors.UniqueViolation("duplicate key")

    with pytest.raises(psycopg.errors.UniqueViolation):
        with_db_retry("reading", read)
