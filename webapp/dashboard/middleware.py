"""A read of the catalog that finds no row (``webapp.catalog.selectors.NotFound``) is a
404 page, whichever view asked."""

from __future__ import annotations

from django.http import Http404

from webapp.catalog.selectors import NotFound


class NotFoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, NotFound):
            raise Http404(str(exception)) from exception
        return None
