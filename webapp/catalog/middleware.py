"""Around every page and API request: what its reads found missing (a fact never measured,
a taint whose task was lost) is asked for once the view has answered
(``services.facts.fact_requests``), so the reads themselves never write."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from webapp.catalog.services.facts import fact_requests


class FactRequestsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        with fact_requests():
            return self.get_response(request)
