"""The control host's side of the many-hosts test: what a user's web app does, through the
catalog's services, against the catalog, broker and data root given by DATABASE_URL,
CELERY_BROKER_URL and SHARDYARD_DATA (an s3:// prefix). The catalog chooses where each
artifact goes (a fresh location under the data root) and records it on the row. Prints the
row's id, location and job as JSON.

    python -m tests.multihost.control tokenize NAME URI SHARD_SIZE UNIT_BYTES
    python -m tests.multihost.control pool NAME TOKENIZED_ID SEQ_LEN SHARD_SIZE
"""

from __future__ import annotations

import json
import os
import sys


def tokenize(name: str, uri: str, shard_size: str, unit_bytes: str) -> dict:
    """Register the files at ``uri`` as a source and start its tokenized source's build."""
    from webapp.catalog.services.sources import source_file_urls, source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    source = source_register(name=name, uri=uri)
    built = tokenized_source_build(
        source_id=source.pk, shard_size=int(shard_size), unit_bytes=int(unit_bytes)
    )
    files = [url for _rel, url, _size in source_file_urls(source=source)]
    return {"id": built.pk, "job": built.job_id, "path": built.path, "params": built.params,
            "files": files}  # fmt: skip


def pool(name: str, tokenized_id: str, seq_len: str, shard_size: str) -> dict:
    """Start the build of a pool of one ready tokenized source."""
    from webapp.catalog.services.pools import pool_build

    built = pool_build(
        name=name, tokenized_ids=[int(tokenized_id)], seq_len=int(seq_len),
        shard_size=int(shard_size),
    )  # fmt: skip
    return {"id": built.pk, "job": built.job_id, "path": built.path, "params": built.params}


def main(argv: list[str]) -> int:
    action, *args = argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    print(json.dumps({"tokenize": tokenize, "pool": pool}[action](*args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
