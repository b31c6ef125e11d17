"""Request-wide rules of the pages and the API: a read of the catalog that finds no row
(``webapp.catalog.selectors.NotFound``) is a 404 page, whichever view asked; the checked
local copies of remote artifacts a request reads are in use only while it runs."""

from __future__ import annotations

from django.http import Http404

from shardcore import storage
from webapp.catalog.selectors import NotFound


class ArtifactScopeMiddleware:
    """A request that reads an artifact on object storage reads it from a checked local
    copy (``shardcore.storage.local_artifact``); the copy is released when the request ends,
    so a long-running web process never keeps copies from eviction
    (``SHARDYARD_ARTIFACT_CACHE_LIMIT``)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with storage.artifact_scope():
            return self.get_response(request)


class NotFoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, NotFound):
            raise Http404(str(exception)) from exception
        return None
