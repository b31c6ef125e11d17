"""The storage report in the JSON API (``/api/storage/``): the same numbers as the page,
for any signed-in user or API token (a viewer)."""

from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.ops.storage import storage_report
from webapp.roles import require_role


class StorageView(APIView):
    def get(self, request):

        require_role(request.user, "viewer")
        return Response(storage_report())
