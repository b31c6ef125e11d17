"""Format-2 manifests (one JSON document listing every shard and file, block checksums
as hex), as the code before format 3 wrote them: what the readers must keep reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardcore import manifest as mf


def format2_document(manifest: dict[str, Any]) -> dict[str, Any]:
    """The format-2 JSON document of a manifest read back (any format)."""
    doc = {k: v for k, v in manifest.items() if k not in (*mf.TABLE_KEYS, mf.LAYOUT)}
    doc["format_version"] = 2
    if "shards" in manifest:
        doc["shards"] = [dict(sh) for sh in manifest["shards"]]
    if "cumulative_records" in manifest:
        doc["cumulative_records"] = [int(c) for c in manifest["cumulative_records"]]
    if "files" in manifest:
        doc["files"] = [
            {**e, "blocks": e["blocks"]} if "blocks" in e else dict(e)
            for e in mf.file_entries(manifest)
        ]
    return doc


def rewrite_as_format2(directory: str | Path) -> dict[str, Any]:
    """Replace an artifact's manifest by its format-2 document (as format 2 wrote it: one
    ``manifest.json``, indented, sorted keys) and drop the table files."""
    directory = Path(directory)
    doc = format2_document(mf.read_manifest(directory))
    (directory / mf.MANIFEST_NAME).write_text(json.dumps(doc, indent=1, sort_keys=True))
    for name in (mf.TABLE_NAME, mf.BLOCKS_NAME):
        (directory / name).unlink(missing_ok=True)
    return doc
