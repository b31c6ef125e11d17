"""API views: each fetches, lets RolePermission check the role (viewer reads, editor
writes), calls one service or selector, and answers JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.reverse import reverse

from webapp.api import serializers as s
from webapp.api.authentication import TokenRoleAuthentication
from webapp.api.permissions import RolePermission
from webapp.catalog import selectors
from webapp.catalog.errors import CatalogError
from webapp.catalog.services.exports import mixture_version_export, mixture_version_materialize
from webapp.catalog.services.flags import flag_create
from webapp.catalog.services.mixtures import mixture_version_register, mixture_version_save
from webapp.catalog.services.pools import pool_build, pool_register
from webapp.catalog.services.sources import source_register, source_scan
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState
from webapp.jobs.selectors import job_row, job_rows
from webapp.jobs.services import JobError, job_cancel, job_retry
from webapp.links import page_url

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass  # the stubs' alias


class Page(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


class Base:
    # The token's user and role in one query; pages' session cookies work too (schema UI).
    authentication_classes: Sequence[type[BaseAuthentication]] = [
        TokenRoleAuthentication,
        SessionAuthentication,
    ]
    permission_classes: Sequence[_PermissionClass] = [RolePermission]
    pagination_class: type[BasePagination] | None = Page
    # Ids are bigints: anything else is a 404 from the URL map, never a database error.
    lookup_value_regex = r"[0-9]{1,18}"


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def _bad(e: Exception) -> ValidationError:
    """A service's refusal (CatalogError, JobError) as a 400 with its message."""
    return ValidationError({"detail": str(e)})


def _created(request, given, service, shown) -> Response:
    """Validate the request with serializer ``given``, call ``service`` with its fields
    and the user, and answer the new row as ``shown`` (201); a refusal is a 400."""
    data = given(data=request.data)
    data.is_valid(raise_exception=True)
    try:
        row = service(**data.validated_data, created_by=request.user)
    except CatalogError as e:
        raise _bad(e) from e
    return Response(shown(row).data, status=status.HTTP_201_CREATED)


def _registered(request, given, service, shown) -> Response:
    """``_created`` for a service that answers an existing row (``existed``) with 200."""
    data = given(data=request.data)
    data.is_valid(raise_exception=True)
    try:
        row = service(**data.validated_data, created_by=request.user)
    except CatalogError as e:
        raise _bad(e) from e
    code = status.HTTP_200_OK if getattr(row, "existed", False) else status.HTTP_201_CREATED
    return Response(shown(row).data, status=code)


