"""The control host's side of the many-hosts test: registers a source and launches a
tokenize job through the catalog's services, as the web app does, against the catalog
and broker given by DATABASE_URL and CELERY_BROKER_URL. Prints the job as JSON.

    python -m tests.multihost.control NAME URI SHARD_SIZE UNIT_BYTES
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    name, uri, shard_size, unit_bytes = argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.catalog.services.sources import source_file_urls, source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    source = source_register(name=name, uri=uri)
    ts = tokenized_source_build(
        source_id=source.pk, shard_size=int(shard_size), unit_bytes=int(unit_bytes)
    )
    files = [url for _rel, url, _size in source_file_urls(source=source)]
    print(json.dumps({"job": ts.job_id, "path": ts.path, "files": files}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
