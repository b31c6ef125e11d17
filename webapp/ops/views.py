"""The overview page."""

from django.shortcuts import render

from webapp.ops.selectors import heartbeat_recent


def home(request):
    return render(request, "ops/home.html", {"heartbeats": heartbeat_recent(limit=10)})
