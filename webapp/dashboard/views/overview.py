"""The overview: what exists, what runs, what is tainted, which workers answer."""

from django.shortcuts import render

from webapp.dashboard import contexts


def home(request):
    return render(request, "dashboard/home.html", contexts.overview())
