"""The control host's side of the many-hosts test: registers a source through the catalog's
services, as the web app does, and launches a tokenize job of it through the job engine,
against the catalog and broker given by DATABASE_URL and CELERY_BROKER_URL, writing the
artifact to OUT (an s3:// prefix). Prints the job as JSON.

    python -m tests.multihost.control NAME URI SHARD_SIZE UNIT_BYTES OUT
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    name, uri, shard_size, unit_bytes, out = argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from shardcore.tokenize import plan_tokenize
    from webapp.catalog.services.sources import source_file_urls, source_register
    from webapp.jobs.services import job_create

    source = source_register(name=name, uri=uri)
    files = [url for _rel, url, _size in source_file_urls(source=source)]
    plan = plan_tokenize(files, out, shard_size=int(shard_size), unit_bytes=int(unit_bytes))
    job = job_create(plan=plan, title=f"tokenize {name} into {out}")
    print(json.dumps({"job": job.pk, "path": out, "files": files}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
