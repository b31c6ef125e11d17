"""The API's errors: DRF's, and a read of the catalog that finds no row
(``webapp.catalog.selectors.NotFound``) as a 404 with its message."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from webapp.catalog.selectors import NotFound


def exception_handler(exc, context):
    if isinstance(exc, NotFound):
        exc = exceptions.NotFound(str(exc))
    return drf_exception_handler(exc, context)