def _accepted(request, body: dict, job_id: int | None) -> Response:
    """202 Accepted with ``body``, the address of the job doing the work in ``Location``."""
    location = reverse("job-detail", args=[job_id], request=request)
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class SourceViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.SourceSerializer

    def get_queryset(self):
        return selectors.source_rows()

    @extend_schema(request=s.SourceRegisterSerializer, responses={201: s.SourceSerializer})
    def create(self, request):
        return _created(request, s.SourceRegisterSerializer, source_register, s.SourceSerializer)

    @extend_schema(request=None, responses={200: s.SourceSerializer})
    @action(detail=True, methods=["post"])
    def scan(self, request, pk=None):
        source = selectors.source_row(source_id=int(pk))  # NotFound: 404
        try:
            source = source_scan(source_id=source.pk)
        except CatalogError as e:
            raise _bad(e) from e
        return Response(s.SourceSerializer(source).data)

    @extend_schema(request=s.TokenizeSerializer, responses={202: s.TokenizedSourceSerializer})
    @action(detail=True, methods=["post"])
    def tokenize(self, request, pk=None):
        """Start a tokenize job over the source's files: 202 Accepted with the tokenized
        source ("building", its ``job``), the job's address in ``Location``; poll the job
        until it succeeds (the tokenized source is then "ready") or fails."""
        source = selectors.source_row(source_id=int(pk), only=["id"])
        data = s.TokenizeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            ts = tokenized_source_build(
                source_id=source.pk, **data.validated_data, created_by=request.user
            )
        except CatalogError as e:
            raise _bad(e) from e
        return _accepted(request, s.TokenizedSourceSerializer(ts).data, ts.job_id)

    @extend_schema(responses={200: s.SourceFileSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def files(self, request, pk=None):
        source = selectors.source_row(source_id=int(pk))
        page = self.paginate_queryset(source.files.order_by("path"))
        return self.get_paginated_response(s.SourceFileSerializer(page, many=True).data)


class PoolViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.PoolSerializer

    def get_queryset(self):
        return selectors.pool_rows()

    def get_serializer_class(self):
        # A list leaves out each pool's quality report (its own address answers it).
        return s.PoolListSerializer if self.action == "list" else s.PoolSerializer

    @extend_schema(request=s.PoolBuildSerializer, responses={201: s.PoolSerializer})
    def create(self, request):
        """Start a pool build job; the pool is ``building`` until the job records it."""

        return _created(request, s.PoolBuildSerializer, pool_build, s.PoolSerializer)

    @extend_schema(
        request=s.PoolRegisterSerializer, responses={201: s.PoolSerializer, 200: s.PoolSerializer}
    )
    @action(detail=False, methods=["post"])
    def register(self, request):
        """Record a pool built outside the service (``shardyard pool`` on Slurm, Ray or a
        workstation, under the data root): checked against its manifest, its parents the
        ready tokenized sources its manifest names by fingerprint. 201 with the pool; the
        same pool registered again answers it (200)."""
        return _registered(request, s.PoolRegisterSerializer, pool_register, s.PoolSerializer)


class MixtureViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.MixtureSerializer

    def get_queryset(self):
        return selectors.mixture_rows()

    @extend_schema(
        request=s.MixtureVersionCreateSerializer,
        responses={202: s.MixtureVersionSerializer, 200: s.MixtureVersionSerializer},
    )
    def create(self, request):
        """Save a draft as the next immutable version of the named mixture (created when
        new). Its schedule is built by a job: 202 Accepted with the version ("building",
        its ``job``) and its address in ``Location``; poll it until it is "ready" (or
        "failed", the job's ``error`` saying why). The same draft saved again answers the
        version that holds it (200). A draft that cannot be built is refused (400) with
        the reason."""

        data = s.MixtureVersionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            version = mixture_version_save(
                name=v["name"],
                draft=v,
                description=v.get("description", ""),
                created_by=request.user,
            )
        except CatalogError as e:
            raise _bad(e) from e
        body = s.MixtureVersionSerializer(version).data
        if getattr(version, "existed", False):
            return Response(body, status=status.HTTP_200_OK)
        location = reverse("mixture-version-detail", args=[version.pk], request=request)
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class MixtureVersionViewSet(Base, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.MixtureVersionSerializer

    def get_queryset(self):
        return selectors.mixture_version_rows()

    def get_serializer_class(self):
        # A list leaves out each version's quality report (its own address answers it).
        if self.action == "list":
            return s.MixtureVersionListSerializer
        return s.MixtureVersionSerializer

    @extend_schema(
        request=s.MixtureVersionRegisterSerializer,
        responses={201: s.MixtureVersionSerializer, 200: s.MixtureVersionSerializer},
    )
    @action(detail=False, methods=["post"])
    def register(self, request):
        """Record a schedule built outside the service (``shardyard mix``) as the next
        version of ``mixture`` (created when new): its components the ready pools its
        manifest names by fingerprint. 201 with the version; the same schedule registered
        again answers its version (200)."""
        return _registered(
            request,
            s.MixtureVersionRegisterSerializer,
            mixture_version_register,
            s.MixtureVersionSerializer,
        )

    @extend_schema(request=s.MaterializeSerializer, responses={202: s.JobSerializer})
    @action(detail=True, methods=["post"])
    def materialize(self, request, pk=None):
        """Start a job writing the version's samples as shards in schedule order (its
        materialized copy, beside the version): 202 Accepted with the job, its address in
        ``Location``. While one is building, asking again answers its job; a version
        materialized already is refused (400)."""
        version = selectors.mixture_version_row(version_id=int(pk), only=["id"])
        data = s.MaterializeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            job = mixture_version_materialize(
                version_id=version.pk, **data.validated_data, created_by=request.user
            )
        except CatalogError as e:
            raise _bad(e) from e
        return _accepted(request, s.JobSerializer(job).data, job.pk)

    @extend_schema(methods=["GET"], responses={200: s.ExportSerializer(many=True)})
    @extend_schema(
        methods=["POST"], request=s.ExportCreateSerializer, responses={201: s.ExportSerializer}
    )
    @action(detail=True, methods=["get", "post"])
    def exports(self, request, pk=None):
        """GET: the version's materialized copy and trainer configs. POST: write the
        version as a trainer config (megatron, olmo-core, nanotron, json) beside it and
        record it (the same request again answers the recorded one). A version on object
        storage has no config file beside local shards: refused (400) with what to do."""
        version = selectors.mixture_version_row(version_id=int(pk), only=["id"])
        if request.method == "GET":
            page = self.paginate_queryset(version.exports.order_by("created_at", "id"))
            return self.get_paginated_response(s.ExportSerializer(page, many=True).data)
        data = s.ExportCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            export = mixture_version_export(
                version_id=version.pk, fmt=v["format"], global_batch_size=v["global_batch_size"]
            )
        except CatalogError as e:
            raise _bad(e) from e
        return Response(s.ExportSerializer(export).data, status=status.HTTP_201_CREATED)


class JobViewSet(Base, viewsets.ReadOnlyModelViewSet):
    def get_serializer_class(self):
        return s.JobDetailSerializer if self.action == "retrieve" else s.JobSerializer

    def get_queryset(self):
        if self.action != "list":
            return job_rows()
        state = self.request.query_params.get("state") or ""
        if state and state not in JobState.values:
            raise ValidationError({"state": f"unknown state; one of {', '.join(JobState.values)}"})
        return job_rows(listing=True, state=state)

    @extend_schema(
        parameters=[OpenApiParameter("state", OpenApiTypes.STR, description="filter by state")]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: s.JobUnitSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def units(self, request, pk=None):
        job = _job(pk)
        page = self.paginate_queryset(job.units.defer("spec", "stats").order_by("index"))
        return self.get_paginated_response(s.JobUnitSerializer(page, many=True).data)

    def _act(self, pk, fn):
        _job(pk)
        try:
            job = fn(job_id=int(pk))
        except JobError as e:
            raise _bad(e) from e
        return Response(s.JobSerializer(job).data)

    @extend_schema(request=None, responses={200: s.JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._act(pk, job_cancel)

    @extend_schema(request=None, responses={200: s.JobSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        return self._act(pk, job_retry)


def _job(pk) -> Job:
    """The job ``pk`` (its id alone), or a 404 naming it."""
    job = job_row(job_id=int(pk))
    if job is None:
        raise NotFound(f"no job {pk}")
    return job


class FlagViewSet(Base, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.FlagSerializer

    def get_queryset(self):
        return selectors.flag_rows()

    @extend_schema(request=s.FlagCreateSerializer, responses={201: s.FlagSerializer})
    def create(self, request):
        data = s.FlagCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        selectors.source_row(source_id=v["source"], only=["id"])  # NotFound: 404
        try:
            flag = flag_create(
                reason=v["reason"],
                source_id=v["source"],
                file_path=v.get("file_path"),
                document_ids=v.get("document_ids"),
                created_by=request.user,
            )
        except CatalogError as e:
            raise _bad(e) from e
        return Response(s.FlagSerializer(flag).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="indices greater than this (default -1)"),
            OpenApiParameter("limit", int, description="at most this many (100; up to 10,000)"),
        ],
        responses={
            200: inline_serializer(
                "FlagDocumentsPage",
                {
                    "num_documents": serializers.IntegerField(allow_null=True),
                    "document_ids": serializers.ListField(child=serializers.IntegerField()),
                    "next_after": serializers.IntegerField(allow_null=True),
                },
            )
        },
    )
    @action(detail=True, methods=["get"])
    def documents(self, request, pk=None):
        # The document indices a flag names, ascending, a page at a time: ?after=&limit=;
        # next_after is the after of the next page (null at the end).
        flag = selectors.flag_row(flag_id=int(pk), only=["id", "num_documents"])
        try:
            after = int(request.query_params.get("after", -1))
            limit = int(request.query_params.get("limit", 100))
        except ValueError as e:
            raise ValidationError({"detail": "after and limit are integers"}) from e
        if not -1 <= after <= 2**62:
            raise ValidationError({"detail": f"after: from -1 to 2^62, got {after}"})
        return Response(selectors.flag_documents_page(flag=flag, after=after, limit=limit))

    @extend_schema(
        responses={
            200: inline_serializer(
                "FlagTaints",
                {
                    "flag": s.FlagSerializer(),
                    "taints": serializers.ListField(child=serializers.DictField()),
                    "page": serializers.IntegerField(),
                    "has_next": serializers.BooleanField(),
                    "counts": serializers.DictField(child=serializers.IntegerField()),
                    "reads": serializers.DictField(child=serializers.IntegerField()),
                    "taint": serializers.DictField(),
                },
            )
        }
    )
    @action(detail=True, methods=["get"])
    def taints(self, request, pk=None):
        # One page of taints (50, in the order recorded): ?page=N; has_next says more.
        detail = selectors.flag_detail(flag_id=int(pk), page=request.query_params.get("page", 1))
        taints = [
            {
                "label": t["label"],
                "url": page_url(t["kind"], t["id"]),
                "documents": t["documents"],
                "created_at": t["created_at"],
                **({"first_read": _flag_read(t["read"])} if "read" in t else {}),
            }
            for t in detail["taints"]
        ]
        return Response(
            {
                "flag": s.FlagSerializer(detail["flag"]).data,
                "taints": taints,
                "page": detail["page"],
                "has_next": detail["has_next"],
                "counts": detail["counts"],
                "reads": detail["reads"],
                "taint": detail["taint"],
            }
        )


class AuditViewSet(Base, viewsets.ViewSet):
    @extend_schema(
        parameters=[s.AuditQuerySerializer],
        responses={
            200: inline_serializer(
                "AuditResult",
                {
                    "source": serializers.IntegerField(),
                    "pools": serializers.ListField(child=serializers.IntegerField()),
                    "mixture_versions": serializers.ListField(child=serializers.IntegerField()),
                    "runs": s.RunSerializer(many=True),
                    "num_runs": serializers.IntegerField(help_text="all runs; 'runs' lists 100"),
                },
            )
        },
    )
    def list(self, request):
        q = s.AuditQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        result = selectors.audit_search(**q.validated_data)  # NotFound: 404
        return Response(
            {
                "source": result["source"].pk,
                "pools": [p.pk for p in result["pools"]],
                "mixture_versions": [v.pk for v in result["versions"]],
                "runs": s.RunSerializer(result["runs"], many=True).data,
                "num_runs": result["num_runs"],
            }
        )


def _flag_read(row: dict) -> dict:
    """A ``flag_read`` row as JSON: the flag's id, the answer and its one-line text."""
    out = {k: v for k, v in row.items() if k != "flag"}
    return {
        "flag": row["flag"].pk,
        "reason": row["flag"].reason,
        **out,
        "text": selectors.flag_read_text(row),
    }


FlagReadSerializer = inline_serializer(
    "FlagRead",
    {
        "flag": serializers.IntegerField(),
        "reason": serializers.CharField(),
        "first_sample": serializers.IntegerField(
            allow_null=True, help_text="first training sample holding a flagged document"
        ),
        "read": serializers.BooleanField(help_text="the run's reports have consumed it"),
        "never": serializers.BooleanField(help_text="no sample of the mixture holds one"),
        "step": serializers.IntegerField(
            required=False,
            help_text="read: the step that read it (or the report bounding it); "
            "not read: the run's current step",
        ),
        "exact": serializers.BooleanField(required=False),
        "after_step": serializers.IntegerField(required=False),
        "by_step": serializers.IntegerField(required=False),
        "consumed_samples": serializers.IntegerField(required=False),
        "error": serializers.CharField(required=False),
        "text": serializers.CharField(),
    },
    many=True,
)


ResumeSerializer = inline_serializer(
    "ResumePosition",
    {
        "run": serializers.IntegerField(),
        "step": serializers.IntegerField(),
        "sample": serializers.IntegerField(),
        "stage": serializers.CharField(),
        "pool": serializers.CharField(),
        "pool_id": serializers.IntegerField(),
        "pool_path": serializers.CharField(),
        "epoch": serializers.IntegerField(),
        "shard": serializers.IntegerField(),
        "shard_prefix": serializers.CharField(),
        "record": serializers.IntegerField(),
        "record_in_shard": serializers.IntegerField(),
        "token_offset": serializers.IntegerField(),
        "mixture_version": serializers.IntegerField(
            help_text="the version read from here on (the run's current segment)"
        ),
        "version_sample": serializers.IntegerField(help_text="the sample in that version"),
        "segment": serializers.IntegerField(),
        "segments": serializers.ListField(child=serializers.DictField()),
    },
)
