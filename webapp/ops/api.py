"""The storage report in the JSON API (``/api/storage/``): the newest measurement, the same
numbers as the page, with when it was measured and its age, for any signed-in user or API
token (a viewer); an editor's POST queues a new measurement (202). Nothing is measured on
the request (a worker's task measures)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.ops.storage import storage_latest, storage_measure_request
from webapp.roles import require_role


def _iso(value):
    return value.isoformat() if value else None


class StorageView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):

        require_role(request.user, "viewer")
        latest = storage_latest()
        return Response(
            {
                **latest["report"],
                "measured_at": _iso(latest["measured_at"]),
                "age_seconds": latest["age_seconds"],
                "measuring": latest["measuring"],
                "last_error": latest["last_error"],
                "last_error_at": _iso(latest["last_error_at"]),
            }
        )

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT})
    def post(self, request):

        require_role(request.user, "editor")
        row = storage_measure_request(requested_by=request.user)
        return Response(
            {"measurement": row.pk, "state": row.state, "queued_at": _iso(row.created_at)},
            status=status.HTTP_202_ACCEPTED,
        )
