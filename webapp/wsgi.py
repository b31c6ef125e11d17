"""WSGI entry point for gunicorn: ``gunicorn webapp.wsgi``."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()
# Every view and what it imports loaded now, as the process starts, not by the first
# request a fresh worker answers (a page's first answer would wait seconds for imports).
get_resolver().url_patterns  # noqa: B018 - the access loads the URLconf
