"""A request under /api/ that the URL map does not match (an id that is not a bigint, a
misspelt collection) answers a JSON 404 like every other API error, never Django's HTML
page."""

from __future__ import annotations

from django.http import JsonResponse

BIGINT_MAX = 2**63 - 1


class ApiNotFoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 404
            and request.path.startswith("/api/")
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return JsonResponse(
                {"detail": f"not found: {request.path} (ids are integers from 1 to {BIGINT_MAX})"},
                status=404,
            )
        return response
