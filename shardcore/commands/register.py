"""``shardyard register DIR``: record an artifact the command line built (on a workstation,
Slurm or Ray) in a Shardyard server's catalog, as if the service had built it.

The server checks the artifact against its manifest and finds its inputs in the catalog by
fingerprint (a pool's tokenized sources, a schedule's pools), so that lineage, flags and
taints reach it; the directory must lie under the server's data root. Pools and mixture
schedules are registered; a tokenized source is built by the catalog from a registered
source."""

from __future__ import annotations

import argparse
import os

from shardcore import storage
from shardcore.cli import CLIError
from shardcore.client import ShardyardClient, ShardyardError, ShardyardHTTPError
from shardcore.errors import ManifestError, WrongKindError
from shardcore.manifest import read_manifest

# The API address that records each kind of artifact.
ENDPOINTS = {"pool": "api/pools/register/", "mixture": "api/mixture-versions/register/"}


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="record a pool or mixture built by the command line in a server's catalog",
        description="Record a pool or a mixture schedule built outside the service (under "
        "the server's data root) in its catalog, with lineage to the catalog artifacts it "
        "was built from (matched by fingerprint).",
    )
    p.add_argument("artifact", metavar="DIR", help="the artifact's directory (or s3:// prefix)")
    p.add_argument(
        "--name",
        default="",
        help="a pool's name, or the mixture a schedule becomes the next version of "
        "(default: the directory's name)",
    )
    p.add_argument("--note", default="", help="a mixture version's note")
    p.add_argument(
        "--server",
        default=os.environ.get("SHARDYARD_URL", "http://127.0.0.1:8000"),
        help="the Shardyard server (default $SHARDYARD_URL or http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("SHARDYARD_TOKEN", ""),
        help="an editor's API token (default $SHARDYARD_TOKEN)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    where = storage.resolve(args.artifact)
    try:
        kind = read_manifest(where, kind=tuple(ENDPOINTS))["kind"]
    except WrongKindError as exc:
        raise CLIError(f"{exc} (pools and mixtures are registered)") from None
    except (ManifestError, OSError) as exc:
        raise CLIError(f"{where}: no finished artifact there ({exc})") from None
    body = {"path": where}
    if kind == "pool":
        body["name"] = args.name
    else:
        body.update(mixture=args.name, note=args.note)
    try:
        client = ShardyardClient(args.server, token=args.token, retries=2)
        row = client.request("POST", ENDPOINTS[kind], body)
    except ShardyardHTTPError as exc:
        detail = exc.body.get("detail", exc.body) if isinstance(exc.body, dict) else exc.body
        raise CLIError(f"the server refused {where}: {detail}") from None
    except (ShardyardError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    if kind == "pool":
        print(f"pool {row['name']} (#{row['id']}): {where}")
    else:
        print(f"mixture version #{row['id']} (v{row.get('number')}): {where}")
    return 0
