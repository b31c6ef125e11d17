"""Request-wide rules of the pages and the API: a read of the catalog that finds no row
(``webapp.catalog.selectors.NotFound``) is a 404 page, whichever view asked; the checked
local copies of remote artifacts a request reads are in use only while it runs; an object
store that does not answer is a 503 that says so, never a traceback."""

from __future__ import annotations

import os

from django.http import Http404, JsonResponse
from django.shortcuts import render

from shardcore import storage
from shardcore.storage import artifact_cache
from webapp.catalog.selectors import NotFound


class ArtifactScopeMiddleware:
    """A request that reads an artifact on object storage reads it from a checked local
    copy (``shardcore.storage.artifact_cache.local_artifact``); the copy is released when the request ends,
    so a long-running web process never keeps copies from eviction
    (``SHARDYARD_ARTIFACT_CACHE_LIMIT``).

    A store that stops answering costs a request one bounded wait
    (``SHARDYARD_S3_*_TIMEOUT`` x ``SHARDYARD_S3_ATTEMPTS``): after it, the request's
    other reads fail at once (``shardcore.storage.fail_fast``), and a read-only request
    that met it answers 503 naming the endpoint even where a reader caught the error and
    rendered without the data."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with artifact_cache.artifact_scope(), storage.fail_fast():
            response = self.get_response(request)
            failure = storage.store_failure()
        if failure is not None and request.method in ("GET", "HEAD") and response.status_code < 500:
            return self._unavailable(request, failure)
        return response

    def process_exception(self, request, exception):
        if not storage.is_store_error(exception):
            return None
        return self._unavailable(request, exception)

    def _unavailable(self, request, exception):
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
        detail = (
            f"the object store ({endpoint}) did not answer: {exception}. Check that it is "
            "reachable, the bucket exists and the AWS_* credentials are right"
        )
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=503)
        return render(request, "503.html", {"detail": detail}, status=503)


class NotFoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, NotFound):
            raise Http404(str(exception)) from exception
        return None
