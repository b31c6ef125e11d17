"""``manage.py catalog <action>``: the catalog services for operators and scripts, one
subcommand per service (what the pages do, scriptable). Errors print one line and exit 1."""

from __future__ import annotations

import json
import os
import re

from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError

from shardcore.order import ORDERINGS


class Command(BaseCommand):
    help = (
        "Register and scan sources, tokenize, build pools and mixture versions, materialize "
        "and export them, register runs, flag data, cancel, retry or reap jobs."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("source-register")
        p.add_argument("name")
        p.add_argument("uri")
        p.add_argument("--text-field", default="text")
        p = sub.add_parser("source-scan")
        p.add_argument("source_id", type=int)
        p = sub.add_parser("tokenize")
        p.add_argument("source_id", type=int)
        p.add_argument("--tokenizer")
        p.add_argument(
            "--engine",
            choices=("auto", "reference", "gigatoken", "tiktoken", "tokenizers"),
            default="auto",
        )
        p = sub.add_parser("pool-build")
        p.add_argument("name")
        p.add_argument("tokenized_ids", type=int, nargs="+")
        p.add_argument("--seq-len", type=int, required=True)
        p.add_argument("--filter")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--val-fraction", type=float, default=0.0)
        p.add_argument("--annotation", type=int, action="append", default=[],
                       help="an annotation id the pool joins (repeatable)")  # fmt: skip
        p = sub.add_parser(
            "annotate",
            help="start a job annotating a tokenized source; with several (in priority "
            "order) and minhash, one job clustering near-duplicates across them",
        )
        p.add_argument("tokenized_ids", type=int, nargs="+", metavar="tokenized_id")
        p.add_argument("annotator")
        p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        p.add_argument("--text-from", choices=("auto", "source", "tokens"), default="auto")
        p = sub.add_parser(
            "flag-where", help="flag the documents where a filter over an annotation holds"
        )
        p.add_argument("annotation_id", type=int)
        p.add_argument("filter", help="e.g. 'pii.emails > 0'")
        p.add_argument("--reason", default="")
        p = sub.add_parser("mixture-version")
        p.add_argument("mixture")
        p.add_argument("components", help='JSON: [{"pool": 1, "weight": 0.7}, ...]')
        p.add_argument("--token-budget", type=int, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--stages", help='JSON: [{"name": "anneal", "tokens": 100000}]')
        p.add_argument("--order", default="blend", choices=list(ORDERINGS))
        p.add_argument("--max-repetitions", type=float, default=4.0)
        p = sub.add_parser("materialize", help="start a job writing a version as shards")
        p.add_argument("version_id", type=int)
        p.add_argument("--shard-bytes", type=int, default=64 << 20)
        p = sub.add_parser("export", help="write a version as a trainer config file")
        p.add_argument("version_id", type=int)
        p.add_argument("format", choices=["megatron", "olmo", "olmo-core", "nanotron", "json"])
        p.add_argument("--global-batch-size", type=int, help="nanotron: samples per step")
        p = sub.add_parser("run-register")
        p.add_argument("name")
        p.add_argument("mixture_version_id", type=int)
        p = sub.add_parser("run-progress")
        p.add_argument("run_id", type=int)
        p.add_argument("step", type=int)
        p.add_argument("consumed_samples", type=int)
        p = sub.add_parser("run-resume")
        p.add_argument("run_id", type=int)
        p = sub.add_parser("flag")
        p.add_argument("source_id", type=int)
        p.add_argument("reason")
        p.add_argument("--file")
        p.add_argument("--documents", type=int, nargs="+")
        for name in ("job-cancel", "job-retry"):
            p = sub.add_parser(name)
            p.add_argument("job_id", type=int)
            if name == "job-retry":
                p.add_argument("--include-running", action="store_true",
                               help="also rerun units whose worker is gone")  # fmt: skip
        sub.add_parser(
            "scrub", help="start a scrub job: re-verify every built artifact's checksums now"
        )
        p = sub.add_parser(
            "jobs-reap", help="requeue units of active jobs claimed longer ago than the lease"
        )
        p.add_argument("--lease", type=int, help="seconds (default: SHARDYARD_UNIT_LEASE)")

    def handle(self, *args, action: str, **o):
        from webapp.catalog.errors import CatalogError
        from webapp.catalog.models import ArtifactStatus
        from webapp.catalog.services import (
            annotations,
            exports,
            flags,
            mixtures,
            pools,
            runs,
            sources,
            tokenized,
        )
        from webapp.jobs import services as jobs

        try:
            if action == "source-register":
                src = sources.source_register(
                    name=o["name"], uri=o["uri"], text_field=o["text_field"]
                )
                out = f"source {src.pk} {src.name}: {src.num_files} files, {src.num_documents} documents"
            elif action == "source-scan":
                src = sources.source_scan(source_id=o["source_id"])
                out = f"source {src.pk}: {src.num_documents} documents, {src.bad_lines} bad lines"
            elif action == "tokenize":
                ts = tokenized.tokenized_source_build(
                    source_id=o["source_id"], tokenizer=o["tokenizer"], engine=o["engine"]
                )
                out = f"tokenized source {ts.pk}: {_launched(ts.job_id)}"
            elif action == "pool-build":
                pool = pools.pool_build(
                    name=o["name"], tokenized_ids=o["tokenized_ids"], seq_len=o["seq_len"],
                    filter=o["filter"], seed=o["seed"], val_fraction=o["val_fraction"],
                    annotation_ids=o["annotation"],
                )  # fmt: skip
                out = f"pool {pool.pk}: {_launched(pool.job_id)}"
            elif action == "annotate" and len(o["tokenized_ids"]) > 1:
                out = _annotate_group(o)
            elif action == "annotate":
                ann = annotations.annotation_build(
                    tokenized_id=o["tokenized_ids"][0], annotator=o["annotator"],
                    params="\n".join(o["param"]), text_from=o["text_from"],
                )  # fmt: skip
                out = f"annotation {ann.pk} ({ann.annotator}): " + (
                    "built already" if ann.is_ready else _launched(ann.job_id)
                )
            elif action == "flag-where":
                flag = annotations.annotation_flag_where(
                    annotation_id=o["annotation_id"], filter=o["filter"], reason=o["reason"]
                )
                out = (
                    f"flag {flag.pk}: {len(flag.document_ids)} document(s), "
                    f"{flag.taints.count()} taint(s)"
                )
            elif action == "mixture-version":
                mixture = mixtures.mixture_get_or_create(name=o["mixture"])
                v = mixtures.mixture_version_create(
                    mixture_id=mixture.pk, components=json.loads(o["components"]),
                    token_budget=o["token_budget"], seed=o["seed"],
                    stages=json.loads(o["stages"]) if o["stages"] else None,
                    order=o["order"], max_repetitions=o["max_repetitions"],
                )  # fmt: skip
                v.refresh_from_db()  # built already when jobs run as they are queued
                out = f"mixture version {v.pk}: {mixture.name} v{v.number}, " + (
                    _launched(v.job_id) if v.job_id else v.status
                )
                if v.status == ArtifactStatus.READY:
                    out += (
                        f", {v.num_samples} samples, {v.num_tokens} tokens, "
                        f"fingerprint {v.fingerprint}"
                    )
            elif action == "materialize":
                job = exports.mixture_version_materialize(
                    version_id=o["version_id"], shard_bytes=o["shard_bytes"]
                )
                out = f"materialize of mixture version {o['version_id']}: job {job.pk} {job.state}"
            elif action == "export":
                export = exports.mixture_version_export(
                    version_id=o["version_id"], fmt=o["format"],
                    global_batch_size=o["global_batch_size"],
                )  # fmt: skip
                out = f"export {export.pk} {export.format}: {export.path}"
            elif action == "run-register":
                run = runs.run_register(name=o["name"], mixture_version_id=o["mixture_version_id"])
                out = f"run {run.pk} {run.name}"
            elif action == "run-progress":
                run = runs.run_progress_record(
                    run_id=o["run_id"], step=o["step"], consumed_samples=o["consumed_samples"]
                )
                out = f"run {run.pk}: step {run.last_step}, {run.consumed_samples} samples"
            elif action == "run-resume":
                out = json.dumps(runs.run_resume_position(run_id=o["run_id"]), sort_keys=True)
            elif action == "flag":
                flag = flags.flag_create(
                    reason=o["reason"], source_id=o["source_id"], file_path=o["file"],
                    document_ids=o["documents"],
                )  # fmt: skip
                out = f"flag {flag.pk}: {flag.taints.count()} taint(s)"
            elif action == "scrub":
                from webapp.catalog.scrub import scrub_start

                out = f"scrub: {_launched(scrub_start().pk)}"
            elif action == "job-cancel":
                job = jobs.job_cancel(job_id=o["job_id"])
                out = f"job {job.pk} {job.state}"
            elif action == "job-retry":
                job = jobs.job_retry(job_id=o["job_id"], include_running=o["include_running"])
                out = f"job {job.pk} {job.state}"
            else:
                reaped = jobs.job_reap(lease_seconds=o["lease"])
                out = (
                    "\n".join(
                        f"job {job.pk}: {job.log_tail.splitlines()[-1].split(' ', 2)[-1]}"
                        for job in reaped
                    )
                    or "no lost units"
                )
        except (CatalogError, jobs.JobError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except ObjectDoesNotExist as exc:  # an id that names no row: say which, no traceback
            raise CommandError(_missing(exc, o)) from exc
        except Exception as exc:
            from shardcore import storage

            if not storage.is_store_error(exc):
                raise
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
            raise CommandError(
                f"the object store ({endpoint}) did not answer: {exc}. Check that it is "
                "reachable, the bucket exists and the AWS_* credentials are right"
            ) from exc
        self.stdout.write(out)


def _missing(exc: ObjectDoesNotExist, options: dict) -> str:
    """'no training run 999' for the model whose lookup failed and the id it was given."""
    model = type(exc).__qualname__.split(".")[0]
    name = re.sub(r"(?<!^)(?=[A-Z])", " ", model).lower()
    ids = [str(v) for k, v in options.items() if k.endswith("_id") and v is not None]
    if options.get("tokenized_ids"):  # "annotate A B ...": the ids it was given
        ids = [str(v) for v in options["tokenized_ids"]]
    return f"no {name} {', '.join(ids)}".strip()


def _launched(job_id: int) -> str:
    """'job N queued', or a CommandError when the launch failed (e.g. the broker is down:
    the job is failed with the reason and can be retried)."""
    from webapp.jobs.models import Job, JobState

    job = Job.objects.get(pk=job_id)
    if job.state == JobState.FAILED:
        raise CommandError(f"job {job.pk} failed at launch: {job.error}")
    return f"job {job.pk} {job.state}"


def _annotate_group(o: dict) -> str:
    """``annotate A B ... minhash``: one job clustering near-duplicates across the sources;
    a line per source's annotation."""
    from webapp.catalog.errors import CatalogError
    from webapp.catalog.services.annotation_groups import ANNOTATOR, annotation_group_build

    if o["annotator"] != ANNOTATOR:
        raise CatalogError(
            f"annotate: several tokenized sources are clustered together by {ANNOTATOR} "
            f"only; annotate each with {o['annotator']!r} on its own"
        )
    if o["text_from"] != "auto":
        raise CatalogError("annotate: --text-from applies to one tokenized source")
    rows = annotation_group_build(tokenized_ids=o["tokenized_ids"], params="\n".join(o["param"]))
    state = "built already" if all(a.is_ready for a in rows) else _launched(rows[0].job_id)
    return "\n".join(
        f"annotation {a.pk} ({a.annotator}) of tokenized source {a.tokenized_source_id}: {state}"
        for a in rows
    )
