"""Actions that start a build: tokenize, pool, mixture version, materialize; and export."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardcore import export as export_formats
from shardcore.cli import number_arg
from shardcore.order import ORDERINGS
from webapp.catalog.management.actions.base import Action, launched
from webapp.catalog.models import ArtifactStatus
from webapp.catalog.services import exports, mixtures, pools, tokenized


class Tokenize(Action):
    name = "tokenize"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("source_id", type=int)
        parser.add_argument("--tokenizer")
        parser.add_argument(
            "--engine",
            choices=("auto", "reference", "gigatoken", "tiktoken", "tokenizers"),
            default="auto",
        )

    def run(self, o: dict[str, Any]) -> str:
        ts = tokenized.tokenized_source_build(
            source_id=o["source_id"], tokenizer=o["tokenizer"], engine=o["engine"]
        )
        return f"tokenized source {ts.pk}: {launched(ts.job_id)}"


class PoolBuild(Action):
    name = "pool-build"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("tokenized_ids", type=int, nargs="+")
        parser.add_argument("--seq-len", type=number_arg("seq_len"), required=True)
        parser.add_argument("--filter")
        parser.add_argument("--seed", type=number_arg("seed"), default=0)
        parser.add_argument("--val-fraction", type=number_arg("val_fraction"), default=0.0)
        parser.add_argument(
            "--annotation",
            type=int,
            action="append",
            default=[],
            help="an annotation id the pool joins (repeatable)",
        )

    def run(self, o: dict[str, Any]) -> str:
        pool = pools.pool_build(
            name=o["name"],
            tokenized_ids=o["tokenized_ids"],
            seq_len=o["seq_len"],
            filter=o["filter"],
            seed=o["seed"],
            val_fraction=o["val_fraction"],
            annotation_ids=o["annotation"],
        )
        return f"pool {pool.pk}: {launched(pool.job_id)}"


class MixtureVersionCreate(Action):
    name = "mixture-version"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("mixture")
        parser.add_argument("components", help='JSON: [{"pool": 1, "weight": 0.7}, ...]')
        parser.add_argument("--token-budget", type=number_arg("tokens"), required=True)
        parser.add_argument("--seed", type=number_arg("seed"), default=0)
        parser.add_argument("--stages", help='JSON: [{"name": "anneal", "tokens": 100000}]')
        parser.add_argument("--order", default="blend", choices=list(ORDERINGS))
        parser.add_argument("--max-repetitions", type=number_arg("max_repetitions"), default=4.0)

    def run(self, o: dict[str, Any]) -> str:
        mixture = mixtures.mixture_get_or_create(name=o["mixture"])
        v = mixtures.mixture_version_create(
            mixture_id=mixture.pk,
            components=json.loads(o["components"]),
            token_budget=o["token_budget"],
            seed=o["seed"],
            stages=json.loads(o["stages"]) if o["stages"] else None,
            order=o["order"],
            max_repetitions=o["max_repetitions"],
        )
        v.refresh_from_db()  # built already when jobs run as they are queued
        out = f"mixture version {v.pk}: {mixture.name} v{v.number}, " + (
            launched(v.job_id) if v.job_id else v.status
        )
        if v.status == ArtifactStatus.READY:
            out += f", {v.num_samples} samples, {v.num_tokens} tokens, fingerprint {v.fingerprint}"
        return out


class Materialize(Action):
    name = "materialize"
    help = "start a job writing a version as shards"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("version_id", type=int)
        parser.add_argument("--shard-bytes", type=int, default=64 << 20)

    def run(self, o: dict[str, Any]) -> str:
        job = exports.mixture_version_materialize(
            version_id=o["version_id"], shard_bytes=o["shard_bytes"]
        )
        return f"materialize of mixture version {o['version_id']}: job {job.pk} {job.state}"


class Export(Action):
    name = "export"
    help = "write a version as a trainer config file"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("version_id", type=int)
        parser.add_argument("format", choices=export_formats.accepted_names())
        parser.add_argument("--global-batch-size", type=int, help="nanotron: samples per step")

    def run(self, o: dict[str, Any]) -> str:
        export = exports.mixture_version_export(
            version_id=o["version_id"], fmt=o["format"], global_batch_size=o["global_batch_size"]
        )
        return f"export {export.pk} {export.format}: {export.path}"
