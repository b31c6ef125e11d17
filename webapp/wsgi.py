"""WSGI entry point for gunicorn: ``gunicorn webapp.wsgi``."""

import gc
import os
from pathlib import Path

from django.core.wsgi import get_wsgi_application
from django.template import engines
from django.template.backends.django import DjangoTemplates
from django.urls import URLResolver, get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()


def _warm(resolver: URLResolver) -> None:
    """What the first request a fresh process answers would otherwise build: every view
    and what it imports (the URLconf), the reverse map of every namespace (each link a
    page prints) and the project's templates, compiled into the cached loader."""
    stack = [resolver]
    while stack:
        r = stack.pop()
        r.reverse_dict  # noqa: B018 - the access builds the namespace's reverse map
        stack += [p for p in r.url_patterns if isinstance(p, URLResolver)]
    engine = engines["django"]
    if not isinstance(engine, DjangoTemplates):
        return  # another template backend: its templates are not ours to compile
    for root in map(Path, engine.engine.dirs):
        for path in sorted(root.rglob("*.html")):
            engine.get_template(path.relative_to(root).as_posix())


# Loaded now, as the worker starts, not by the first request it answers (that request
# would wait for the imports, the reverse maps and the templates).
_warm(get_resolver())
# What is loaded stays for the process's life: out of the collector's sight, so that a
# full collection (run by whichever request allocates past its threshold) scans only
# what requests made, not every object of the imports (tens of ms on a cold page).
gc.collect()
gc.freeze()
